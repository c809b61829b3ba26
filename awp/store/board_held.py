"""What a host holds of each topic, kept in memory and brought up to date by what changed.

A head (the owner's, every 2 s while a topic changes), a subscriber's gap
check and every digest exchange compare *all* the ``(ts, hash)`` a host holds
of a topic.  Reading them from SQLite each time costs what the topic holds
(32 ms for 10,000 records, issue 24), though between two looks only a few
records arrived.  :class:`HeldCache` keeps one :class:`Holdings` a topic and
reads only what is new since the last look:

* rows are only ever added with a larger arrival ``seq`` (AUTOINCREMENT: never
  given twice), so the rows past the highest ``seq`` seen are what arrived;
* ``board_usage.n`` counts every row of the topic (triggers on insert and
  delete), so ``n`` then, plus the rows that arrived, must equal ``n`` now:
  anything else means rows were deleted (retention, a ban, a refused waiting
  record) or a transaction we read from was rolled back, and the topic is
  read in full again;
* our own records that wait for the owner's stamp are not held; they are
  remembered by ``seq`` and looked up again, and join the holdings, at their
  stamped time, once the stamp came (the one in-place change of a row while
  the daemon runs; rows stored under the old rule are restamped at start,
  before the board uses the cache, and the board drops it after that).

All of it is read in one snapshot (a savepoint on a reader's connection),
so a commit between two queries cannot be half seen, and only what was
committed is ever kept.  Every :data:`FULL_EVERY` looks a topic is
read in full anyway: a change this reasoning missed lasts minutes, not forever.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..board.sync import Holdings

FULL_EVERY = 150  # looks between two full reads of a topic (a head every 2 s: 5 minutes)
MAX_WAITING = 512  # our waiting records looked up again one by one; more: a full read

T = TypeVar("T")


@dataclass
class _Copy:
    held: Holdings
    n: int  # board_usage.n in the snapshot read (waiting rows included)
    top: int  # the highest arrival seq seen
    waiting: set[int] = field(default_factory=set)  # seqs of our rows that wait for a stamp
    looks: int = 0  # incremental looks since the last full read


class HeldCache:
    """The holdings of each topic, shared by the threads that read the store."""

    def __init__(self) -> None:
        self._copies: dict[str, _Copy] = {}
        self._lock = threading.Lock()
        self.full_reads = 0  # for tests and the bench: how often a topic was read in full

    def using(self, c: sqlite3.Connection, topic: str, fn: Callable[[Holdings], T]) -> T:
        """``fn`` of the topic's holdings as ``c`` sees them now.

        ``fn`` runs under the cache's lock: the holdings it is given change
        with the next look, so it must not keep them.  Inside a write
        transaction (the writer's jobs) the topic is read in full and nothing
        is kept: what that view holds may yet be rolled back, and the arrival
        seqs it used given again to other rows, which no later look could tell.
        """
        if c.in_transaction:
            return fn(_full(c, topic).held)
        with self._lock:
            return fn(self._fresh(c, topic))

    def drop(self, topic: str | None = None) -> None:
        """Forget one topic (or all): its next look reads it in full."""
        with self._lock:
            if topic is None:
                self._copies.clear()
            else:
                self._copies.pop(topic, None)

    def _fresh(self, c: sqlite3.Connection, topic: str) -> Holdings:
        c.execute("SAVEPOINT board_held")
        try:
            copy = self._copies.get(topic)
            if copy is None or copy.looks >= FULL_EVERY or not _catch_up(c, topic, copy):
                copy = _full(c, topic)
                self._copies[topic] = copy
                self.full_reads += 1
            return copy.held
        finally:
            c.execute("RELEASE board_held")


def _usage(c: sqlite3.Connection, topic: str) -> int:
    row = c.execute("SELECT n FROM board_usage WHERE topic = ?", (topic,)).fetchone()
    return int(row[0]) if row else 0


def _full(c: sqlite3.Connection, topic: str) -> _Copy:
    n, top = _usage(c, topic), 0
    keys: list[tuple[int, str]] = []
    waiting: set[int] = set()
    for seq, ts, h, wait in c.execute(
            "SELECT seq, ts, hash, waiting FROM board_records WHERE topic = ?", (topic,)):
        top = max(top, seq)
        if wait:
            waiting.add(seq)
        else:
            keys.append((ts, h))
    return _Copy(Holdings(keys), n, top, waiting)


def _catch_up(c: sqlite3.Connection, topic: str, copy: _Copy) -> bool:
    """Add what arrived (or was stamped) since the last look; False: read in full."""
    if len(copy.waiting) > MAX_WAITING:
        return False
    n = _usage(c, topic)
    # NOT INDEXED: the arrival seq (the rowid) bounds the scan to the new rows;
    # the topic's index would walk every row it holds.
    new = c.execute("SELECT seq, ts, hash, waiting FROM board_records NOT INDEXED"
                    " WHERE seq > ? AND topic = ?", (copy.top, topic)).fetchall()
    if copy.n + len(new) != n:
        return False  # rows went (or what we read last was rolled back)
    stamped: list[tuple[int, str]] = []
    if copy.waiting:
        seqs = sorted(copy.waiting)
        marks = ",".join("?" * len(seqs))
        for seq, ts, h, wait in c.execute(
                f"SELECT seq, ts, hash, waiting FROM board_records WHERE seq IN ({marks})", seqs):
            if not wait:
                copy.waiting.discard(seq)
                stamped.append((ts, h))
    for seq, ts, h, wait in new:
        copy.top = max(copy.top, seq)
        if wait:
            copy.waiting.add(seq)
        else:
            stamped.append((ts, h))
    copy.held.extend(stamped)
    copy.n = n
    copy.looks += 1
    return True
