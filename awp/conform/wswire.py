"""The WebSocket binding under the runner: ws:// and wss:// as a socket-shaped wire.

:class:`~awp.conform.conn.PeerConn` drives a non-blocking socket through
``select``.  :class:`WsWire` has the same shape (``fileno``, ``send``,
``recv``, ``shutdown``, ``close``) over a wsproto connection, so every
scenario runs over the binding unchanged: a write goes out as binary
messages, every data frame received (binary or text) is handed over as
bytes, a Close frame reads as EOF and ``shutdown`` sends one.

It is the runner's own client, written against the binding as SPEC.md
describes it, not the daemon's (:mod:`awp.transport.wsclient`), so the two
cannot share a bug; wsproto is only the frame codec.  The ws scenarios
reach under it: :attr:`WsWire.framer` chooses how the next writes are cut
into frames, and :func:`http_exchange` sends the plain HTTP requests a
binding listener must answer too.
"""

from __future__ import annotations

import base64
import os
import select
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import ProtocolError

from ..wire.address import Address
from ..wire.wsnames import SUBPROTOCOL
from .conn import Fail, remaining

SEND_CHUNK = 256 * 1024  # the largest message a plain write becomes
_READ = 262144
_READS_PER_RECV = 8  # then back to the caller, so writing and reading stay interleaved
_ANSWER_BYTES = 64 * 1024  # what we keep of an HTTP answer
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

Framer = Callable[[bytes], list[Message]]


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """The system trust store, plus ``ca_file`` (``awp conform --ca``) when given.

    Built here rather than taken from the daemon's dialer, so the checker
    never shares a bug with what it checks.
    """
    ctx = ssl.create_default_context()
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def target_of(addr: Address) -> str:
    """The request target: the URL's path, ``/`` for a ``ws:HOST:PORT`` listen form."""
    return addr.path or "/"


def shown_url(addr: Address) -> str:
    return f"{'wss' if addr.tls else 'ws'}://{addr.http_host}{target_of(addr)}"


def open_socket(addr: Address, deadline: float, ca_file: str = "") -> socket.socket:
    """A blocking TCP (and, for wss, verified TLS) connection to ``addr`` before ``deadline``."""
    where = shown_url(addr)
    try:
        sock = socket.create_connection((addr.host, addr.port),
                                        timeout=max(0.05, remaining(deadline)))
    except TimeoutError:
        raise Fail(f"cannot connect to {where}: timed out") from None
    except OSError as e:
        raise Fail(f"cannot connect to {where}: {e.strerror or e}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not addr.tls:
        return sock
    try:
        ctx = tls_context(ca_file)
    except (OSError, ssl.SSLError) as e:
        sock.close()
        raise Fail(f"cannot load the CA file {ca_file}: {e}") from None
    try:
        sock.settimeout(max(0.05, remaining(deadline)))
        return ctx.wrap_socket(sock, server_hostname=addr.host)
    except ssl.SSLCertVerificationError as e:
        sock.close()
        raise Fail(f"the TLS certificate of {addr.host} is not trusted ({e.verify_message});"
                   " for a private CA give awp conform --ca FILE") from None
    except TimeoutError:
        sock.close()
        raise Fail(f"the TLS handshake with {where} timed out") from None
    except (OSError, ssl.SSLError) as e:
        sock.close()
        raise Fail(f"the TLS handshake with {where} failed ({e})") from None


# -- plain HTTP ------------------------------------------------------------------------

@dataclass
class HttpAnswer:
    status: int  # 0: the server closed without answering
    headers: dict[str, str] = field(default_factory=dict)  # lowercased names
    body: bytes = b""

    def shown(self) -> str:
        if not self.status:
            return "no HTTP answer (the connection closed)"
        text = " ".join(self.body.decode("utf-8", "replace").split())[:200]
        return f"HTTP {self.status}" + (f" ({text})" if text else "")


def http_exchange(addr: Address, method: str, target: str, deadline: float, *,
                  headers: list[tuple[str, str]] | None = None,
                  ca_file: str = "") -> HttpAnswer:
    """One request on a connection of its own; the answer's status, headers and
    (the start of) its body.  A 101 ends the exchange at once: nothing after it
    is read."""
    sock = open_socket(addr, deadline, ca_file)
    http = h11.Connection(h11.CLIENT)
    head = [("host", addr.http_host), *(headers or [])]
    if method in ("POST", "PUT"):
        head.append(("content-length", "0"))
    answer = HttpAnswer(0)
    try:
        sock.settimeout(max(0.05, remaining(deadline)))
        sock.sendall(http.send(h11.Request(method=method, target=target, headers=head))
                     + (http.send(h11.EndOfMessage()) or b""))
        while True:
            ev = http.next_event()
            if ev is h11.NEED_DATA:
                left = remaining(deadline)
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                http.receive_data(sock.recv(65536))
                continue
            if isinstance(ev, h11.InformationalResponse | h11.Response):
                answer.status = ev.status_code
                answer.headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                                  for k, v in ev.headers}
                if isinstance(ev, h11.InformationalResponse):
                    if ev.status_code == 101:
                        return answer
                    answer.status = 0  # a 1xx before the real answer
            elif isinstance(ev, h11.Data):
                answer.body = (answer.body + ev.data)[:_ANSWER_BYTES]
            elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed) or ev is h11.PAUSED:
                return answer
    except TimeoutError:
        got = f" (got {answer.shown()} so far)" if answer.status else ""
        raise Fail(f"no complete answer to {method} {target} in time{got}") from None
    except h11.RemoteProtocolError as e:
        if answer.status:
            return answer
        raise Fail(f"the answer to {method} {target} is not HTTP/1.1 ({e})") from None
    except OSError as e:
        if answer.status:
            return answer
        raise Fail(f"{method} {target}: the connection failed ({e.strerror or e})") from None
    finally:
        sock.close()


def upgrade_headers(subprotocols: list[str]) -> list[tuple[str, str]]:
    """The headers of a WebSocket upgrade, by hand (to leave the subprotocol out)."""
    key = base64.b64encode(os.urandom(16)).decode()
    out = [("upgrade", "websocket"), ("connection", "Upgrade"),
           ("sec-websocket-key", key), ("sec-websocket-version", "13")]
    if subprotocols:
        out.append(("sec-websocket-protocol", ", ".join(subprotocols)))
    return out


# -- the wire --------------------------------------------------------------------------

def dial_ws(addr: Address, deadline: float, ca_file: str = "") -> WsWire:
    """Open an AWP WebSocket to ``addr`` (offering ``awp.v0``) before ``deadline``."""
    sock = open_socket(addr, deadline, ca_file)
    ws = WSConnection(ConnectionType.CLIENT)
    where = shown_url(addr)
    status, body, early = 0, b"", bytearray()
    try:
        sock.settimeout(max(0.05, remaining(deadline)))
        sock.sendall(ws.send(Request(host=addr.http_host, target=target_of(addr),
                                     subprotocols=[SUBPROTOCOL])))
        accepted = False
        while not accepted:
            left = remaining(deadline)
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                break
            ws.receive_data(data)
            for ev in ws.events():
                if isinstance(ev, AcceptConnection):
                    if ev.subprotocol != SUBPROTOCOL:
                        raise Fail(f"{where} answered the upgrade with 101 but did not agree"
                                   f" to the subprotocol {SUBPROTOCOL}")
                    accepted = True
                elif isinstance(ev, RejectConnection):
                    status = ev.status_code
                elif isinstance(ev, RejectData):
                    body = (body + ev.data)[:_ANSWER_BYTES]
                elif isinstance(ev, Message) and accepted:  # lines right behind the 101
                    early += ev.data if isinstance(ev.data, bytes) else ev.data.encode()
    except TimeoutError:
        sock.close()
        raise Fail(f"no answer to the WebSocket upgrade at {where} in time") from None
    except (ProtocolError, h11.ProtocolError) as e:
        sock.close()
        raise Fail(f"{where} is not a WebSocket server ({e})") from None
    except OSError as e:
        sock.close()
        raise Fail(f"the upgrade at {where} failed: {e.strerror or e}") from None
    except Fail:
        sock.close()
        raise
    if not accepted:
        sock.close()
        if not status:
            raise Fail(f"{where} closed the connection without answering the upgrade")
        raise Fail(f"{where} refused the WebSocket upgrade: {HttpAnswer(status, body=body).shown()}")
    return WsWire(sock, ws, bytes(early))


class WsWire:
    """An open AWP WebSocket, shaped like the non-blocking socket PeerConn expects.

    ``send`` takes at most :data:`SEND_CHUNK` bytes and frames them (by
    :attr:`framer` when set: the ws scenarios' hook); it raises
    ``BlockingIOError`` while earlier frames still wait for the socket, and
    :meth:`flush` pushes them on.  ``recv`` hands over the data of whole or
    partial frames, answers pings, and reads a Close as EOF (answering it).
    """

    def __init__(self, sock: socket.socket, ws: WSConnection, early: bytes = b"") -> None:
        self.sock = sock
        self.ws = ws
        self.framer: Framer | None = None
        self.note: Callable[[str], None] = lambda text: None
        self.close_code: int | None = None
        self._out = bytearray()
        self._held = bytearray(early)  # data read along with the 101
        self._eof = False
        self._eof_told = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def setblocking(self, flag: bool) -> None:
        self.sock.setblocking(flag)

    # -- writing ------------------------------------------------------------------------

    @property
    def unflushed(self) -> int:
        return len(self._out)

    def flush(self) -> None:
        """Write what the socket takes now of the frames already made."""
        while self._out:
            try:
                n = self.sock.send(self._out)
            except _WOULD_BLOCK:
                return
            del self._out[:n]

    def queue(self, events: list[Event]) -> None:
        """Frame ``events`` as they are (the ws scenarios); :meth:`flush` sends them."""
        self._out += b"".join(self.ws.send(e) for e in events)

    def send(self, data: bytes | memoryview) -> int:
        self.flush()
        if self._out:
            raise BlockingIOError
        if self.ws.state is not ConnectionState.OPEN:
            raise BrokenPipeError(32, "the WebSocket is closing (a Close frame was sent)")
        chunk = bytes(data[:SEND_CHUNK])
        self.queue(self.framer(chunk) if self.framer is not None else [BytesMessage(chunk)])
        self.flush()
        return len(chunk)

    def shutdown(self, how: int) -> None:
        """Our half-close: a Close frame (1000); the peer's data keeps coming until its own."""
        if self.ws.state is ConnectionState.OPEN:
            self.queue([CloseConnection(code=1000, reason="")])
        until = time.monotonic() + 2.0
        while self._out and remaining(until) > 0:
            select.select([], [self.sock], [], remaining(until))
            self.flush()

    def close(self) -> None:
        try:
            if self.ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                self.queue([CloseConnection(code=1000, reason="")])
            self.flush()
        except (OSError, ProtocolError):
            pass
        self.sock.close()

    # -- reading ------------------------------------------------------------------------

    def pending(self) -> int:
        """Something to hand over without waiting on the socket (PeerConn asks first)."""
        tls = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
        return len(self._held) or tls or int(self._eof and not self._eof_told)

    def recv(self, _max: int) -> bytes:
        got, self._held = bytes(self._held), bytearray()
        if got:
            return got
        if self._eof:
            self._eof_told = True
            return b""
        out = bytearray()
        for _ in range(_READS_PER_RECV):
            try:
                data = self.sock.recv(_READ)
            except _WOULD_BLOCK:
                break
            except ssl.SSLZeroReturnError:
                data = b""
            if not data:
                if not self._eof:
                    self.note("the peer dropped the TCP connection without a Close frame")
                self._eof = True
                break
            if self.ws.state in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
                self.ws.receive_data(data)
                self._take(out)
            if self._eof:
                break
        try:
            self.flush()  # pongs and our answer to a Close
        except OSError:
            pass
        if out:
            return bytes(out)
        if self._eof:
            self._eof_told = True
            return b""
        raise BlockingIOError

    def _take(self, out: bytearray) -> None:
        for ev in self.ws.events():
            if isinstance(ev, BytesMessage | TextMessage):
                out += ev.data if isinstance(ev.data, bytes | bytearray) else ev.data.encode()
            elif isinstance(ev, Ping):
                if self.ws.state is ConnectionState.OPEN:
                    self.queue([ev.response()])
            elif isinstance(ev, CloseConnection):
                self._eof = True
                self.close_code = int(ev.code)
                reason = f" ({ev.reason})" if ev.reason else ""
                self.note(f"the peer's Close frame: {int(ev.code)}{reason}")
                if self.ws.state is ConnectionState.REMOTE_CLOSING:
                    self.queue([ev.response()])
                elif self.ws.state is ConnectionState.OPEN:  # frames wsproto could not parse
                    self.queue([CloseConnection(code=ev.code, reason=ev.reason or "")])
