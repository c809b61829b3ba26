"""The sealed stream over real socket pairs: fast-path writes, partial writes, cuts."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from awp.base.sockio import Encoded
from awp.node.lineout import LineOut
from awp.node.sealed import SealedStream, is_local_stream

KEY_AB = bytes(range(32))
KEY_BA = bytes(range(32, 64))


def stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return trio.SocketStream(trio.socket.from_stdlib_socket(a)), \
        trio.SocketStream(trio.socket.from_stdlib_socket(b))


def sealed_pair() -> tuple[SealedStream, SealedStream]:
    a, b = stream_pair()
    sa, sb = SealedStream(a, KEY_AB), SealedStream(b, KEY_BA)
    sa.open_receiving(KEY_BA, b"")
    sb.open_receiving(KEY_AB, b"")
    return sa, sb


async def read_all(s: SealedStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await s.receive_some(65536)
        if not chunk:
            break
        got += chunk
    return bytes(got)


def test_write_now_then_the_sealed_rest_arrives_whole():
    async def main():
        sa, sb = sealed_pair()
        out = LineOut(sa, write_timeout=10, on_stall=lambda r: None)
        big = b"".join(b"%06d " % i + b"x" * 90 + b"\n" for i in range(3000))  # ~300 KB
        async with trio.open_nursery() as n:
            result: dict = {}

            async def reader():
                result["got"] = await read_all(sb, len(big) + 5)

            n.start_soon(reader)
            await out.lock.acquire()
            rest = out.write_now(big)
            assert rest and type(rest) is Encoded  # the socket took only part of it
            await out.write_all(rest)  # sliced into 256 KiB parts, each still sealed
            out.lock.release()
            await out.send(b"tail\n")  # sealed afresh, after the rest
        assert result["got"] == big + b"tail\n"

    trio.run(main)


def test_write_now_on_a_stream_without_a_socket_does_nothing():
    left, _right = trio.testing.memory_stream_pair()
    s = SealedStream(left, KEY_AB)
    assert s.write_now(b"line\n") == b"line\n"


def test_a_cut_or_tampered_stream_is_a_broken_resource():
    async def main():
        a, b = stream_pair()
        sa, sb = SealedStream(a, KEY_AB), SealedStream(b, KEY_BA)
        sb.open_receiving(KEY_AB, b"")
        await sa.send_all(b"first\n")
        await a.send_eof()  # the raw stream ends: no FINAL record
        assert await sb.receive_some() == b"first\n"
        with pytest.raises(trio.BrokenResourceError, match="without its final record"):
            await sb.receive_some()

        a, b = stream_pair()
        sa, sb = SealedStream(a, KEY_AB), SealedStream(b, KEY_BA)
        sb.open_receiving(KEY_AB, b"")
        wire = sa._sealer.seal(b"hello\n")
        await a.send_all(wire[:-1] + bytes([wire[-1] ^ 1]))
        with pytest.raises(trio.BrokenResourceError, match="failed authentication"):
            await sb.receive_some()

    trio.run(main)


def test_a_clean_half_close_reads_as_eof():
    async def main():
        sa, sb = sealed_pair()
        await sa.send_all(b"bye\n")
        await sa.send_eof()
        assert await read_all(sb, 100) == b"bye\n"
        assert await sb.receive_some() == b""

    trio.run(main)


def test_local_streams():
    a, b = stream_pair()
    assert is_local_stream(a) and is_local_stream(SealedStream(a, KEY_AB))
    left, _ = trio.testing.memory_stream_pair()
    assert not is_local_stream(left)
