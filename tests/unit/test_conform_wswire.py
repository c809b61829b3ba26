"""The runner's WebSocket wire: PeerConn over frames, against a wsproto server on a socketpair.

Lines must not depend on frames either way: what we write arrives as binary
messages; text and binary frames from the peer, split anywhere, read as one
byte stream; a ping is answered; a Close frame is EOF and is answered; our
half-close is a Close frame.
"""

from __future__ import annotations

import socket
import threading
import time

from wsproto import ConnectionType
from wsproto.connection import Connection, ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

from awp.conform.conn import PeerConn
from awp.conform.ws_scenarios import _byte_frames, _byte_messages
from awp.conform.wswire import SEND_CHUNK, WsWire
from awp.wire.ids import IdGenerator


class Server:
    """The peer's side, driven by hand: a wsproto server on one end of a socketpair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(5)
        self.ws = Connection(ConnectionType.SERVER)

    def send(self, *events) -> None:
        self.sock.sendall(b"".join(self.ws.send(e) for e in events))

    def events(self, until) -> list:
        got: list = []
        deadline = time.monotonic() + 5
        while not until(got):
            assert time.monotonic() < deadline, got
            self.ws.receive_data(self.sock.recv(65536))
            got += list(self.ws.events())
        return got


def pair() -> tuple[PeerConn, WsWire, Server]:
    a, b = socket.socketpair()
    wire = WsWire(a, Connection(ConnectionType.CLIENT))
    return PeerConn(wire, "ws://test/", IdGenerator()), wire, Server(b)


def data_of(events: list) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, BytesMessage))


def test_writes_go_out_as_binary_messages_of_at_most_256_kib():
    conn, _, srv = pair()
    big = b"x" * (SEND_CHUNK + 10) + b"\n"
    got: list = []
    reader = threading.Thread(
        target=lambda: got.extend(srv.events(lambda ev: len(data_of(ev)) >= len(big) + 13)))
    reader.start()  # the socketpair holds less than we write
    conn.send_raw(b'{"t":"ping"}\n' + big, time.monotonic() + 5)
    reader.join(10)
    msgs = [e for e in got if isinstance(e, BytesMessage)]
    assert data_of(got) == b'{"t":"ping"}\n' + big
    assert sum(e.message_finished for e in msgs) == 2  # one message per 256 KiB written


def test_text_and_binary_frames_cut_anywhere_read_as_lines():
    conn, _, srv = pair()
    srv.send(TextMessage('{"t":"ping","a":'), BytesMessage(b'1}\n{"t":"po', message_finished=False),
             BytesMessage(b'ng"}\n'))
    deadline = time.monotonic() + 5
    assert conn.next_line(deadline) == {"t": "ping", "a": 1}
    assert conn.next_line(deadline) == {"t": "pong"}


def test_framers_cut_one_line_into_one_byte_frames_or_messages():
    conn, wire, srv = pair()
    wire.framer = _byte_frames
    conn.send_raw(b"abc\n", time.monotonic() + 5)
    wire.framer = _byte_messages
    conn.send_raw(b"de\n", time.monotonic() + 5)
    got = srv.events(lambda ev: len(data_of(ev)) >= 7)
    assert [(e.data, e.message_finished) for e in got] == [
        (b"a", False), (b"b", False), (b"c", False), (b"\n", True),
        (b"d", True), (b"e", True), (b"\n", True)]


def test_a_ping_is_answered_and_a_close_is_eof_and_answered():
    conn, wire, srv = pair()
    srv.send(Ping(b"hi"), BytesMessage(b'{"t":"ping"}\n'), CloseConnection(code=1000))
    deadline = time.monotonic() + 5
    assert conn.next_line(deadline) == {"t": "ping"}
    assert conn.next_line(deadline) is None and conn.eof
    assert wire.close_code == 1000
    got = srv.events(lambda ev: any(isinstance(e, CloseConnection) for e in ev))
    assert isinstance(got[0], Pong) and got[0].payload == b"hi"
    assert srv.ws.state is ConnectionState.CLOSED


def test_half_close_is_a_close_frame_and_what_was_in_flight_is_still_read():
    conn, _, srv = pair()
    srv.send(BytesMessage(b'{"t":"bye"}\n'))  # sent before the peer sees our Close
    conn.half_close()
    got = srv.events(lambda ev: any(isinstance(e, CloseConnection) for e in ev))
    assert got[-1].code == 1000
    srv.send(got[-1].response())
    deadline = time.monotonic() + 5
    assert conn.next_line(deadline) == {"t": "bye"}
    assert conn.next_line(deadline) is None


def test_a_dropped_socket_is_eof():
    conn, _, srv = pair()
    srv.sock.close()
    assert conn.next_line(time.monotonic() + 5) is None and conn.eof
