"""The topic's owner as sequencer: the pure rules (SPEC.md section 14, "The owner stamps").

Every host used to judge another author's record at its own clock and in its
own arrival order, so after a revocation one host kept a post another
refused, and rates and retention came out differently from host to host.
The rule the project follows for such decisions (``design.md``) is that a
decision that must be the same everywhere is made once and carried as a
signed record.  So the topic's owner decides: it admits each record of
another author once, at its clock, and signs a *stamp* naming the record
with a per-topic arrival sequence number and the owner's arrival time.
Every other host keeps such a record only beside a valid stamp, and uses the
stamp's time, never its own clock nor the author's ``ts``, wherever a rule
needs a time.  Hosts holding the same stamped records then keep the same
ones.

The idea is the one of a relay that gives each message of a space a
contiguous ``seq`` and its own timestamp (the iris relay's per-space log):
the sequence is both the order everybody agrees on and the way a reader
sees that it missed something (a hole in the numbers).

This module holds what needs no I/O: the owner's admission rule, which
refusals are final, and the bookkeeping of holes in the seqs a host has
seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.board import Policy, Record
from .perms import TOO_EARLY, admit

OVER_RATE = "author over the topic's rate on arrival at the owner (offered again later)"
NO_STAMP = "another author's record without the owner's stamp"
LATER = (TOO_EARLY, OVER_RATE)  # refusals the author's host retries; every other is final
MAX_HOLES = 4096  # seqs a host waits for per topic; past it a gap is only a resync


def admission(rec: Record, policy: Policy | None, now_ms: int, arrived: int) -> str:
    """Empty when the owner stamps ``rec`` now; otherwise why not.

    The rights (grant, member, revocation, ban) and the size are judged at
    the owner's clock (:func:`awp.board.perms.admit`), and the rate on
    arrival: ``arrived`` is how many of the author's records the owner
    stamped in the minute before now.  Because the stamp's time is the time
    the retention rule counts, a record stamped under this rule is never
    dropped later for its rate, on any host.
    """
    why = admit(rec, policy, now_ms)
    if why:
        return why
    if policy is not None and arrived >= policy.rate:
        return OVER_RATE
    return ""


def final(why: str) -> bool:
    """Whether a refusal ends a record (the author's host drops it) or it is offered again."""
    return why not in LATER


@dataclass
class Holes:
    """The seqs of one topic a host has not seen though it saw a later one.

    A relay that withholds a record leaves a hole in the owner's numbers: a
    host that took seq 7 after seq 5 knows seq 6 exists.  It waits a few
    seconds (the record may be on another path) and then asks every peer
    again.  The newest seq a host saw also tells it, against the owner's
    signed head, that it lacks the newest records.
    """

    top: int = 0  # the highest seq seen
    missing: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)  # missing ones every peer was asked for

    def explained(self, head_seq: int) -> None:
        """The owner's head says we hold all it holds: missing seqs up to its own are
        records it no longer keeps (deleted, past retention), not withheld ones."""
        self.missing = {s for s in self.missing if s > head_seq}
        self.asked &= self.missing

    def saw(self, seq: int) -> bool:
        """Note seq ``seq``; True when it opened a hole."""
        self.missing.discard(seq)
        self.asked.discard(seq)
        if seq <= self.top:
            return False
        opened = seq > self.top + 1 and self.top > 0
        if opened:
            lo = max(self.top + 1, seq - MAX_HOLES)
            self.missing.update(range(lo, seq))
            while len(self.missing) > MAX_HOLES:
                self.missing.discard(min(self.missing))
        self.top = seq
        return opened

    def behind(self, head_seq: int) -> int:
        """How many seqs the owner's head names beyond what this host saw."""
        return max(0, head_seq - self.top)


__all__ = ["Holes", "LATER", "NO_STAMP", "OVER_RATE", "admission", "final"]
