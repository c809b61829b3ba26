"""WebSocketStream over an in-memory pipe: frames in, bytes out, and the other way."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, Pong, TextMessage

from awp.transport.wsconfig import WsLimits
from awp.transport.wsstream import WebSocketStream


def run(fn):
    """Run an async test under trio (no pytest plugin for it here)."""
    def test():
        trio.run(fn)
    test.__name__ = fn.__name__
    return test


def pair(limits: WsLimits = WsLimits()):
    """Our stream as the server end, and the client's raw wsproto and pipe end."""
    ours, theirs = trio.testing.memory_stream_pair()
    server = Connection(ConnectionType.SERVER)
    client = Connection(ConnectionType.CLIENT)
    return WebSocketStream(ours, server, limits), client, theirs


async def events(client: Connection, pipe) -> list:
    client.receive_data(await pipe.receive_some())
    return list(client.events())


@run
async def test_lines_are_independent_of_frame_boundaries():
    ws, client, pipe = pair()
    line = b'{"t":"hello","v":0}\n{"t":"ping"}\n'
    raw = b"".join(client.send(Message(data=line[i:i + 3], message_finished=i + 3 >= len(line)))
                   for i in range(0, len(line), 3))
    raw += client.send(TextMessage(data='{"t":"bye"}\n'))
    await pipe.send_all(raw)
    got = b""
    while len(got) < len(line) + 12:
        got += await ws.receive_some()
    assert got == line + b'{"t":"bye"}\n'


@run
async def test_a_big_write_goes_as_several_bounded_messages():
    ws, client, pipe = pair(WsLimits(send_chunk=1000))
    await ws.send_all(b"y" * 4500)
    seen: list[bytes] = []
    while sum(map(len, seen)) < 4500:
        seen += [bytes(e.data) for e in await events(client, pipe) if isinstance(e, BytesMessage)]
    assert b"".join(seen) == b"y" * 4500 and max(map(len, seen)) <= 1000


@run
async def test_a_ping_is_answered_and_a_close_is_eof():
    ws, client, pipe = pair()
    await pipe.send_all(client.send(Ping(payload=b"p1")) + client.send(Message(data=b"x\n")))
    assert await ws.receive_some() == b"x\n"
    assert any(isinstance(e, Pong) and e.payload == b"p1" for e in await events(client, pipe))
    await pipe.send_all(client.send(CloseConnection(code=1000)))
    assert await ws.receive_some() == b""
    assert ws.close_code == 1000
    with pytest.raises(trio.BrokenResourceError):
        await ws.send_all(b"more\n")
    await ws.aclose()  # answers the close
    assert any(isinstance(e, CloseConnection) for e in await events(client, pipe))


@run
async def test_send_eof_is_our_close_and_we_still_read():
    ws, client, pipe = pair()
    await ws.send_eof()
    assert any(isinstance(e, CloseConnection) and e.code == 1000
               for e in await events(client, pipe))
    with pytest.raises(trio.ClosedResourceError):
        await ws.send_all(b"x")
    # A peer that still writes after our Close (RFC 6455 lets it until its own Close);
    # wsproto will not, so the frame comes from a fresh client object.
    await pipe.send_all(Connection(ConnectionType.CLIENT).send(Message(data=b"late\n")))
    assert await ws.receive_some() == b"late\n"


@run
async def test_an_oversize_frame_closes_with_1009_before_it_is_kept():
    ws, client, pipe = pair(WsLimits(frame_bytes=100))
    await pipe.send_all(client.send(Message(data=b"z" * 150)))
    with pytest.raises(trio.BrokenResourceError, match="1009"):
        await ws.receive_some()
    assert any(isinstance(e, CloseConnection) and e.code == 1009
               for e in await events(client, pipe))


def test_the_stream_names_what_carries_it():
    ours, _theirs = trio.testing.memory_stream_pair()
    ws = WebSocketStream(ours, Connection(ConnectionType.SERVER), WsLimits())
    assert ws.transport_stream is ours


@run
async def test_write_now_frames_at_once_and_a_pong_waits_for_the_rest_it_left():
    import socket

    from awp.base.sockio import Encoded

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours = trio.SocketStream(trio.socket.from_stdlib_socket(a))
    theirs = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    ws = WebSocketStream(ours, Connection(ConnectionType.SERVER), WsLimits())
    client = Connection(ConnectionType.CLIENT)

    small = b'{"t":"ack"}\n'
    assert ws.may_write_now() and ws.write_now(small) == b""  # all went, no event loop
    data = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes at once
    rest = ws.write_now(data)
    assert type(rest) is Encoded and rest is not data and 0 < len(rest) < len(data) + 14
    assert not ws.may_write_now()
    assert ws.write_now(b"x\n") == b"x\n"  # nothing may go before the rest: nothing done

    got: list[bytes] = []
    pongs: list[int] = []  # how many payload bytes had come when each pong came
    ponged = trio.Event()

    async def drain() -> None:
        while not pongs:
            client.receive_data(await theirs.receive_some(65536))
            for e in client.events():
                if isinstance(e, BytesMessage):
                    got.append(bytes(e.data))
                elif isinstance(e, Pong):
                    pongs.append(sum(map(len, got)))
                    ponged.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await theirs.send_all(client.send(Ping(payload=b"p")))
            nursery.start_soon(ws.receive_some)  # reads the ping and wants to pong now
            await trio.testing.wait_all_tasks_blocked()
            await ws.send_all(rest)
            await ponged.wait()
            nursery.cancel_scope.cancel()  # the reader waits for more that will not come
    assert b"".join(got) == small + data
    assert pongs == [len(small) + len(data)]  # the pong came after the whole frame
    assert ws.may_write_now()
