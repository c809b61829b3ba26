"""A closing err's half-close waits for a write in progress instead of colliding with it.

Found by the live fuzzer: a bad line arriving while the acks of the burst
before it were being written made ``send_eof`` meet that ``send_all``; trio
refuses two senders at once (``BusyResourceError``) and the connection task
died.  ``LineOut.half_close`` (a connection's sending half) takes the send lock, as every
write does.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awp.node.lineout import LineOut

BIG = b"a" * (8 << 20)  # more than the socket buffers hold: send_all blocks until read


def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def _blocked_writer(stream, lock: trio.Lock, data: bytes) -> None:
    async with lock:
        await stream.send_all(data)


def test_bare_send_eof_beside_a_write_is_refused_by_trio():
    """The hazard itself: what the old half-close did."""
    async def main():
        s, _r = _pair()
        lock = trio.Lock()
        async with trio.open_nursery() as n:
            n.start_soon(_blocked_writer, s, lock, BIG)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await s.send_eof()
            n.cancel_scope.cancel()

    trio.run(main)


def test_half_close_waits_for_the_write_then_ends_the_stream():
    async def main():
        s, r = _pair()
        out = LineOut(s, write_timeout=0, on_stall=lambda _reason: None)
        async with trio.open_nursery() as n:
            n.start_soon(_blocked_writer, s, out.lock, BIG)
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(out.half_close)
            await trio.testing.wait_all_tasks_blocked()
            chunks = []
            while data := await r.receive_some(1 << 20):
                chunks.append(data)
            got = b"".join(chunks)
        assert got == BIG  # the write went out whole, then the EOF

    trio.run(main)
