"""Server side of the daemon's local API: HTTP/1.1 + JSON on a Unix socket.

The local API follows the convention of local daemons such as Docker's engine
API: plain HTTP on a private Unix socket, so ``curl --unix-socket`` works for
debugging and any language can talk to the daemon. It is small and fixed
(JSON in, JSON or NDJSON out), so instead of a web framework this is h11 (a
sans-I/O HTTP parser) driven by trio, which keeps the daemon a single trio
process with no second event loop and no extra dependencies.  The HTTP
plumbing itself (reading within bounds, keep-alive, streaming, hang-ups) is
the core :mod:`awp.localapi.h11serve`, which ``awp web`` runs on too; this
module is the local API's side of it: requests, routes, JSON answers.

Every connection runs in its own task, so a client that stalls (stops reading,
sends half a request) only ever holds up itself.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import socket
import stat
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, unquote

import trio

from ..base.echo import cut_message
from ..base.limits import Limits
from ..wire.canonical import compact_json
from ..wire.strictjson import loads as strict_loads
from ..wire.strictjson import without_lone_surrogates
from .h11serve import HttpConnection, Incoming, Outlet, serve_connection
from .upgrade import Upgrade

log = logging.getLogger("awp.localapi")

#: Largest request body accepted; bigger ones get 413 (blobs travel by path,
#: not through the API, and no protocol line exceeds 1 MiB, so this is
#: generous). The daemon passes ``Limits.api_body_bytes``.
MAX_BODY = Limits.api_body_bytes

#: Deepest nesting of arrays and objects accepted in a JSON body; deeper ones
#: get 400 (nothing we take nests beyond a few levels, and deep nesting only
#: serves to exhaust the parser's recursion). The daemon passes
#: ``Limits.json_depth``.
MAX_DEPTH = Limits.json_depth

#: How long a connection may sit idle (between or inside requests) before the
#: server drops it, so abandoned keep-alive connections do not pile up.
IDLE_TIMEOUT = 300.0

#: How long closing a stream's iterator may take when the client goes away.
_ACLOSE_GRACE = 5.0

Handler = Callable[["Request"], Awaitable[Any]]


class ApiError(Exception):
    """An error a handler reports to the client as a status and a JSON body.

    ``code`` is a stable machine-readable word (``not_found``, ``bad_peer``,
    ...) so clients can branch on it without parsing the message.
    """

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = cut_message(message)  # the backstop: no error repeats a huge input
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code}


class Request:
    """One parsed request as handlers see it.

    ``path`` is the request target without its query, still percent-encoded
    (route patterns are matched segment by segment and only the captured
    ``params`` are decoded, so an encoded ``/`` inside a parameter stays one
    segment).
    """

    def __init__(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        connection_id: int = 0,
        max_depth: int = MAX_DEPTH,
    ) -> None:
        path, _, query_string = target.partition("?")
        self.method = method.upper()
        self.path = path
        self.query_string = query_string
        self._pairs = parse_qsl(query_string, keep_blank_values=True)
        # Last value wins, as with most frameworks; query_list() gives all.
        self.query: dict[str, str] = dict(self._pairs)
        self.headers = headers
        self.body = body
        self.params: dict[str, str] = {}
        # Lets handlers and logs tell requests on one keep-alive connection apart.
        self.connection_id = connection_id
        self.max_depth = max_depth

    def query_list(self, name: str) -> list[str]:
        """Every value of a repeated query parameter, in order."""
        return [value for key, value in self._pairs if key == name]

    def json(self) -> Any:
        """The body parsed as JSON; ``None`` when there is no body."""
        if not self.body.strip():
            return None
        too_deep = ApiError(
            400, f"bad JSON body: nested deeper than {self.max_depth} levels", "bad_json")
        try:
            obj = strict_loads(self.body)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise ApiError(400, f"bad JSON body: {exc}", "bad_json") from None
        except RecursionError:
            raise too_deep from None
        if not json_depth_within(obj, self.max_depth):
            raise too_deep
        return without_lone_surrogates(self.body, obj)

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.path}>"


def json_depth_within(obj: Any, limit: int) -> bool:
    """Whether parsed JSON nests arrays and objects at most ``limit`` deep.

    Iterative, so that checking a deep document cannot itself run out of
    stack; a scalar has depth 0, ``[]`` and ``{}`` depth 1.
    """
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


class Stream:
    """A streaming NDJSON response (``tail``, ``listen``, long ``wait``).

    ``source`` is an async iterable of JSON-able objects, or a zero-argument
    callable returning one (such as an async generator function), which is
    then only called once the response starts. Each object goes out as its
    own chunk the moment it is produced; ``bytes`` go out as they are (a
    line the source encoded itself, newline included). If the client disconnects, the
    iteration is cancelled and the iterator closed, so ``finally`` blocks in
    a generator run promptly and subscriptions are released.

    Headers are sent before the first object, so validate arguments in the
    handler (raising ``ApiError``) before returning the ``Stream``: once the
    stream has started, a failure can only be reported by cutting the
    response short, which clients see as a truncated stream.

    ``direct``: ``source`` is called with the connection's :class:`Outlet`,
    through which other tasks may write pieces themselves while the source
    waits for its next one (see :meth:`HttpConnection.write_now`).
    """

    def __init__(
        self,
        source: AsyncIterable[Any] | Callable[..., AsyncIterable[Any]],
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        direct: bool = False,
    ) -> None:
        self.source = source
        self.status = status
        self.headers = headers or {}
        self.direct = direct

    def open(self, outlet: Outlet | None = None) -> AsyncIterator[Any]:
        source = self.source
        if self.direct:
            source = source(outlet)  # type: ignore[operator]
        elif not hasattr(source, "__aiter__") and callable(source):
            source = source()
        return source.__aiter__()  # type: ignore[union-attr]


class Raw:
    """An answer whose JSON the handler encoded itself (from parts it encoded once for
    many answers): sent as it is, ``200`` with ``application/json``."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body


class _Route:
    __slots__ = ("method", "pattern", "segments", "handler")

    def __init__(self, method: str, pattern: str, handler: Handler) -> None:
        self.method = method
        self.pattern = pattern
        self.handler = handler
        # None for a literal segment's param name slot; str for "{name}".
        self.segments: list[tuple[str, bool]] = []
        for seg in _split_path(pattern):
            if seg.startswith("{") and seg.endswith("}") and len(seg) > 2:
                self.segments.append((seg[1:-1], True))
            else:
                self.segments.append((seg, False))

    def match(self, parts: list[str]) -> dict[str, str] | None:
        if len(parts) != len(self.segments):
            return None
        params: dict[str, str] = {}
        for part, (seg, is_param) in zip(parts, self.segments, strict=True):
            if is_param:
                if not part:
                    return None
                params[seg] = unquote(part)
            elif part != seg:
                return None
        return params

    def specificity(self) -> tuple[bool, ...]:
        # Literal segments beat parameters: /v1/threads/search over /v1/threads/{id}.
        return tuple(is_param for _, is_param in self.segments)


def _split_path(path: str) -> list[str]:
    # A trailing slash is tolerated (curl users type it), the root stays "/".
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path.split("/")


class Router:
    """Maps ``(method, path pattern)`` to async handlers.

    Handlers return a dict or list (200 JSON), ``(status, obj)``, a
    ``Stream``, or ``None`` (204), and raise ``ApiError`` for client-visible
    failures.
    """

    def __init__(self) -> None:
        self._routes: list[_Route] = []
        # Routes without parameters, by (method, path): most requests name one,
        # and a literal route always wins over a parameter, so no scan is needed.
        self._literal: dict[tuple[str, str], _Route] = {}

    def route(self, method: str, path: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.add(method, path, handler)
            return handler

        return register

    def add(self, method: str, path: str, handler: Handler) -> None:
        method = method.upper()
        for existing in self._routes:
            if existing.method == method and existing.pattern == path:
                raise ValueError(f"route registered twice: {method} {path}")
        route = _Route(method, path, handler)
        self._routes.append(route)
        if not any(is_param for _, is_param in route.segments):
            self._literal[(method, "/".join(seg for seg, _ in route.segments))] = route

    def wrap(self, wrapper: Callable[[Handler], Handler]) -> None:
        """Replace every handler registered so far by ``wrapper(handler)``
        (error mapping for a whole API in one place)."""
        for route in self._routes:
            route.handler = wrapper(route.handler)

    def resolve(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """Find the handler for a request, or raise the 404/405 ``ApiError``."""
        parts = _split_path(path)
        literal = self._literal.get((method, "/".join(parts)))
        if literal is not None:
            return literal.handler, {}
        best: tuple[_Route, dict[str, str]] | None = None
        allowed: set[str] = set()
        for route in self._routes:
            params = route.match(parts)
            if params is None:
                continue
            if route.method != method:
                allowed.add(route.method)
                continue
            if best is None or route.specificity() < best[0].specificity():
                best = (route, params)
        if best is not None:
            return best[0].handler, best[1]
        if method == "HEAD" and "GET" in allowed:
            # HEAD means GET without the body (curl -I); the body is dropped
            # when the answer is sent.
            return self.resolve("GET", path)
        if allowed:
            allow = ", ".join(sorted(allowed))
            raise ApiError(
                405,
                f"method {method} not allowed for {path} (allowed: {allow})",
                "method_not_allowed",
                headers={"allow": allow},
            )
        raise ApiError(404, f"no such endpoint: {method} {path}", "no_endpoint")


# ---------------------------------------------------------------- connection


def _encode_result(result: Any) -> tuple[int, bytes]:
    """Turn a handler's plain return value into a status and a JSON body."""
    if result is None:
        return 204, b""
    if isinstance(result, Raw):
        return 200, result.body
    if isinstance(result, tuple):
        if len(result) != 2 or not isinstance(result[0], int):
            raise TypeError(f"handler returned a tuple that is not (status, obj): {result!r:.200}")
        status, payload = result
        return status, compact_json(payload).encode()
    return 200, compact_json(result).encode()


class _Connection:
    """Answers one client's requests with the router's handlers (on the h11 core)."""

    def __init__(self, conn: HttpConnection, router: Router, *, connection_id: int,
                 max_depth: int = MAX_DEPTH) -> None:
        self.conn = conn
        self.router = router
        self.max_depth = max_depth
        self.id = connection_id

    async def run(self) -> None:
        await serve_connection(self.conn, self._answer, self._refuse, log)

    async def _refuse(self, status: int, message: str) -> None:
        error = ApiError(status, message, "bad_request")
        await self._send_json(error.status, error.body(), close=True)

    async def _answer(self, incoming: Incoming) -> bool:
        """Run the handler and send its answer; False if the connection must end."""
        if not incoming.complete:
            # The unread body makes the connection unusable: answer, then close.
            error = ApiError(413, f"request body larger than {self.conn.max_body} bytes",
                             "too_large")
            await self._send_json(error.status, error.body(), close=True)
            return False
        req = Request(incoming.method, incoming.target, incoming.headers, incoming.body,
                      connection_id=self.id, max_depth=self.max_depth)
        try:
            handler, req.params = self.router.resolve(req.method, req.path)
            result = await handler(req)
        except ApiError as err:
            await self._send_json(err.status, err.body(), extra=err.headers)
            return True
        except Exception as exc:
            log.exception("local API handler for %s %s failed", req.method, req.path)
            await self._send_internal_error(exc)
            return True

        if isinstance(result, Stream):
            return await self._send_stream(req, result)
        if isinstance(result, Upgrade):  # 101, then raw bytes (awp/localapi/upgrade.py)
            return await result.answer(self.conn)
        try:
            status, body = _encode_result(result)
        except Exception as exc:
            # Not JSON-able, or a malformed (status, obj): a handler bug,
            # reported like any other crash.
            log.exception("local API handler for %s %s returned a bad result", req.method, req.path)
            await self._send_internal_error(exc)
            return True
        await self.conn.respond(status, [("content-type", "application/json")], body)
        return True

    async def _send_internal_error(self, exc: BaseException) -> None:
        message = f"internal error: {type(exc).__name__}: {exc}"
        await self._send_json(500, {"error": message, "code": "internal"})

    async def _send_json(self, status: int, obj: Any, *, extra: dict[str, str] | None = None,
                         close: bool = False) -> None:
        headers = [("content-type", "application/json"), *(extra or {}).items()]
        await self.conn.respond(status, headers, compact_json(obj).encode(), close=close)

    async def _send_stream(self, req: Request, resp: Stream) -> bool:
        headers = {
            "content-type": "application/x-ndjson",
            "transfer-encoding": "chunked",
            "cache-control": "no-store",
        }
        headers.update(resp.headers)
        try:
            # Opened before anything is sent so that an unusable source is a
            # plain 500, and so that the iterator is closed in every case below.
            iterator = resp.open(self.conn)
        except Exception as exc:
            log.exception("local API stream for %s %s could not start", req.method, req.path)
            await self._send_internal_error(exc)
            return True

        completed = False
        try:
            await self.conn.start(resp.status, list(headers.items()))
            if self.conn.head_only:  # headers only; the source is never started
                await self.conn.end()
                return True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.conn.watch_hangup, nursery.cancel_scope)
                completed = await self._pump(req, iterator)
                nursery.cancel_scope.cancel()
        finally:
            await _aclose_iterator(iterator, req)
        return completed

    async def _pump(self, req: Request, iterator: AsyncIterator[Any]) -> bool:
        """Copy objects from the iterator to the socket; True if it ended cleanly."""
        try:
            async for obj in iterator:
                await self.conn.send(obj if isinstance(obj, bytes)
                                     else (compact_json(obj) + "\n").encode())
            await self.conn.end()
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False  # client gone while we were writing
        except Exception:
            # Headers are out, so the status cannot change any more; ending
            # without the final chunk tells the client the stream is broken.
            log.exception("local API stream for %s %s failed", req.method, req.path)
            return False


async def _aclose_iterator(iterator: AsyncIterator[Any], req: Request) -> None:
    """Close a stream's iterator even when our task is being cancelled.

    Shielded (with its own deadline) because the usual reason to get here is
    a cancellation, and the generator's cleanup must still run.
    """
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    with trio.CancelScope(shield=True, deadline=trio.current_time() + _ACLOSE_GRACE):
        try:
            await aclose()
        except Exception:
            log.exception("closing the stream for %s %s failed", req.method, req.path)


# ------------------------------------------------------------------- serving


async def serve_listener(
    listener: trio.abc.Listener[Any],
    router: Router,
    *,
    max_body: int = MAX_BODY,
    idle_timeout: float = IDLE_TIMEOUT,
    max_depth: int = MAX_DEPTH,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API on an already listening listener until cancelled.

    Separate from ``serve_unix`` so tests (and a future TCP debug port) can
    bring their own listener.
    """
    ids = itertools.count(1)

    async def handle(stream: trio.abc.Stream) -> None:
        conn = HttpConnection(stream, idle_timeout=idle_timeout, max_body=max_body)
        await _Connection(conn, router, connection_id=next(ids), max_depth=max_depth).run()

    await trio.serve_listeners(handle, [listener], task_status=task_status)


async def serve_unix(
    path: str,
    router: Router,
    *,
    max_body: int = MAX_BODY,
    idle_timeout: float = IDLE_TIMEOUT,
    max_depth: int = MAX_DEPTH,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Bind ``path`` (mode 0600), announce readiness, serve until cancelled.

    A socket file left behind by a crashed daemon is replaced; one that a
    live process answers on is not (``OSError``), since that is another
    daemon. The socket file is removed on the way out if it is still ours.
    """
    if len(path.encode()) > 107:
        raise OSError(
            errno.ENAMETOOLONG,
            f"socket path is {len(path.encode())} bytes, too long for AF_UNIX (max 107): {path}",
        )
    await _clear_stale_socket(path)
    sock = _bind_private(path)
    try:
        st = os.stat(path)
        identity = (st.st_dev, st.st_ino)
        sock.listen(128)
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    except BaseException:
        sock.close()
        _unlink_quietly(path)
        raise
    try:
        task_status.started(path)
        await serve_listener(listener, router, max_body=max_body, idle_timeout=idle_timeout,
                             max_depth=max_depth)
    finally:
        _unlink_if_ours(path, identity)
        listener.socket.close()


def _bind_private(path: str) -> socket.socket:
    """Create the socket file owner-only from the first instant.

    bind() creates the file with the mode left by the umask, so the umask is
    narrowed around it (no await in between, so no other task runs) and the
    file is chmod-ed to exactly 0600 before listen(): nobody else can ever
    connect. 0o077 rather than 0o177 so a thread creating a directory in that
    instant still gets a usable (0700) one.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o077)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(errno.EADDRINUSE, f"another daemon is serving {path}") from None
        raise
    return sock


async def _clear_stale_socket(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(
            errno.EEXIST, f"{path} exists and is not a socket; refusing to replace it"
        )
    probe = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with trio.move_on_after(2):  # a full backlog: someone is there
            await probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        # Nobody listening: left behind by a daemon that died.
        _unlink_quietly(path)
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"another daemon is serving {path}")


def _unlink_if_ours(path: str, identity: tuple[int, int]) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if (st.st_dev, st.st_ino) == identity:
        _unlink_quietly(path)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
