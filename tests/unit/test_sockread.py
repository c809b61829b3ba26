"""awp.base.sockread: a socket is read with one wait and one read, and says what
trio's receive_some says at the ends (data, end of stream, closed, reset)."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from awp.base.sockread import receive_some


def _pair() -> tuple[trio.SocketStream, socket.socket]:
    a, b = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(a)), b


async def _reading(n: trio.Nursery, stream: trio.SocketStream,
                   size: int) -> list[bytes | BaseException]:
    """Start one read in ``n`` and wait until it blocks; the list gets what it returns,
    or the ``trio.ClosedResourceError`` it raises."""
    out: list[bytes | BaseException] = []

    async def read() -> None:
        try:
            out.append(await receive_some(stream, size))
        except trio.ClosedResourceError as e:
            out.append(e)

    n.start_soon(read)
    await trio.testing.wait_all_tasks_blocked()
    return out


async def _reads_what_is_there_once_it_comes_and_then_the_end() -> None:
    ours, theirs = _pair()
    with theirs:
        async with trio.open_nursery() as n:
            got = await _reading(n, ours, 65536)
            assert got == []  # nothing there yet: it waits
            theirs.sendall(b'{"t":"ping"}\n')
        assert got == [b'{"t":"ping"}\n']
        theirs.sendall(b"x" * 10)
        assert await receive_some(ours, 4) == b"xxxx"  # at most max_bytes
        assert await receive_some(ours, 100) == b"x" * 6
        theirs.shutdown(socket.SHUT_WR)
        assert await receive_some(ours, 100) == b""  # end of stream
    await ours.aclose()


async def _a_stream_closed_while_waiting_raises_closed() -> None:
    ours, theirs = _pair()
    with theirs:
        async with trio.open_nursery() as n:
            failed = await _reading(n, ours, 100)
            await ours.aclose()
        assert len(failed) == 1 and isinstance(failed[0], trio.ClosedResourceError)
        with pytest.raises(trio.ClosedResourceError):
            await receive_some(ours, 100)


async def _a_reset_connection_raises_oserror() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # linger 0: a reset
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(server))
        with pytest.raises(OSError):
            await receive_some(stream, 100)
        await stream.aclose()


async def _another_stream_is_read_the_ordinary_way() -> None:
    send, recv = trio.testing.memory_stream_one_way_pair()
    await send.send_all(b"abc")
    assert await receive_some(recv, 100) == b"abc"


def test_reads_what_is_there_once_it_comes_and_then_the_end() -> None:
    trio.run(_reads_what_is_there_once_it_comes_and_then_the_end)


def test_a_stream_closed_while_waiting_raises_closed() -> None:
    trio.run(_a_stream_closed_while_waiting_raises_closed)


def test_a_reset_connection_raises_oserror() -> None:
    trio.run(_a_reset_connection_raises_oserror)


def test_another_stream_is_read_the_ordinary_way() -> None:
    trio.run(_another_stream_is_read_the_ordinary_way)
