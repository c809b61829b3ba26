"""Writing lines to one peer's stream: one writer at a time, a deadline on progress.

Every write to a peer (acks, replay, pings, relayed presence, a line written
before its commit) goes through one :class:`LineOut`, which holds the send
lock so no two writes interleave bytes, and gives each slice of a write
``limits.write_timeout`` to make progress: a peer that stops reading would
otherwise hold every writer for good.  A stall calls ``on_stall`` (the
connection closes; a write cut short leaves a torn line) and raises
``BrokenResourceError``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import trio

from ..base.sockio import Encoded, write_some
from .sealed import SealedStream

_WRITE_SLICE = 256 * 1024  # the write deadline applies to each slice this big


class LineOut:
    """The sending half of one connection."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, *, write_timeout: float,
                 on_stall: Callable[[str], None],
                 trace: Callable[[bytes], None] | None = None) -> None:
        self.stream = stream
        self.timeout = write_timeout if write_timeout > 0 else math.inf
        self.on_stall = on_stall
        self.trace = trace
        # A semaphore, not a Lock: the rest of a line written before its commit
        # is finished by another task, which then releases it (Connection.send_first).
        self.lock = trio.Semaphore(1, max_value=1)
        self.shut = ""  # why nothing more may be written (the connection is closing)

    def busy(self) -> bool:
        return self.lock.value == 0

    def _trace(self, data: bytes) -> None:
        if self.trace is not None:
            for ln in data.splitlines():
                self.trace(ln)

    def write_now(self, data: bytes) -> bytes:
        """Write to a socket without yielding to the event loop; returns what
        did not go: ``data`` itself when nothing was done (a stream that
        cannot be written this way, a socket that takes none of it), ``b""``
        when all went, else the rest (on a sealed link or a WebSocket the
        encoded rest, see :class:`~awp.base.sockio.Encoded`).  Callers tell
        "nothing done" by identity, never by length: an encoded rest can be
        as long as ``data`` by chance.

        The caller holds the lock, so nothing can come between these bytes
        and the rest of them.
        """
        self._trace(data)
        stream = self.stream
        if type(stream) is SealedStream:
            return stream.write_now(data)
        if type(stream) is not trio.SocketStream:
            may = getattr(stream, "may_write_now", None)  # a WebSocket on a plain socket
            return stream.write_now(data) if may is not None and may() else data
        # Would block, or broken (nothing written): send_all will say which.
        sent = write_some(stream.socket.fileno(), data)
        return data if sent == 0 else data[sent:]

    async def send(self, data: bytes) -> None:
        """Write under the lock, within the write deadline (see :meth:`write_all`).

        Waiting for the lock has no deadline of its own: whoever holds it is
        writing and either makes progress or drops the connection within
        ``write_timeout``, after which this raises at once.
        """
        self._trace(data)
        # An uncontended lock is taken without a trip through the scheduler
        # (``async with`` yields before it returns), so the bytes leave now.
        if self.busy():
            await self.lock.acquire()
        else:
            self.lock.acquire_nowait()
        try:
            if self.shut:
                raise trio.ClosedResourceError(self.shut)
            await self.write_all(data)
        finally:
            self.lock.release()

    async def half_close(self) -> None:
        """``send_eof`` under the lock: trio refuses it beside a write in
        progress (acks flushed after a commit, say), which killed the
        connection task with ``BusyResourceError`` (found by the live fuzzer)."""
        async with self.lock:
            await self.stream.send_eof()

    async def write_all(self, data: bytes) -> None:
        """``send_all`` with a deadline on progress; the caller holds the lock.

        Each slice of at most 256 KiB must go within ``write_timeout``, else
        ``on_stall`` is told and ``BrokenResourceError`` raised; the lines
        stay in the outbox for the next connection.
        """
        for start in range(0, len(data), _WRITE_SLICE):
            part = data if len(data) <= _WRITE_SLICE else data[start:start + _WRITE_SLICE]
            if type(data) is Encoded and part is not data:
                part = Encoded(part)  # a slice of encoded bytes is still encoded
            with trio.move_on_after(self.timeout) as scope:
                await self.stream.send_all(part)
            if scope.cancelled_caught:
                reason = f"a write to the peer stalled for {self.timeout:g}s"
                self.on_stall(reason)
                raise trio.BrokenResourceError(reason)


def give_way() -> None:
    """Let whoever our write just woke run before our own bookkeeping.

    A line or ack written to a peer on this host wakes its reader, and on a
    machine with few CPUs the kernel often queues that reader behind us; what
    we do next (storing the line) is not what anyone is waiting for.  With
    nothing else runnable here, as when the peer is on another host, this is
    one cheap system call.  A line of ours that left before its commit gives
    way twice: after the write, and again after the commit, because the
    peer's reader has by then usually blocked on its own disk write once
    and woken again, and the kernel lets the task on the CPU run out its
    slice before a woken one.  The peer's one-way p50 with both daemons
    held to one CPU, in two sets of six alternating pairs of 300 lines: 1.43
    and 1.34 ms with one yield, 1.26 and 1.24 ms with two; with each daemon
    on a CPU of its own, no change beyond the noise (1.22 and 1.01 ms, then
    1.05 and 1.07).
    """
    os.sched_yield()
