"""The ws listener: one TCP port that upgrades AWP WebSockets and answers health checks.

Each accepted connection gets its own task that reads one HTTP request
(h11, head bounded by :attr:`WsLimits.request_bytes`, all of it within
:attr:`WsLimits.handshake_timeout`) and then:

* ``GET /healthz`` without an upgrade: ``200 ok`` (a platform's health check);
* an upgrade offering the ``awp.v0`` subprotocol: ``101``, and the stream
  goes to the engine like any other;
* an upgrade without it: ``400``, naming the subprotocol;
* any other request: ``426`` (a GET that is no upgrade) or ``405``.

A source address with :attr:`WsLimits.upgrades_per_ip` connections still
upgrading gets ``429`` at once, so one address cannot hold every slot open.
Behind a platform's proxy every connection comes from the proxy's address;
raise the bound there (docs/threat-model.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from http import HTTPStatus

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.utilities import RemoteProtocolError

from ..wire.address import Address
from ..wire.wsnames import HEALTH_PATH, SUBPROTOCOL
from .streams import Handler, Listener, listen, peer_description
from .wsconfig import WsLimits, current
from .wsstream import WebSocketStream

__all__ = ["WsListener", "listen_ws"]

log = logging.getLogger("awp.transport")
_READ = 16 * 1024
_DRAIN_TIME = 1.0  # seconds a refused client is read from before its socket closes
_DRAIN_BYTES = 64 * 1024


class _Refuse(Exception):
    def __init__(self, status: int, text: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(text)
        self.status, self.text, self.headers = status, text, headers or []


def _response(status: int, text: str, headers: list[tuple[str, str]] = (), *,
              head: bool = False) -> bytes:
    body = text.encode() + b"\n"
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
             "content-type: text/plain; charset=utf-8", f"content-length: {len(body)}",
             "connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head else body)


async def _answer(stream: trio.abc.HalfCloseableStream, data: bytes) -> None:
    """Send an HTTP answer, half-close and drain a little before the close, so an
    unread request does not turn the close into a reset that eats the answer."""
    with trio.move_on_after(_DRAIN_TIME):
        try:
            await stream.send_all(data)
            await stream.send_eof()
            left = _DRAIN_BYTES
            while left > 0 and (got := await stream.receive_some(_READ)):
                left -= len(got)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


def _tokens(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    out: list[str] = []
    for k, v in headers:
        if k.lower() == name:
            out += [t.strip().lower() for t in v.decode("latin-1").split(",") if t.strip()]
    return out


async def _read_request(stream: trio.abc.Stream, limits: WsLimits) -> tuple[h11.Request, bytes]:
    """The request's head and whatever the client sent after it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.request_bytes)
    while True:
        try:
            ev = conn.next_event()
        except h11.RemoteProtocolError as e:
            raise _Refuse(e.error_status_hint, f"bad request: {e}") from None
        if ev is h11.NEED_DATA:
            data = await stream.receive_some(_READ)
            if not data:
                raise EOFError
            conn.receive_data(data)
            continue
        if isinstance(ev, h11.Request):
            return ev, conn.trailing_data[0]
        raise _Refuse(400, "bad request")


def _route(req: h11.Request) -> None:
    """Raise :class:`_Refuse` unless ``req`` is an AWP WebSocket upgrade."""
    method = req.method.decode("latin-1").upper()
    path = req.target.decode("latin-1").split("?", 1)[0]
    upgrade = "websocket" in _tokens(req.headers, b"upgrade")
    if not upgrade:
        if method in ("GET", "HEAD") and path == HEALTH_PATH:
            raise _Refuse(200, "ok")
        if method not in ("GET", "HEAD"):
            raise _Refuse(405, "this port takes only WebSocket upgrades and GET /healthz",
                          [("allow", "GET")])
        raise _Refuse(426, f"this port speaks AWP over WebSocket (subprotocol {SUBPROTOCOL});"
                           f" GET {HEALTH_PATH} answers health checks",
                      [("upgrade", "websocket")])
    if SUBPROTOCOL not in _tokens(req.headers, b"sec-websocket-protocol"):
        raise _Refuse(400, f"a WebSocket upgrade here must offer the subprotocol {SUBPROTOCOL}"
                           " (Sec-WebSocket-Protocol)")


async def upgrade(stream: trio.abc.HalfCloseableStream, limits: WsLimits, desc: str) -> WebSocketStream | None:
    """Answer one connection's request; the upgraded stream, or None once answered."""
    req: h11.Request | None = None
    try:
        req, rest = await _read_request(stream, limits)
        _route(req)
        ws = WSConnection(ConnectionType.SERVER)
        ws.initiate_upgrade_connection(req.headers, req.target)
        ev = next(ws.events(), None)
        if not isinstance(ev, Request):
            raise _Refuse(400, "bad WebSocket upgrade")
        await stream.send_all(ws.send(AcceptConnection(subprotocol=SUBPROTOCOL)))
    except _Refuse as r:
        head = req is not None and req.method.upper() == b"HEAD"
        await _answer(stream, _response(r.status, r.text, r.headers, head=head))
        if r.status != 200:
            log.info("ws %s: refused (%d %s)", desc, r.status, r.text)
        return None
    except RemoteProtocolError as e:
        hint = e.event_hint
        status = hint.status_code if isinstance(hint, RejectConnection) else 400
        await _answer(stream, _response(status, f"bad WebSocket upgrade: {e}"))
        log.info("ws %s: bad upgrade (%s)", desc, e)
        return None
    except EOFError:
        return None
    wss = WebSocketStream(stream, ws, limits, desc=f"ws {desc.removeprefix('tcp ')}")
    if rest:
        await wss.feed(rest)  # frames the client sent right behind its request
    return wss


class WsListener(Listener):
    """A TCP listener whose connections are upgraded before the engine sees them."""

    def __init__(self, bound: Address, inner: Listener, limits: WsLimits) -> None:
        super().__init__(bound, [])
        self._inner = inner
        self._limits = limits
        self._upgrading: Counter[str] = Counter()

    async def serve(self, handler: Handler, *,
                    task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self._inner.serve, self._wrap(handler))
            task_status.started(self.bound)

    def _wrap(self, handler: Handler) -> Handler:
        async def on_tcp(stream: trio.abc.HalfCloseableStream) -> None:
            desc = peer_description(stream)
            ip = _source_ip(stream)
            if self._upgrading[ip] >= self._limits.upgrades_per_ip:
                log.warning("ws %s: %d upgrades already pending from this address"
                            " (limits.ws_upgrades_per_ip)", desc, self._upgrading[ip])
                await _answer(stream, _response(
                    429, f"too many pending upgrades from {ip}", [("retry-after", "1")]))
                return
            self._upgrading[ip] += 1
            try:
                with trio.move_on_after(self._limits.handshake_timeout) as scope:
                    wss = await upgrade(stream, self._limits, desc)
                if scope.cancelled_caught:
                    log.info("ws %s: no upgrade within %gs", desc, self._limits.handshake_timeout)
                    return
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                log.info("ws %s: dropped during upgrade (%s)", desc, e)
                return
            finally:
                self._upgrading[ip] -= 1
                if not self._upgrading[ip]:
                    del self._upgrading[ip]
            if wss is not None:
                await handler(wss)
        return on_tcp

    async def aclose(self) -> None:
        await self._inner.aclose()


def _source_ip(stream: object) -> str:
    sock = getattr(stream, "socket", None)
    try:
        return str(sock.getpeername()[0]) if sock is not None else "?"
    except OSError:
        return "?"


async def listen_ws(addr: Address, allow_plaintext: bool = False,
                    limits: WsLimits | None = None) -> WsListener:
    """Bind ``ws:HOST:PORT[=URL]``; the bound address keeps the public URL."""
    inner = await listen(Address(kind="tcp", host=addr.host, port=addr.port),
                         allow_plaintext=allow_plaintext)
    bound = Address(kind="ws", host=inner.bound.host, port=inner.bound.port, url=addr.url)
    return WsListener(bound, inner, limits or current().limits)

