"""One link's outgoing board lines: a byte-bounded queue that one sender task drains.

Split from :mod:`awp.node.board` because it is the part that decides what a
slow peer costs us: every line for a peer waits here, bounded by
``limits.board_link_bytes``, and records queued back to back for one topic
leave together as one ``board-posts`` line.  It knows nothing of topics'
rules, only of bytes and order, so it is tested on its own
(``tests/unit/test_board_link.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .connection import Connection

MAX_LINE = 512 * 1024  # a board-posts line stays under this


class MinuteWindow:
    """What one peer used of a per-minute bound of ``limits`` (bytes served on its
    asking, queue requests, submits): the count starts again a minute after it
    began, on trio's clock."""

    __slots__ = ("used", "since")

    def __init__(self) -> None:
        self.used = 0
        self.since = 0.0

    def left(self, bound: int) -> int:
        """How much of ``bound`` is left in this minute (a new minute starts at 0)."""
        now = trio.current_time()
        if now - self.since >= 60:
            self.used, self.since = 0, now
        return bound - self.used

    def take(self, n: int, bound: int) -> bool:
        """Count ``n``; False when that passes ``bound`` (the count stays: a peer
        over its bound stays over until the minute ends)."""
        self.left(bound)
        self.used += n
        return self.used <= bound


@dataclass
class Records:
    """Records waiting in a link's queue for one ``board-posts`` line.

    Kept as records, not as a built line, so that records queued one after
    another for the same topic leave together: under load a subscriber gets
    a few large lines instead of one line per post.
    """

    topic: str
    hops: int
    raws: list[str]
    size: int


class BoardLink:
    """One connection's outgoing board lines, written by its own task, or at once.

    A line for a link with nothing queued goes straight to the socket
    (:meth:`write_now`) when the connection is not writing anything else:
    most lines a relay sends are one post going on as it came, and waking
    the link's task for each (an event, a task switch, a cancel scope and
    a checkpoint for the write) cost more than the write.
    """

    def __init__(self, conn: Connection, max_bytes: int,
                 stats: dict[str, int] | None = None) -> None:
        self.conn = conn
        self.max_bytes = max_bytes
        self.stats = stats if stats is not None else {"lines_out": 0, "bytes_out": 0}
        # What the socket did not take of a line written at once: the link's task
        # writes it, holding the connection's send lock until then.
        self.partial: bytes | None = None
        self.served = MinuteWindow()  # bytes sent on the peer's asking
        self.claims = MinuteWindow()  # queue requests from the peer
        self.queue_us = MinuteWindow()  # writer time its queue requests took (microseconds)
        self.queue: deque[bytes | Records] = deque()
        self.size = 0
        self.wake = trio.Event()
        self.resync: set[str] = set()
        self.deferred: set[str] = set()  # topics whose asks went over the serve budget
        self.submits = MinuteWindow()  # records the peer handed us towards an owner
        self.subs: dict[str, tuple[object, object]] = {}  # topic -> (grant, via) they sent
        self.heard_sub = False  # their first board-sub came (the one sent on connect)

    def full(self) -> bool:
        return self.size >= self.max_bytes

    def push(self, data: bytes, topic: str = "") -> bool:
        """Queue a line; False (and a resync of ``topic``) when the queue is full.

        Every line about a topic passes ``topic``, answers to the peer's own
        lines above all (a ``board-sub`` of 256 topics asks for 512 lines):
        only our own ``board-sub`` goes past the bound.
        """
        if self.size + len(data) > self.max_bytes and topic:
            self.resync.add(topic)
            self.wake.set()
            return False
        return self._put(data)

    def _put(self, data: bytes) -> bool:
        """Write a whole line to the socket now if it may go (:meth:`write_now`), else queue it."""
        if not self.write_now(data):
            self.queue.append(data)
            self.size += len(data)
            self.wake.set()
        return True

    def push_records(self, topic: str, hops: int, raws: list[str], size: int,
                     line: Callable[[], bytes] | None = None) -> bool:
        """Queue records, joining the last queued group when it is the same topic and hops.

        Given ``line`` and nothing queued, the records leave as ``line()``:
        the line built once for every link they go to (the common case, a
        post relayed as it comes).  Behind other lines they wait as records,
        so that later ones may join them.
        """
        if self.size + size > self.max_bytes:
            self.resync.add(topic)
            self.wake.set()
            return False
        last = self.queue[-1] if self.queue else None
        if last is None and line is not None:
            return self._put(line())
        if (isinstance(last, Records) and last.topic == topic and last.hops == hops
                and last.size + size <= MAX_LINE - 1024):
            last.raws.extend(raws)
            last.size += size
        else:
            self.queue.append(Records(topic, hops, list(raws), size))
        self.size += size
        self.wake.set()
        return True

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` to the socket now, when nothing is ahead of it: nothing
        queued here, no write of the connection under way, the connection up.

        False, with nothing written, when it must wait its turn (or the socket
        takes none of it).  What the socket does not take is left in
        :attr:`partial`, with the connection's send lock held, for the link's
        task to finish before anything else.
        """
        conn = self.conn
        if (self.queue or self.partial is not None or not conn.established.is_set()
                or conn.closed.is_set() or conn.out.busy() or conn.session.replay.bye_sent):
            return False
        out = conn.out
        out.lock.acquire_nowait()
        rest = out.write_now(data)
        if rest is data:  # nothing written (an encoded rest may be as long)
            out.lock.release()
            return False
        self.stats["lines_out"] += 1
        self.stats["bytes_out"] += len(data)
        if not rest:
            out.lock.release()
        else:
            self.partial = rest
            self.wake.set()
        return True

    async def finish_partial(self) -> None:
        """Write what :meth:`write_now` left, then give the send lock back."""
        rest, self.partial = self.partial, None
        if rest is None:
            return
        try:
            await self.conn.out.write_all(rest)
        finally:
            self.conn.out.lock.release()

    def drop_partial(self) -> None:
        """The link ends with a line half written: the connection is closing; give the
        lock back so that its other writers can fail fast rather than wait."""
        if self.partial is not None:
            self.partial = None
            self.conn.out.lock.release()
