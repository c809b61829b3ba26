"""What a subscriber can tell from the owner's signed head: whether a relay withheld anything.

A relay passes records and the owner's document on, and could drop some (a
post, the document with a ban) without anyone noticing.  The owner therefore
signs, now and then, a *head*: its document's ``seq`` and the digest summary
of the records it holds (SPEC.md section 14).  A subscriber compares the head
with what it holds: a newer ``seq`` means it lacks the owner's policy;
a range where it holds fewer records than the owner means records were
withheld (or are still on their way); a range with the same count and another
fingerprint means it holds something the owner does not (say, a banned
author's post the owner refused).  Either way it compares the topic again
with every peer it has, so another path can fill the gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.timefmt import parse_ts
from .sync import Holdings


@dataclass(frozen=True)
class Gap:
    """How a subscriber's copy differs from the owner's head."""

    policy_behind: bool  # the owner has a newer document than ours
    missing: int  # records the owner holds in ranges where we hold fewer
    differs: int  # ranges whose fingerprints differ though we hold as many

    @property
    def clean(self) -> bool:
        return not (self.policy_behind or self.missing or self.differs)


def compare(head: dict, held: Holdings, doc_seq: int | None, floor: int) -> Gap:
    """Compare a checked head with our holdings from ``max(head floor, our floor)`` on."""
    missing = differs = 0
    start = max(int(head["floor"]), floor)
    for r in head["ranges"]:
        lo, hi = int(r["lo"]), int(r["hi"])
        if hi <= start:
            continue
        if lo < start:  # part of the range is below a floor: compare only what both keep
            continue
        n, fp = held.summary(lo, hi)
        if n < r["n"]:
            missing += r["n"] - n
        elif fp != r["fp"]:
            differs += 1
    return Gap(doc_seq is None or doc_seq < head["doc"], missing, differs)


def still_lacking(head: dict, held: Holdings, doc_seq: int | None, floor: int) -> bool:
    """Whether, some seconds after ``head`` came, we still lack what it names.

    Records signed after the head are on their way at any moment, so the
    newest head nearly always names a few we do not hold yet; the head the
    check started with has had time to arrive.  Only records up to its time
    are compared, and only a shortfall counts (a newer policy, fewer records in
    a range, or as many with another fingerprint): holding more than the owner
    did then is what the traffic since looks like, and asking peers again
    would not take a record away anyway.
    """
    if doc_seq is None or doc_seq < head["doc"]:
        return True
    end = parse_ts(head["ts"]) + 1  # what we hold up to the head's time (no copy of it)
    start = max(int(head["floor"]), floor)
    for r in head["ranges"]:
        lo = int(r["lo"])
        if lo < start:  # below a floor, or only partly above it
            continue
        n, fp = held.summary(lo, max(lo, min(int(r["hi"]), end)))
        if n < r["n"] or (n == r["n"] and fp != r["fp"]):
            return True
    return False
