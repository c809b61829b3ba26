"""Which records a topic keeps: the same answer on every host that holds the same records.

Anti-entropy only converges if every host drops the same records, so the
rule is a function of the set of records, the topic's policy and the clock,
never of the order records arrived in:

1. **Rate.** Per author (the owner is exempt), records in order of
   ``(ts, hash)``; one counts when fewer than ``rate`` of that author's
   counted records have ``ts`` in the minute before it (``ts - 60 s``
   excluded, ``ts`` included).  An earlier record arriving late can push a
   later one out; that is what makes the result order-free.  A flooding
   author is held to ``rate`` per minute of its own claimed time, and
   backdating only moves it into older minutes, which rule 2 trims.
2. **Floor.** The newest records are kept down to a floor time: the latest
   of ``now - keep_days``, the ``ts`` of the ``keep``-th newest counted
   record, and the ``ts`` of the record at which the newest records pass
   ``keep_bytes``.  Everything at or after the floor is kept, so records
   sharing the floor's millisecond are all kept or all dropped.

The floor is also what two hosts compare digests from (:mod:`.sync`), so a
record one of them already dropped is never sent back to it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ..wire.board import Policy

DAY_MS = 86_400_000
WINDOW_MS = 60_000


@dataclass(frozen=True)
class Entry:
    """What retention needs to know of a record."""

    ts: int
    hash: str
    author: str
    size: int


def within_rate(entries: Iterable[Entry], owner: str, rate: int) -> list[Entry]:
    """The entries rule 1 counts, in ``(ts, hash)`` order (each hash once)."""
    recent: dict[str, deque[int]] = {}
    out: list[Entry] = []
    unique = {e.hash: e for e in entries}.values()
    for e in sorted(unique, key=lambda e: (e.ts, e.hash)):
        if e.author != owner:
            q = recent.setdefault(e.author, deque())
            while q and q[0] <= e.ts - WINDOW_MS:
                q.popleft()
            if len(q) >= rate:
                continue
            q.append(e.ts)
        out.append(e)
    return out


def floor_ms(counted: list[Entry], policy: Policy, now_ms: int) -> int:
    """The oldest ``ts`` kept (rule 2); ``counted`` in ``(ts, hash)`` order."""
    floor = now_ms - policy.keep_days * DAY_MS
    if len(counted) > policy.keep:
        floor = max(floor, counted[-policy.keep].ts)
    total = 0
    for e in reversed(counted):
        total += e.size
        if total > policy.keep_bytes:
            # this record does not fit: the floor is just after it
            floor = max(floor, e.ts + 1)
            break
    return floor


def kept(entries: Iterable[Entry], owner: str, policy: Policy,
         now_ms: int) -> tuple[list[Entry], int]:
    """The entries a host keeps, oldest first, and the floor time."""
    counted = within_rate(entries, owner, policy.rate)
    floor = floor_ms(counted, policy, now_ms)
    return [e for e in counted if e.ts >= floor], floor
