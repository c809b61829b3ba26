"""``awp web``: the dashboard page and its read-only API over HTTP.

A separate trio process on the local API's h11 core
(:mod:`awp.localapi.h11serve`) that reads this host's
daemon through :mod:`awp.web.daemon` and never opens the store or starts a
daemon. Every connection runs in its own task; event streams are fed through
bounded per-client queues (see :mod:`awp.web.hub`), so a reader that stalls
only ever holds up itself.

Security (see the Web API docs):

- Every request needs the home's token (:mod:`awp.web.token`): the URL
  ``awp web`` prints carries it as ``?token=``, which sets an HttpOnly,
  SameSite=Strict cookie and redirects to the bare URL. Without a token or
  cookie the answer is 401, with a wrong one 403 (scripts may send
  ``Authorization: Bearer TOKEN``).
- On a loopback address only ``Host: localhost``, ``*.localhost``, a loopback
  IP or an ``--allow-host`` name is answered; anything else gets 421 (DNS
  rebinding). On any other address every host name is accepted.
- Every response carries ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer``, ``X-Frame-Options: DENY`` and a CSP that
  lets the page load nothing from elsewhere. JSON is ``Cache-Control: no-store``.
- The API takes no request bodies: a GET with one gets 400, anything but
  GET and HEAD 405.
- Files: only PNG, JPEG, GIF, WebP and AVIF (whose bytes agree) are served
  inline; everything else is an ``application/octet-stream`` attachment under
  ``Content-Security-Policy: sandbox``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import trio

from ..localapi.h11serve import HttpConnection, Incoming, serve_connection
from ..wire.canonical import compact_json
from .daemon import DaemonDown, DaemonError
from .hub import Hub, sse
from .model import RASTER, conversation
from .token import same

log = logging.getLogger("awp.web")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:;"
       " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Files that are not shown inline: no script, no plugin, no same origin.
SANDBOX_CSP = "sandbox; " + CSP

SECURITY_HEADERS = [
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
]

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    "/favicon.ico": ("favicon.svg", "image/svg+xml"),
}

#: Magic bytes of the formats shown inline; a file must match what it claims.
_MAGIC: dict[str, Callable[[bytes], bool]] = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
    "image/avif": lambda b: b[4:8] == b"ftyp" and b[8:12] in (b"avif", b"avis"),
}

IDLE_TIMEOUT = 60.0
#: A write that takes longer than this ends the connection (a stalled reader).
WRITE_TIMEOUT = 30.0
PING_SECONDS = float(os.environ.get("AWP_WEB_PING_SECONDS") or 20.0)
_MAX_REQUEST_HEAD = 64 * 1024
#: How long the browser keeps the token cookie (the token itself lasts until
#: ``<home>/web.token`` is deleted).
COOKIE_MAX_AGE = 30 * 24 * 3600
PAGES = ("/", "/index.html")
ACTIVITY_DEFAULT = 300
ACTIVITY_MAX = 2000


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_loopback_host(host: str) -> bool:
    """Whether a listen host only accepts connections from this machine."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> str | None:
    """The name in a Host header (port and brackets removed), or None if malformed."""
    host = value.strip().lower()
    if not host:
        return None
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[1:end], host[end + 1:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name
    name, sep, port = host.partition(":")
    if sep and not port.isdigit():
        return None
    return name.rstrip(".")


def host_allowed(value: str | None, allowed: frozenset[str]) -> bool:
    """The DNS-rebinding check for a loopback listener."""
    if value is None:
        return False
    name = _split_host(value)
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        if ipaddress.ip_address(name).is_loopback:
            return True
    except ValueError:
        pass
    return name in allowed


def normalize_allowed(names: list[str]) -> frozenset[str]:
    out = set()
    for n in names:
        name = _split_host(n)
        if name:
            out.add(name)
    return frozenset(out)


def load_static() -> dict[str, bytes]:
    base = resources.files("awp.web") / "static"
    files = {}
    for name, _ctype in STATIC.values():
        files[name] = (base / name).read_bytes()
    return files


def _content_disposition(kind: str, name: str) -> str:
    ascii_name = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\;' else "_"
                         for ch in name)[:150] or "file"
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name[:200], safe='')}"


def _cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name not in out:
            out[name] = value.strip().strip('"')
    return out


class _Request:
    def __init__(self, incoming: Incoming) -> None:
        self.method = incoming.method
        path, _, qs = incoming.target.partition("?")
        self.path = path
        self.pairs = parse_qsl(qs, keep_blank_values=True)
        self.query = dict(self.pairs)
        # Repeated headers are joined; the token check reads one value.
        self.headers = incoming.headers
        self.has_body = not incoming.complete  # the client sent a body (left unread)


class WebApp:
    """The routes of ``awp web`` and the HTTP plumbing that serves them."""

    def __init__(self, hub: Hub, *, loopback: bool, allow_hosts: list[str], token: str,
                 port: int) -> None:
        self.hub = hub
        self.token = token
        # Per port: cookies ignore ports, and two dashboards on one host must not clash.
        self.cookie = f"awp_token_{port}"
        self.check_host = loopback
        self.allowed = normalize_allowed(allow_hosts)
        self.static = load_static()

    # -- connection ------------------------------------------------------------------

    async def handle(self, stream: trio.abc.Stream) -> None:
        # No route takes a body (max_body 0): a request that has one is
        # answered without reading it, and the connection closes after.
        conn = HttpConnection(stream, idle_timeout=IDLE_TIMEOUT, write_timeout=WRITE_TIMEOUT,
                              max_body=0, max_head=_MAX_REQUEST_HEAD)

        async def answer(incoming: Incoming) -> bool:
            return await self._respond(conn, _Request(incoming))

        async def refuse(status: int, message: str) -> None:
            await self._send(conn, status, {"error": message}, close=True)

        await serve_connection(conn, answer, refuse, log)

    # -- sending ---------------------------------------------------------------------

    @staticmethod
    def _headers(ctype: str, extra: list[tuple[str, str]] | None, csp: str = CSP
                 ) -> list[tuple[str, str]]:
        headers = [("content-type", ctype), *SECURITY_HEADERS, ("content-security-policy", csp)]
        if extra:
            headers += extra
        return headers

    async def _send(self, conn: HttpConnection, status: int, obj: Any, *, close: bool = False,
                    extra: list[tuple[str, str]] | None = None) -> None:
        body = obj if isinstance(obj, bytes) else compact_json(obj).encode()
        headers = self._headers("application/json; charset=utf-8",
                                [("cache-control", "no-store"), *(extra or [])])
        await conn.respond(status, headers, body, close=close)

    # -- the token ---------------------------------------------------------------------

    def _credential(self, req: _Request) -> str | None:
        """The token the request offers (query, bearer header or cookie), if any."""
        if "token" in req.query:
            return req.query["token"]
        auth = req.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return _cookies(req.headers.get("cookie", "")).get(self.cookie)

    def _set_cookie(self) -> tuple[str, str]:
        return ("set-cookie", f"{self.cookie}={self.token}; Path=/; Max-Age={COOKIE_MAX_AGE};"
                              " HttpOnly; SameSite=Strict")

    async def _refuse(self, conn: HttpConnection, req: _Request,
                      status: int, why: str) -> None:
        message = (f"{why}: open the URL that awp web printed (it ends in ?token=...);"
                   " the token is also in web.token in the awp home")
        extra = [("www-authenticate", 'Bearer realm="awp web"')] if status == 401 else []
        if req.path.startswith("/api/"):
            await self._send(conn, status, {"error": message}, extra=extra,
                             close=req.has_body)
        else:
            await conn.respond(status, self._headers(
                "text/plain; charset=utf-8", [("cache-control", "no-store"), *extra]),
                (message + "\n").encode(), close=req.has_body)

    async def _check_token(self, conn: HttpConnection,
                           req: _Request) -> bool:
        """Whether the request may go on; if not, its answer has been sent."""
        given = self._credential(req)
        if given is None:
            await self._refuse(conn, req, 401, "this dashboard needs its token")
            return False
        if not same(given, self.token):
            await self._refuse(conn, req, 403, "wrong token for this dashboard")
            return False
        if "token" in req.query and req.path in PAGES and req.method in ("GET", "HEAD"):
            # Trade the token in the URL for a cookie, and get it out of the
            # address bar and the history.
            rest = urlencode([(k, v) for k, v in req.pairs if k != "token"])
            await conn.respond(303, self._headers("text/plain; charset=utf-8", [
                ("location", req.path + ("?" + rest if rest else "")),
                ("cache-control", "no-store"), self._set_cookie()]), close=req.has_body)
            return False
        return True

    # -- routing ---------------------------------------------------------------------

    async def _respond(self, conn: HttpConnection,
                       req: _Request) -> bool:
        if self.check_host and not host_allowed(req.headers.get("host"), self.allowed):
            await self._send(conn, 421, {
                "error": "misdirected request: this dashboard answers only for localhost"
                         " (use --allow-host NAME behind a proxy)"}, close=True)
            return False
        if not await self._check_token(conn, req):
            return not req.has_body
        if req.method not in ("GET", "HEAD"):
            await self._send(conn, 405, {"error": f"method {req.method} not allowed"},
                             extra=[("allow", "GET, HEAD")], close=req.has_body)
            return not req.has_body
        if req.has_body:
            await self._send(conn, 400, {
                "error": "the dashboard API takes no request body"}, close=True)
            return False
        try:
            if req.path in STATIC:
                name, ctype = STATIC[req.path]
                await conn.respond(200, self._headers(ctype, [("cache-control", "no-cache")]),
                                   self.static[name])
                return True
            if req.path == "/api/events":
                if conn.head_only:
                    await conn.respond(200, self._headers(
                        "text/event-stream", [("cache-control", "no-store")]))
                    return True
                await self._events(conn, req)
                return False
            if req.path == "/api/blob":
                return await self._blob(conn, req)
            handler = {
                "/api/state": self._state,
                "/api/activity": self._activity,
                "/api/thread": self._thread,
                "/api/board": self._board,
                "/api/topic": self._topic,
            }.get(req.path.rstrip("/") or "/")
            if handler is None:
                raise HttpError(404, f"not found: {req.path}")
            status, obj = await handler(req)
            await self._send(conn, status, obj)
            return True
        except HttpError as e:
            await self._send(conn, e.status, {"error": e.message})
            return True
        except DaemonError as e:
            status = e.status if e.status in (400, 404, 409) else 502
            await self._send(conn, status, {"error": e.message})
            return True
        except DaemonDown as e:
            await self._send(conn, 503, {"error": str(e)})
            return True

    async def _state(self, req: _Request) -> tuple[int, Any]:
        if self.hub.state is None:
            return 503, {"error": self.hub.error or "starting"}
        return 200, self.hub.state_json

    async def _activity(self, req: _Request) -> tuple[int, Any]:
        raw = req.query.get("limit", "")
        try:
            limit = int(raw) if raw else ACTIVITY_DEFAULT
        except ValueError:
            raise HttpError(400, "limit must be a whole number") from None
        if limit <= 0 or limit > ACTIVITY_MAX:
            limit = ACTIVITY_DEFAULT
        after = req.query.get("after")
        if after not in (None, ""):
            try:
                after_n: int | None = int(after)
            except ValueError:
                raise HttpError(400, "after must be a seq (a whole number)") from None
        else:
            after_n = None
        return 200, {"items": self.hub.recent(limit, after_n)}

    def _need(self, req: _Request, *names: str) -> list[str]:
        values = []
        for n in names:
            v = (req.query.get(n) or "").strip()
            if not v:
                raise HttpError(400, f"{n} is required")
            values.append(v)
        return values

    async def _thread(self, req: _Request) -> tuple[int, Any]:
        peer, th = self._need(req, "peer", "th")
        from .hub import blob_url

        found = await self.hub.link.get("/v1/web/thread", {"peer": peer, "th": th})
        return 200, conversation(found, blob_url)

    async def _board(self, req: _Request) -> tuple[int, Any]:
        from . import board

        return 200, board.board(await self.hub.link.get("/v1/web/board"))

    async def _topic(self, req: _Request) -> tuple[int, Any]:
        from . import board

        (topic,) = self._need(req, "topic")
        query: dict[str, Any] = {"topic": topic}
        if req.query.get("n"):
            query["n"] = req.query["n"]
        return 200, board.topic_view(await self.hub.link.get("/v1/web/topic", query))

    async def _blob(self, conn: HttpConnection, req: _Request) -> bool:
        peer, direction, ref = self._need(req, "peer", "dir", "ref")
        if direction not in ("in", "out"):
            raise HttpError(400, "dir must be in or out")
        info = await self.hub.link.get("/v1/web/blob",
                                       {"peer": peer, "dir": direction, "ref": ref})
        path = info.get("path") or ""
        try:
            f = await trio.open_file(path, "rb")
        except OSError:
            raise HttpError(404, "the file is no longer on this host") from None
        async with f:
            size = os.fstat(f.fileno()).st_size
            first = await f.read(32)
            mime = (info.get("mime") or "").split(";", 1)[0].strip().lower()
            name = info.get("name") or ref
            inline = mime in RASTER and _MAGIC[mime](first)
            if inline:
                headers = self._headers(mime, [
                    ("content-disposition", _content_disposition("inline", name)),
                    ("cache-control", "no-store")])
            else:
                headers = self._headers("application/octet-stream", [
                    ("content-disposition", _content_disposition("attachment", name)),
                    ("cache-control", "no-store")], csp=SANDBOX_CSP)
            headers.append(("content-length", str(size)))
            await conn.start(200, headers)
            if not conn.head_only:
                await conn.send(first)
                sent = len(first)
                while sent < size:
                    chunk = await f.read(min(256 * 1024, size - sent))
                    if not chunk:
                        break
                    sent += len(chunk)
                    await conn.send(chunk)
                if sent != size:
                    return False  # the file shrank: cut the response short
            await conn.end()
        return True

    # -- server-sent events ------------------------------------------------------------

    async def _events(self, conn: HttpConnection,
                      req: _Request) -> None:
        last_raw = req.headers.get("last-event-id") or req.query.get("last_event_id") or ""
        try:
            last: int | None = int(last_raw.strip()) if last_raw.strip() else None
        except ValueError:
            last = None
        hub = self.hub
        # Subscribe, read the state and the replay in one step (no await between),
        # so nothing is both replayed and queued, and nothing falls in between.
        client = hub.subscribe()
        first = [b"retry: 2000\n\n"]
        if hub.state_event:
            first.append(hub.state_event)
        else:
            first.append(sse("down", {"error": hub.error or "starting"}))
        if last is not None:
            first += [sse("activity", item, item["seq"]) for item in hub.replay_after(last)]
        try:
            headers = self._headers("text/event-stream; charset=utf-8", [
                ("cache-control", "no-store"), ("x-accel-buffering", "no")])
            await conn.start(200, headers)
            await conn.send(b"".join(first))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.watch_hangup, nursery.cancel_scope)
                await self._pump_events(conn, client)
                nursery.cancel_scope.cancel()
        finally:
            hub.unsubscribe(client)

    async def _pump_events(self, conn: HttpConnection,
                           client: Any) -> None:
        next_ping = trio.current_time() + PING_SECONDS
        while True:
            chunk = None
            with trio.move_on_at(next_ping):
                try:
                    chunk = await client.recv.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return  # dropped by the hub (too slow): the client reconnects
            if chunk is None:
                chunk = b": ping\n\n"
                next_ping = trio.current_time() + PING_SECONDS
            try:
                await conn.send(chunk)
            except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
                return  # a reader that stopped reading, or went away


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` (every address) or ``PORT``."""
    t = text.strip()
    if t.isdigit():
        return "127.0.0.1", int(t)
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or not t[end + 1:].startswith(":"):
            raise ValueError(f"bad listen address {text!r}: use [V6]:PORT")
        host, port = t[1:end], t[end + 2:]
    else:
        host, sep, port = t.rpartition(":")
        if not sep:
            raise ValueError(f"bad listen address {text!r}: use HOST:PORT")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad port in {text!r}")
    return host or "0.0.0.0", int(port)


async def serve(hub: Hub, host: str, port: int, *, allow_hosts: list[str], token: str,
                task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
    """Follow the daemon and serve the page until cancelled."""
    loopback = is_loopback_host(host)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    app = WebApp(hub, loopback=loopback, allow_hosts=allow_hosts, token=token, port=bound[1])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        task_status.started((bound[0], bound[1], loopback))
        await trio.serve_listeners(app.handle, listeners)
