"""A pair stream whose local end the daemon holds, for callers that cannot keep a
socket open (the MCP tools: ``awp_pair_open`` / ``send`` / ``recv`` / ``close``).

:class:`HeldEnd` stands where the caller's socket would be in
:func:`awp.node.pair_splice.splice`, with a bounded buffer each way: the
caller's writes wait while ``bound`` bytes are not yet taken by the peer, and
the peer's bytes stop being read while ``bound`` wait for the caller, so the
back-pressure of a socket holds here too.
"""

from __future__ import annotations

import trio

#: Bytes held each way for the caller (peer -> caller, caller -> peer).
HELD_BYTES = 1024 * 1024
#: A held stream its caller has not touched for this long is closed.
HELD_IDLE = 600.0


class HeldEnd(trio.abc.HalfCloseableStream):
    """The caller's end of a held stream; ``splice`` reads and writes it as a socket."""

    def __init__(self, bound: int = HELD_BYTES) -> None:
        self.bound = bound
        self.inbound = bytearray()  # from the peer, for the caller
        self.inbound_end = False  # the peer's direction ended
        self.outbound = bytearray()  # from the caller, for the peer
        self.outbound_end = False  # the caller's direction ended
        self.gone = False  # the caller closed it: the stream is over
        self.touched = trio.current_time()
        self._changed = trio.Event()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()

    # -- what splice sees --------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self.outbound and not self.outbound_end and not self.gone:
            await self._wait()
        if not self.outbound:
            return b""
        n = max_bytes or 65536
        data = bytes(self.outbound[:n])
        del self.outbound[:n]
        self._poke()
        return data

    async def send_all(self, data) -> None:
        while len(self.inbound) >= self.bound and not self.gone:
            await self._wait()
        if self.gone:
            raise trio.BrokenResourceError("the caller closed the stream")
        self.inbound += data
        self._poke()

    async def wait_send_all_might_not_block(self) -> None:
        while len(self.inbound) >= self.bound and not self.gone:
            await self._wait()

    async def send_eof(self) -> None:
        self.inbound_end = True
        self._poke()

    async def aclose(self) -> None:
        self.gone = True
        self._poke()
        await trio.lowlevel.checkpoint()

    # -- what the caller does ----------------------------------------------------------

    async def put(self, data: bytes) -> None:
        """Queue ``data`` for the peer, waiting while the queue is full."""
        self.touched = trio.current_time()
        if self.outbound_end or self.gone:
            raise trio.ClosedResourceError("this side of the stream is closed")
        view = memoryview(data)
        while view:
            while len(self.outbound) >= self.bound and not self.gone:
                await self._wait()
            if self.gone:
                raise trio.BrokenResourceError("the stream is over")
            room = self.bound - len(self.outbound)
            self.outbound += view[:room]
            view = view[room:]
            self._poke()

    async def take(self, max_bytes: int, wait: float) -> tuple[bytes, bool]:
        """Up to ``max_bytes`` from the peer, waiting up to ``wait`` s for the first;
        and whether the peer's direction has ended (everything taken)."""
        self.touched = trio.current_time()
        with trio.move_on_after(wait):
            while not self.inbound and not self.inbound_end and not self.gone:
                await self._wait()
        data = bytes(self.inbound[:max_bytes])
        del self.inbound[:max_bytes]
        if data:
            self._poke()
        return data, not self.inbound and (self.inbound_end or self.gone)

    def end_mine(self) -> None:
        """The caller has nothing more to send: a half-close toward the peer."""
        self.touched = trio.current_time()
        self.outbound_end = True
        self._poke()

    async def close_when_idle(self, idle: float = HELD_IDLE) -> None:
        """Close the stream once its caller left it alone for ``idle`` s (run beside it)."""
        while not self.gone:
            left = self.touched + idle - trio.current_time()
            if left <= 0:
                await self.aclose()
                return
            await trio.sleep(left)
