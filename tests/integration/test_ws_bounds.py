"""The ws listener under attack: every bound is configured, enforced with a clear
answer, and leaves the daemon serving the next honest peer.

A real daemon on loopback; the attacker is a raw socket speaking HTTP and
WebSocket frames by hand (wsproto for the honest parts).
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from nodes import wait_for
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request

DEADLINE = 10.0


def ws_port(node) -> int:
    url = next(a for a in node.api("GET", "/v1/status")["reachable"] if a.startswith("ws://"))
    return int(url.rsplit(":", 1)[1].rstrip("/"))


def ws_daemon(make_node, **limits):
    n = make_node("d", extra=["--listen", "ws:127.0.0.1:0"])
    if limits:
        n.with_limits(**limits)
    return n.start()


def raw(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    return s


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def http(port: int, text: str) -> tuple[int, bytes]:
    with raw(port) as s:
        s.sendall(text.encode())
        got = read_all(s)
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def upgraded(port: int) -> tuple[socket.socket, WSConnection]:
    s = raw(port)
    ws = WSConnection(ConnectionType.CLIENT)
    s.sendall(ws.send(Request(host="127.0.0.1", target="/", subprotocols=["awp.v0"])))
    while True:
        ws.receive_data(s.recv(65536))
        for ev in ws.events():
            if isinstance(ev, AcceptConnection):
                assert ev.subprotocol == "awp.v0"
                return s, ws


def close_code(s: socket.socket, ws: WSConnection) -> int:
    """Read until the server's Close; its code."""
    while True:
        data = s.recv(65536)
        ws.receive_data(data or None)
        for ev in ws.events():
            if isinstance(ev, CloseConnection):
                return ev.code
        if not data:
            raise AssertionError("the server closed without a Close frame")


def frame(payload: bytes, *, fin: bool = True, opcode: int = 2, masked: bool = True) -> bytes:
    """One client frame built by hand (so its size is ours to choose)."""
    n = len(payload)
    b1 = 0x80 if masked else 0
    if n < 126:
        head = struct.pack("!BB", (0x80 if fin else 0) | opcode, b1 | n)
    elif n < 65536:
        head = struct.pack("!BBH", (0x80 if fin else 0) | opcode, b1 | 126, n)
    else:
        head = struct.pack("!BBQ", (0x80 if fin else 0) | opcode, b1 | 127, n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def still_serves(node) -> None:
    assert node.api("GET", "/v1/status")["key"] == node.key
    s, ws = upgraded(ws_port(node))
    s.close()


def test_the_port_answers_health_checks_and_refuses_what_is_not_awp(make_node):
    d = ws_daemon(make_node)
    port = ws_port(d)
    assert http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == (200, b"ok\n")
    assert http(port, "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == (200, b"")
    status, body = http(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 426 and b"awp.v0" in body
    status, body = http(port, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 405
    status, body = http(port, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n")
    assert status == 400 and b"subprotocol awp.v0" in body
    status, _ = http(port, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Protocol: awp.v0\r\n\r\n")
    assert status == 400  # no key, no version: not a WebSocket handshake
    status, _ = http(port, "\x16\x03\x01 not http at all\r\n\r\n")
    assert status == 400
    still_serves(d)


def test_an_upgrade_that_never_finishes_is_dropped_at_the_deadline(make_node):
    d = ws_daemon(make_node, ws_handshake_timeout="1s")
    with raw(ws_port(d)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert read_all(s) == b""  # closed by the daemon, well before our 10 s timeout
    still_serves(d)


def test_one_address_cannot_hold_every_upgrade_slot(make_node):
    d = ws_daemon(make_node, ws_upgrades_per_ip=2, ws_handshake_timeout="20s")
    port = ws_port(d)
    hold = [raw(port) for _ in range(2)]
    for s in hold:
        s.sendall(b"GET / HTTP/1.1\r\n")  # pending: the head is not finished
    # The daemon counts them once it has accepted them; the third is told at once.
    def third() -> tuple[int, bytes] | None:
        status, body = http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        return (status, body) if status == 429 else None
    status, body = wait_for(third, DEADLINE, "a 429 for the third connection")
    assert b"too many pending upgrades" in body
    for s in hold:
        s.close()
    wait_for(lambda: http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200,
             DEADLINE, "the slots freed")
    still_serves(d)


@pytest.mark.parametrize(("limits", "frames"), [
    ({"ws_frame_bytes": "64KiB"}, [frame(b"x" * 70_000)]),
    ({"ws_frame_bytes": "64KiB", "ws_message_bytes": "128KiB"},
     [frame(b"x" * 60_000, fin=False), frame(b"x" * 60_000, fin=False, opcode=0),
      frame(b"x" * 60_000, opcode=0)]),
])
def test_an_oversize_frame_or_message_is_closed_with_1009(make_node, limits, frames):
    d = ws_daemon(make_node, **limits)
    s, ws = upgraded(ws_port(d))
    with s:
        try:
            for f in frames:
                s.sendall(f)
        except OSError:
            pass  # the daemon may close while we still write
        assert close_code(s, ws) == 1009
    still_serves(d)


def test_a_frame_that_breaks_the_protocol_is_closed_with_1002(make_node):
    d = ws_daemon(make_node)
    s, ws = upgraded(ws_port(d))
    with s:
        s.sendall(frame(b'{"t":"hello"}\n', masked=False))  # a client must mask
        assert close_code(s, ws) == 1002
    still_serves(d)
