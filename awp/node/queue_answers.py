"""Answers to retried queue requests, found in O(1) without the store's writer (issue 34.5).

A claimant whose answer was lost asks again with the same ``req`` (a claim)
or the same lease (a ``complete``); the arbiter must give the same answer,
with the lease record it announced the first time.  Finding that record
used to read and parse every record of the topic inside the writer's
transaction: 100 retries on a 9,500-record queue held the owner's own
``awp post`` for 12 s.

Here the owner keeps, on the event loop and only from what it committed,
the answer and record of each current lease's claim and of each lease that
completed an item.  A retry that finds its entry is answered at once and
never reaches the writer; one that does not (after a restart, or once
pushed out of the bound) goes to the arbiter, which looks the record up by
the item's index.  The entries follow the lease records the owner commits
(:meth:`note`): a renewal moves a claim's ``until``; an end (released,
failed, expired, done) drops it, so a retry after that is decided afresh,
as the arbiter would.  ``bound`` entries of each kind at most, oldest
forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from ..board.queue import Decision
from ..wire.board import Record
from ..wire.timefmt import parse_ts

ENDS = ("released", "failed", "expired", "done")


class RetryAnswers:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        # (topic, claimant, req) -> its current lease's answer and claim record
        self._claims: OrderedDict[tuple[str, str, str], tuple[Decision, Record]] = OrderedDict()
        self._by_lease: dict[tuple[str, str], tuple[str, str, str]] = {}  # -> the claim's key
        # (topic, lease) -> the answer and record of the complete that made an item done
        self._done: OrderedDict[tuple[str, str], tuple[Decision, Record]] = OrderedDict()

    def claimed(self, topic: str, who: str, req: str, d: Decision, rec: Record | None) -> None:
        """A claim the arbiter committed (its first answer, not a retry's)."""
        if not req or rec is None or d.state != "claimed" or d.again:
            return
        key = (topic, who, req)
        self._claims[key] = (d, rec)
        self._by_lease[(topic, d.lease)] = key
        while len(self._claims) > self.bound:
            (t, _w, _r), (old, _rec) = self._claims.popitem(last=False)
            self._by_lease.pop((t, old.lease), None)

    def note(self, recs: list[Record]) -> None:
        """Lease records the owner committed: renewals, ends, completions."""
        for r in recs:
            if r.kind != "lease":
                continue
            state, lease = r.doc.get("state"), r.doc.get("lease", "")
            key = self._by_lease.get((r.topic, lease))
            if state == "renewed" and key in self._claims:
                d, rec = self._claims[key]
                self._claims[key] = (replace(d, until=parse_ts(r.doc["until"])), rec)
            elif state in ENDS:
                if key is not None:
                    self._by_lease.pop((r.topic, lease), None)
                    self._claims.pop(key, None)
                if state == "done":
                    self._done[(r.topic, lease)] = (
                        Decision("done", r.of, r.doc["holder"], lease, 0), r)
                    while len(self._done) > self.bound:
                        self._done.popitem(last=False)

    def claim(self, topic: str, who: str, req: str, now: int) -> tuple[Decision, Record] | None:
        """The answer to a retried claim whose lease is current, or None (ask the arbiter)."""
        hit = self._claims.get((topic, who, req)) if req else None
        if hit is None or hit[0].until <= now:
            return None  # unknown, or the lease ran out: the arbiter decides afresh
        return replace(hit[0], again=True), hit[1]

    def complete(self, topic: str, who: str, lease: str) -> tuple[Decision, Record] | None:
        """The answer to a retried ``complete`` the arbiter committed, or None."""
        hit = self._done.get((topic, lease))
        if hit is None or hit[0].holder != who:
            return None
        return replace(hit[0], again=True), hit[1]

    def clear(self) -> None:
        self._claims.clear()
        self._by_lease.clear()
        self._done.clear()

    def __len__(self) -> int:
        return len(self._claims) + len(self._done)


__all__ = ["RetryAnswers"]
