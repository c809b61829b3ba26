"""Which records a topic keeps: the same answer on every host that holds the same records.

Anti-entropy only converges if every host drops the same records, so the
rule is a function of the set of records, the topic's policy and the clock,
never of the order records arrived in:

1. **Rate.** Per author (the owner is exempt), records in order of
   ``(ts, hash)``; one counts when fewer than ``rate`` of that author's
   counted records have ``ts`` in the minute before it (``ts - 60 s``
   excluded, ``ts`` included).  An earlier record arriving late can push a
   later one out; that is what makes the result order-free.
2. **Age.** Records dated before ``now - keep_days`` go.
3. **Shares.** The owner's records are kept, newest first, within ``keep``
   records and ``keep_bytes`` of their own: nobody else's records can push
   them out.  Everyone else shares another ``keep`` and ``keep_bytes`` *fairly*:
   while over a bound, the author holding the most (records, then bytes)
   loses its oldest record.  So an author that floods, or backdates, or a
   crowd of fresh keys, push out their own records first, and an author
   holding less than an equal share of the topic loses nothing (issue 19:
   before this, one author's 1,200 backdated posts pushed every other
   record, the owner's included, below a single floor).

The floor returned is ``now - keep_days``: hosts compare digests from it
(:mod:`.sync`).  A record one host dropped for its author's share and
another still holds is offered again only while their sets differ; the
same exchange brings the newer records that push it out there too.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..wire.board import Policy, is_owner

DAY_MS = 86_400_000
WINDOW_MS = 60_000
CATCH_UP = 10  # records dated back: at most this many minutes' ``rate`` arrive a minute


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
        if not is_owner(owner, e.author):
            q = recent.setdefault(e.author, deque())
            while q and q[0] <= e.ts - WINDOW_MS:
                q.popleft()
            if len(q) >= rate:
                continue
            q.append(e.ts)
        out.append(e)
    return out


def _newest_within(es: list[Entry], n: int, nbytes: int) -> list[Entry]:
    """The newest of ``es`` (in ``(ts, hash)`` order) within ``n`` records and ``nbytes``."""
    out: list[Entry] = []
    total = 0
    for e in reversed(es):
        if len(out) >= n or total + e.size > nbytes:
            break
        total += e.size
        out.append(e)
    out.reverse()
    return out


def fair_shares(others: list[Entry], n: int, nbytes: int) -> list[Entry]:
    """``others`` (in ``(ts, hash)`` order) cut to ``n`` records and ``nbytes``, fairly.

    While over a bound, the author holding the most (records when over
    ``n``, bytes when over ``nbytes``; ties by key) loses its oldest record.
    The result depends only on the set.
    """
    by: dict[str, deque[Entry]] = {}
    for e in others:
        by.setdefault(e.author, deque()).append(e)
    size = {a: sum(e.size for e in q) for a, q in by.items()}
    count = len(others)
    total = sum(size.values())
    dropped: set[str] = set()

    def cut(over: Callable[[], bool], weight: Callable[[str], tuple]) -> None:
        nonlocal count, total
        heap = [(weight(a), a) for a in by if by[a]]
        heapq.heapify(heap)
        while over() and heap:
            w, a = heapq.heappop(heap)
            if w != weight(a) or not by[a]:
                continue  # stale: pushed again with its current weight
            e = by[a].popleft()
            dropped.add(e.hash)
            count -= 1
            total -= e.size
            size[a] -= e.size
            if by[a]:
                heapq.heappush(heap, (weight(a), a))

    cut(lambda: count > n, lambda a: (-len(by[a]), -size[a]))
    cut(lambda: total > nbytes, lambda a: (-size[a], -len(by[a])))
    return [e for e in others if e.hash not in dropped]


def kept(entries: Iterable[Entry], owner: str, policy: Policy,
         now_ms: int) -> tuple[list[Entry], int]:
    """The entries a host keeps, oldest first, and the floor time (rules 1-3)."""
    floor = now_ms - policy.keep_days * DAY_MS
    counted = [e for e in within_rate(entries, owner, policy.rate) if e.ts >= floor]
    own = _newest_within([e for e in counted if is_owner(owner, e.author)], policy.keep,
                         policy.keep_bytes)
    rest = fair_shares([e for e in counted if not is_owner(owner, e.author)], policy.keep, policy.keep_bytes)
    return sorted(own + rest, key=lambda e: (e.ts, e.hash)), floor
