"""A small blocking raw AWP client over a plain socket, for protocol tests.

It speaks just enough of the wire protocol to drive a real daemon line by
line: send any bytes or envelope, read what comes back with deadlines, and run
the ``v: 0`` handshake (optionally broken in the ways the tests need).  It is
deliberately independent of the daemon's connection code: only the pure wire
helpers (keys, transcript, ids, timestamps) are shared.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable

from awp.wire.address import parse_address
from awp.wire.b64 import b64url
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity, auth_transcript, verify
from awp.wire.timefmt import format_ts, now_ms

__all__ = ["RawListener", "RawPeer", "dumps"]


def dumps(obj: dict) -> bytes:
    """Compact JSON without HTML or non-ASCII escaping, as AWP lines are written."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class RawPeer:
    """One blocking connection to an AWP listener (``tcp:H:P`` or ``unix:/path``)."""

    def __init__(self, address: str, identity: Identity | None = None, *,
                 name: str = "rawpeer", connect_timeout: float = 10.0,
                 sock: socket.socket | None = None) -> None:
        self.address = address
        self.identity = identity or Identity.generate()
        self.key = self.identity.key
        self.name = name
        self.ids = IdGenerator()
        addr = parse_address(address)
        if sock is not None:  # an accepted connection (see RawListener)
            self.sock = sock
        elif addr.kind == "tcp":
            self.sock = socket.create_connection((addr.host, addr.port), timeout=connect_timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif addr.kind == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(connect_timeout)
            self.sock.connect(addr.path)
        else:
            raise ValueError(f"RawPeer speaks tcp and unix only, not {address!r}")
        self._buf = bytearray()
        self.eof = False
        self.received: list[bytes] = []  # every raw line read, for failure messages
        self.skipped: list[dict] = []  # lines recv_until/closed passed over
        # Handshake state.
        self.my_hello: bytes = b""
        self.my_hello_line: dict = {}
        self.peer_hello: dict | None = None
        self.peer_hello_raw: bytes = b""
        self.peer_auth: dict | None = None

    # -- context manager -----------------------------------------------------------

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- writing -------------------------------------------------------------------

    def envelope(self, obj: dict) -> dict:
        """``obj`` with ``id`` and ``ts`` filled in when missing (``t`` first)."""
        out = {"t": obj["t"]} if "t" in obj else {}
        if "id" not in obj:
            out["id"] = self.ids.next()
        if "ts" not in obj:
            out["ts"] = format_ts(now_ms())
        out.update(obj)
        return out

    def send_line(self, line: dict | bytes) -> dict | bytes:
        """Write one line.  A dict gets ``id``/``ts`` filled if missing and is
        returned as sent; bytes get a ``\\n`` appended unless they end in one."""
        if isinstance(line, dict):
            full = self.envelope(line)
            self.send_raw(dumps(full) + b"\n")
            return full
        data = bytes(line)
        self.send_raw(data if data.endswith(b"\n") else data + b"\n")
        return line

    def send_raw(self, data: bytes) -> None:
        """Write bytes exactly as given (no framing)."""
        self.sock.settimeout(30)
        self.sock.sendall(data)

    def half_close(self) -> None:
        """Send EOF (shutdown for writing); reading stays possible."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # -- reading -------------------------------------------------------------------

    def recv_raw_line(self, timeout: float = 10.0) -> bytes | None:
        """The next line's bytes without ``\\n``; None at EOF.  A final
        unterminated fragment before EOF is a dropped connection, not a line.
        Raises ``TimeoutError`` when no full line arrives within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                self.received.append(raw)
                return raw
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line from {self.address} within {timeout}s"
                                   f" (got so far: {self._shown()})")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
            else:
                self._buf += data

    def recv_line(self, timeout: float = 10.0) -> dict | None:
        """The next line parsed as JSON; None at EOF; ``TimeoutError`` on timeout."""
        raw = self.recv_raw_line(timeout)
        if raw is None:
            return None
        obj = json.loads(raw)
        assert isinstance(obj, dict), f"line is not a JSON object: {raw[:200]!r}"
        return obj

    def recv_until(self, pred: Callable[[dict], bool], timeout: float = 10.0, *,
                   auto_pong: bool = True) -> dict:
        """Read until a line satisfies ``pred`` and return it; others go to
        ``skipped`` (pings are answered unless ``auto_pong`` is off).  Raises
        ``AssertionError`` at EOF and ``TimeoutError`` at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching line within {timeout}s"
                                   f" (skipped: {self.skipped[-10:]!r})")
            line = self.recv_line(remaining)
            if line is None:
                raise AssertionError(f"connection closed while waiting (skipped:"
                                     f" {self.skipped[-10:]!r})")
            if pred(line):
                return line
            self.skipped.append(line)
            if auto_pong and line.get("t") == "ping" and line.get("id"):
                try:
                    self.send_line({"t": "pong", "re": line["id"]})
                except OSError:
                    pass

    def expect(self, t: str, timeout: float = 10.0, **fields: object) -> dict:
        """The next line of type ``t`` (with the given field values), skipping others."""
        return self.recv_until(
            lambda x: x.get("t") == t and all(x.get(k) == v for k, v in fields.items()),
            timeout)

    def closed(self, timeout: float = 10.0) -> bool:
        """True once EOF is seen within ``timeout`` (lines read meanwhile go to
        ``skipped``); False when the connection is still open at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                raw = self.recv_raw_line(remaining)
            except TimeoutError:
                return False
            if raw is None:
                return True
            try:
                self.skipped.append(json.loads(raw))
            except ValueError:
                self.skipped.append({"raw": raw[:200].decode("utf-8", "replace")})

    def _shown(self) -> str:
        return repr([r[:200] for r in self.received[-5:]] + [bytes(self._buf[:200])])

    # -- handshake -----------------------------------------------------------------

    def send_hello(self, version: int = 0, key_override: str | None = None,
                   **extra: object) -> dict:
        """Send our hello and remember its exact bytes for the transcript."""
        line = self.envelope({
            "t": "hello", "v": version, "key": key_override or self.key, "name": self.name,
            "nonce": b64url(os.urandom(32)), "caps": ["chat"], "about": "raw test peer",
            **extra,
        })
        self.my_hello = dumps(line)
        self.my_hello_line = line
        self.send_raw(self.my_hello + b"\n")
        return line

    def read_hello(self, timeout: float = 10.0) -> dict:
        """The daemon's hello (read once; later calls return the same line)."""
        if self.peer_hello is None:
            raw = self.recv_raw_line(timeout)
            assert raw is not None, "connection closed before the daemon's hello"
            line = json.loads(raw)
            assert line.get("t") == "hello", f"expected hello first, got {line!r}"
            self.peer_hello, self.peer_hello_raw = line, raw
        return self.peer_hello

    def send_auth(self, bad_sig: bool = False) -> dict:
        """Sign the transcript (ours first); ``bad_sig`` signs the mirror image,
        a valid-looking signature over the wrong transcript."""
        assert self.my_hello and self.peer_hello_raw, "exchange hellos first"
        if bad_sig:
            transcript = auth_transcript(self.peer_hello_raw, self.my_hello)
        else:
            transcript = auth_transcript(self.my_hello, self.peer_hello_raw)
        return self.send_line({"t": "auth", "sig": self.identity.sign(transcript),
                               **getattr(self, "auth_extra", {})})

    def verify_peer_auth(self, line: dict) -> bool:
        assert self.peer_hello is not None
        return verify(self.peer_hello["key"], auth_transcript(self.peer_hello_raw, self.my_hello),
                      line.get("sig", ""))

    def handshake(self, version: int = 0, key_override: str | None = None,
                  bad_sig: bool = False, timeout: float = 10.0, **hello_extra: object) -> dict:
        """Run the handshake up to the daemon's resume and return that line.

        Sends hello, reads the daemon's hello (unless already read), sends auth,
        reads and verifies the daemon's auth, then returns the next line, which
        is the daemon's ``resume`` on success.  If the daemon answers with an
        ``err`` at any step instead, that err is returned.  Our own resume is
        not sent: call :meth:`resume`.
        """
        self.send_hello(version, key_override, **hello_extra)
        self.read_hello(timeout)
        try:
            self.send_auth(bad_sig)
        except OSError:
            pass  # the daemon may already have refused our hello and closed
        line = self.recv_line(timeout)
        assert line is not None, "connection closed during the handshake"
        if line.get("t") == "err":
            return line
        assert line.get("t") == "auth", f"expected the daemon's auth, got {line!r}"
        assert self.verify_peer_auth(line), "the daemon's auth signature does not verify"
        self.peer_auth = line
        nxt = self.recv_line(timeout)
        assert nxt is not None, "connection closed right after auth"
        return nxt

    def resume(self, seen: dict[str, str] | None = None) -> dict:
        return self.send_line({"t": "resume", "seen": seen or {}})

    # -- conveniences ---------------------------------------------------------------

    def msg(self, text: str = "hello", th: str = "thr_rawtest1", **extra: object) -> dict:
        """Send a msg with one text part; returns the line as sent."""
        return self.send_line({"t": "msg", "th": th, "parts": [{"k": "text", "text": text}],
                               **extra})

    def ping(self, timeout: float = 10.0) -> dict:
        """Send a ping and return the matching pong."""
        sent = self.send_line({"t": "ping"})
        return self.recv_until(lambda x: x.get("t") == "pong" and x.get("re") == sent["id"],
                               timeout)


class RawListener:
    """A loopback TCP listener whose accepted connections are RawPeers.

    For tests where the daemon dials us (redial, dial-back): advertise
    :attr:`address` as ``hello.addr`` and :meth:`accept` the daemon's dial.
    """

    def __init__(self, identity: Identity | None = None, *, name: str = "rawpeer") -> None:
        self.identity = identity or Identity.generate()
        self.key = self.identity.key
        self.name = name
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address = f"tcp:127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> RawListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def accept(self, timeout: float = 10.0) -> RawPeer:
        """The next inbound connection; ``TimeoutError`` if none comes in time."""
        self.sock.settimeout(timeout)
        conn, _ = self.sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return RawPeer(self.address, self.identity, name=self.name, sock=conn)
