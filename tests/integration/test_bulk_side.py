"""Bulk transfer at the edges: peers without the cap, hostile side connections,
and a byte flipped on the wire of a plain side connection."""

from __future__ import annotations

import base64
import hashlib
import socket
import threading

from fixtures.blobfiles import blob_row, file_digest
from nodes import wait_for
from rawpeer import RawPeer
from test_bulk import PIECE, _file, _send


def test_peer_without_the_cap_gets_in_band_chunks(make_node, tmp_home_root):
    a = make_node("a").with_limits(bulk_min="1MiB").start()
    path, digest = _file(tmp_home_root, "inband.bin", 2 * 1024 * 1024 + 5)
    with RawPeer(a.address) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        wait_for(lambda: p.key in {x["key"] for x in a.api("GET", "/v1/peers")}, 10, "peer up")
        a.api("POST", "/v1/send", {"peer": p.key, "files": [path], "wait_ack": 0,
                                   "parts": [{"k": "text", "text": "old way"}]})
        data = bytearray()
        while True:
            line = p.recv_until(lambda x: x.get("t") in ("chunk", "msg"), 20)
            if line["t"] == "msg":
                break
            data += base64.b64decode(line["data"])
        part = [x for x in line["parts"] if x["k"] == "blob"][0]
        assert "bulk" not in part and part["size"] == len(data)
        assert hashlib.sha256(data).hexdigest() == digest


def _side(address: str, name: str = "bulk", **extra) -> RawPeer:
    p = RawPeer(address)
    p.send_hello(side=name, **extra)
    p.read_hello()
    p.send_auth()
    auth = p.recv_line()
    assert auth and auth["t"] == "auth" and p.verify_peer_auth(auth)
    return p


def test_side_connection_cannot_fetch_what_was_not_sent_to_it(make_node):
    a = make_node("a").start()
    with _side(a.address) as p:
        p.send_raw(b'{"t":"want","ref":"b_nothing","i":0}\n')
        err = p.recv_line()
        assert err["t"] == "err" and err["code"] == "blob_refused"
        assert p.closed()
    with _side(a.address) as p:  # a control line over 4 KiB ends it
        p.send_raw(b'{"t":"want","ref":"' + b"x" * 8000 + b'"}\n')
        assert p.closed()
    with _side(a.address, "bulk-push") as p:  # a push nobody asked for
        p.send_raw(b'{"t":"push","ref":"b_nothing"}\n')
        assert p.closed()
    with _side(a.address, "nonsense") as p:  # a side nobody here serves
        err = p.recv_line()
        assert err["t"] == "err" and err["code"] == "unsupported" and "nonsense" in err["detail"]
        assert p.closed()
    # the daemon is unharmed, and the side connections never became links
    assert a.api("GET", "/v1/peers") == []


class _Flipper:
    """A loopback TCP proxy to ``target`` that flips one byte of what the target
    sends back, ``at`` bytes into the first connection that carries that many."""

    def __init__(self, target: tuple[str, int], at: int) -> None:
        self.target, self.at, self.flipped = target, at, False
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, back: bool) -> None:
        seen = 0
        try:
            while data := src.recv(1 << 16):
                if back and not self.flipped and seen <= self.at < seen + len(data):
                    data = bytearray(data)
                    data[self.at - seen] ^= 0x01
                    self.flipped = True
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_flipped_byte_on_a_plain_wire_refetches_that_piece(make_node, tmp_home_root):
    plain = {"AWP_SEAL": "off"}
    a = make_node("a", env=plain).with_limits(bulk_min="1MiB").start()
    port = int(a.address.rsplit(":", 1)[1])
    proxy = _Flipper(("127.0.0.1", port), at=PIECE + 1000)  # inside piece 1
    a.stop()
    a.extra = ["--advertise", f"tcp:127.0.0.1:{proxy.port}"]
    a.start()
    b = make_node("b", env=plain).with_limits(bulk_min="1MiB").start()
    a.connect(b)
    path, digest = _file(tmp_home_root, "w.bin", 5 * PIECE)
    _send(a, b, path)
    got = wait_for(lambda: blob_row(b, "w.bin", "complete"), 60, "complete")
    assert proxy.flipped and file_digest(got["path"]) == digest
    assert got["refetched"] == 1
    assert wait_for(lambda: blob_row(a, "w.bin")["served"], 10) == 6
