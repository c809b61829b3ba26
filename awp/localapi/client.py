"""Blocking client for the daemon's local API, built on the stdlib only.

``awp hook`` runs after every tool call an agent makes and has about 30 ms in
total, so this module may import only ``_socket``, ``_json`` (through
``cjson``: the ``json`` package would bring ``re`` and ``enum``), ``os``,
``time``, ``errno`` (and ``hashlib``, lazily, via ``sockpath``): ``http.client``,
``urllib``, httpx and trio each cost more import time than the whole request.
The HTTP it speaks is the small subset the daemon uses: one request at a
time, JSON bodies, responses framed by Content-Length, chunked encoding or
connection close.

Why one module: the hook imports exactly this file after every tool call,
and each module more is a file to find and load inside that 30 ms; the HTTP
framing (``_Conn``) and the calls built on it (``LocalClient``) are only
used together.
"""

from __future__ import annotations

# The C module directly: the hook path starts this client after every tool call of
# an agent, and the socket module's Python layer (selectors, enum) costs ~5 ms.
import _socket as socket
import errno
import time

from awp.base.sockpath import find_socket
from awp.localapi import cjson

# Typing names without importing ``typing`` at run time (import-time budget).
TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc would bring collections, ~3 ms of every command
    from collections.abc import Callable, Iterator

__all__ = [
    "ApiFailure",
    "DaemonForbidden",
    "DaemonNotRunning",
    "LocalClient",
    "NdjsonStream",
    "ProtocolError",
    "encode_query",
    "quote",
]

#: Marks "use the client's default timeout" (None already means "no timeout").
_DEFAULT: object = object()

_RECV_SIZE = 64 * 1024
_MAX_HEAD = 64 * 1024  # status line plus headers
_MAX_LINE = 8 * 1024  # one header or chunk-size line

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = frozenset(b"/:@!$&'()*+,;=%")
_QUOTED = [chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in range(256)]
_QUOTED_PATH = [chr(b) if b in _UNRESERVED or b in _PATH_SAFE else f"%{b:02X}" for b in range(256)]

_NO_BODY_METHODS = ("GET", "HEAD", "DELETE", "OPTIONS")


class DaemonNotRunning(Exception):
    """No daemon answers on the socket (it does not exist, or refuses)."""

    def __init__(self, sock_path: str, reason: str) -> None:
        super().__init__(f"the awp daemon is not running ({reason}: {sock_path})")
        self.sock_path = sock_path
        self.reason = reason


class DaemonForbidden(Exception):
    """The socket (or the home holding it) is not ours to open: another user's daemon.

    Kept apart from ``DaemonNotRunning`` on purpose: a daemon may well be
    running, and starting a second one for that home would be wrong.
    """

    def __init__(self, path: str) -> None:
        import os  # already loaded by the interpreter; kept off the module's import list

        owner = ""
        try:
            owner = f" (uid {os.stat(path).st_uid})"
        except OSError:
            pass
        super().__init__(
            f"permission denied on {path}: the daemon belongs to another user{owner}")
        self.path = path


class ApiFailure(Exception):
    """The daemon answered with a non-2xx status.

    ``str(exc)`` is the daemon's message, fit to print after ``awp <cmd>:``;
    ``code`` is its stable machine-readable word, if any.
    """

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class ProtocolError(ConnectionError):
    """The daemon sent something that is not the HTTP/JSON we expect."""


class _NoResponse(ConnectionError):
    """EOF before the first byte of a response (lets a reused GET retry)."""


def quote(text: object, *, path: bool = False) -> str:
    """Percent-encode ``text`` as UTF-8, keeping only RFC 3986 unreserved bytes.

    With ``path`` the path delimiters (``/``, ``%`` and friends) pass as well,
    which is how the request path given to ``request`` is treated.
    """
    table = _QUOTED_PATH if path else _QUOTED
    return "".join([table[b] for b in str(text).encode("utf-8")])


def encode_query(query: dict[str, object]) -> str:
    """Build a query string; lists repeat the key, ``None`` values are left out."""
    out = []
    for key, value in query.items():
        values = value if isinstance(value, list | tuple) else (value,)
        for item in values:
            if item is None:
                continue
            if item is True or item is False:
                item = "true" if item else "false"
            out.append(f"{quote(key)}={quote(item)}")
    return "&".join(out)


def _set_deadline(sock: socket.socket, deadline: float | None) -> None:
    if deadline is None:
        sock.settimeout(None)
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("timed out")
    sock.settimeout(remaining)


class _Conn:
    """A connected socket plus the bytes read from it but not yet consumed."""

    __slots__ = ("sock", "buf", "got_bytes", "silence_limit")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.got_bytes = False  # anything at all received for this request
        # Used when a read has no deadline: the longest wait for more bytes.
        self.silence_limit: float | None = None

    def close(self) -> None:
        self.sock.close()

    def alive(self) -> bool:
        """True if an idle kept-alive connection can take another request.

        A non-blocking peek: EOF means the daemon closed it (idle timeout,
        restart), and unexpected bytes mean it is out of step.
        """
        try:
            self.sock.settimeout(0.0)
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # nothing to read: still open and quiet, as it should be
        except OSError:
            pass
        return False

    def send(self, data: bytes, deadline: float | None) -> None:
        _set_deadline(self.sock, deadline)
        self.sock.sendall(data)

    def _fill(self, deadline: float | None) -> bool:
        if deadline is None and self.silence_limit is not None:
            deadline = time.monotonic() + self.silence_limit
        _set_deadline(self.sock, deadline)
        data = self.sock.recv(_RECV_SIZE)
        if not data:
            return False
        self.got_bytes = True
        self.buf += data
        return True

    def _eof(self) -> ConnectionError:
        if not self.got_bytes:
            return _NoResponse("the awp daemon closed the connection without answering")
        return ConnectionError("the awp daemon closed the connection mid-response")

    def read_line(self, deadline: float | None) -> bytes:
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0:
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return line
            if len(self.buf) > _MAX_LINE:
                raise ProtocolError("the awp daemon sent an overlong header line")
            start = len(self.buf)
            if not self._fill(deadline):
                raise self._eof()

    def read_exact(self, n: int, deadline: float | None) -> bytes:
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise self._eof()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_upto(self, n: int, deadline: float | None) -> bytes:
        """At least one and at most ``n`` bytes: whatever has arrived."""
        if not self.buf and not self._fill(deadline):
            raise self._eof()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_to_eof(self, deadline: float | None) -> bytes:
        while self._fill(deadline):
            pass
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def read_head(self, deadline: float | None) -> tuple[int, dict[str, str], bool]:
        """Read a status line and headers, skipping 1xx interim responses.

        Returns the status, the headers (lower-cased names, repeats joined)
        and whether the server speaks HTTP/1.1 (1.0 means no keep-alive).
        """
        while True:
            total = 0
            line = self.read_line(deadline)
            total += len(line)
            parts = line.decode("latin-1").split(None, 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"the awp daemon sent a bad status line: {line[:80]!r}")
            http11 = parts[0] != "HTTP/1.0"
            status = int(parts[1])
            headers: dict[str, str] = {}
            while True:
                line = self.read_line(deadline)
                total += len(line)
                if total > _MAX_HEAD:
                    raise ProtocolError("the awp daemon sent oversized response headers")
                text = line.decode("latin-1").strip()
                if not text:
                    break
                name, sep, value = text.partition(":")
                if not sep:
                    raise ProtocolError(f"the awp daemon sent a bad header line: {text[:80]!r}")
                key = name.strip().lower()
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
            if 100 <= status < 200 and status != 101:
                continue  # e.g. "100 Continue": the real answer follows
            return status, headers, http11

    def iter_body(
        self, method: str, status: int, headers: dict[str, str], deadline: float | None
    ) -> Iterator[bytes]:
        """Yield the response body piece by piece as it arrives.

        Returning (rather than exhausting) means the body ended cleanly; the
        framing used decides whether the connection can be reused, which
        ``body_keeps_connection`` reports.
        """
        if method == "HEAD" or status in (204, 304):
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = self.read_line(deadline).split(b";", 1)[0].strip()
                try:
                    size = int(size_line, 16)
                except ValueError:
                    raise ProtocolError(
                        f"the awp daemon sent a bad chunk size: {size_line[:40]!r}"
                    ) from None
                if size == 0:
                    while self.read_line(deadline).strip():
                        pass  # trailers: none are used, skip them
                    return
                while size:
                    piece = self.read_upto(size, deadline)
                    size -= len(piece)
                    yield piece
                if self.read_line(deadline).strip():
                    raise ProtocolError("the awp daemon sent a chunk without its CRLF")
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise ProtocolError("the awp daemon sent a bad Content-Length") from None
            while length:
                piece = self.read_upto(length, deadline)
                length -= len(piece)
                yield piece
        else:
            data = self.read_to_eof(deadline)
            if data:
                yield data


def _keeps_connection(method: str, status: int, headers: dict[str, str], http11: bool) -> bool:
    if not http11 or "close" in headers.get("connection", "").lower():
        return False
    if method == "HEAD" or status in (204, 304):
        return True
    return "chunked" in headers.get("transfer-encoding", "").lower() or (
        "content-length" in headers
    )


def _failure(status: int, data: bytes) -> ApiFailure:
    message, code = f"HTTP {status}", None
    try:
        obj = cjson.loads(data) if data else None
    except ValueError:
        obj = None
        text = data.decode("utf-8", "replace").strip()
        if text:
            message = f"HTTP {status}: {text[:500]}"
    if isinstance(obj, dict):
        message = str(obj.get("error") or message)
        code = obj.get("code")
    return ApiFailure(status, message, code)


class LocalClient:
    """Talks to one daemon over its Unix socket.

    Sequential requests reuse one kept-alive connection (saving a connect
    per call, which matters to commands that make several). A client object
    is not meant to be shared between threads.
    """

    def __init__(self, sock_path: str, timeout: float | None = 30.0) -> None:
        self.sock_path = sock_path
        self.timeout = timeout
        self._idle: _Conn | None = None

    @classmethod
    def for_home(cls, home: str, timeout: float | None = 30.0) -> LocalClient:
        """A client for the daemon of ``home`` (honours ``awp.sock.path``).

        Raises ``DaemonForbidden`` when the home is another user's.
        """
        try:
            return cls(find_socket(home), timeout)
        except PermissionError as exc:
            raise DaemonForbidden(exc.filename or home) from None

    def open(self, timeout: float | None = 5.0) -> None:
        """Connect now, keeping the connection for the next request.

        Proves that something listens on the socket (``DaemonNotRunning``
        otherwise) for the price of a connect rather than a request.
        """
        if self._idle is None:
            self._idle = self._connect(self._deadline(timeout))

    def close(self) -> None:
        """Drop the kept-alive connection, if any."""
        if self._idle is not None:
            self._idle.close()
            self._idle = None

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public calls

    def get(self, path: str, **query: object) -> object:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: object | None = None) -> object:
        return self.request("POST", path, body)

    def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        query: dict[str, object] | None = None,
        timeout: float | None | object = _DEFAULT,
    ) -> object:
        """Send one request and return the parsed JSON answer (None if empty).

        ``body`` is encoded as JSON, except ``bytes`` which are sent as they
        are (already encoded JSON). Raises ``DaemonNotRunning``,
        ``ApiFailure`` for non-2xx answers, ``TimeoutError`` and
        ``ConnectionError``.
        """
        method = method.upper()
        deadline = self._deadline(timeout)
        data = self._build(method, path, body, query)
        conn = self._take_idle()
        reused = conn is not None
        if conn is None:
            conn = self._connect(deadline)
        try:
            try:
                status, headers, chunks, keep = self._exchange(conn, method, data, deadline)
                payload = b"".join(chunks)
            except _NoResponse:
                if not (reused and method in ("GET", "HEAD")):
                    raise
                # The kept-alive connection died under us before any answer;
                # only requests without side effects are safe to send again.
                conn.close()
                conn = self._connect(deadline)
                status, headers, chunks, keep = self._exchange(conn, method, data, deadline)
                payload = b"".join(chunks)
        except TimeoutError:
            conn.close()
            raise TimeoutError(
                f"the awp daemon did not answer {method} {path} within {self._timeout_of(timeout)}s"
            ) from None
        except BaseException:
            conn.close()
            raise
        if keep:
            self.close()
            self._idle = conn
        else:
            conn.close()
        if not 200 <= status < 300:
            raise _failure(status, payload)
        if not payload.strip():
            return None
        try:
            return cjson.loads(payload)
        except ValueError as exc:
            raise ProtocolError(f"the awp daemon sent a body that is not JSON: {exc}") from None

    def stream(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        query: dict[str, object] | None = None,
        timeout: float | None | object = _DEFAULT,
        read_timeout: float | None = None,
    ) -> NdjsonStream:
        """Start a streaming request and return an iterator of its NDJSON objects.

        Connecting and the response head are bounded by ``timeout``, so
        ``DaemonNotRunning`` and ``ApiFailure`` are raised here, not on the
        first ``next()``. Waiting for each further object is bounded by
        ``read_timeout`` (default: wait as long as it takes, as ``tail``
        wants). A stream gets its own connection, closed with the iterator.
        """
        method = method.upper()
        conn, status, headers = self._open_body(method, path, body, query, timeout)
        return NdjsonStream(conn, method, status, headers, read_timeout)

    def download(
        self,
        path: str,
        body: object | None = None,
        *,
        timeout: float | None | object = _DEFAULT,
        read_timeout: float | None = None,
    ) -> tuple[dict[str, str], Iterator[bytes]]:
        """POST and return the response's headers and its body as raw pieces.

        As :meth:`stream`, errors before the body are raised here; the
        iterator raises ``ConnectionError`` when the body is cut short, so a
        caller can tell a whole answer from a partial one.
        """
        conn, status, headers = self._open_body("POST", path, body, None, timeout)

        def pieces() -> Iterator[bytes]:
            conn.silence_limit = read_timeout
            try:
                yield from conn.iter_body("POST", status, headers, None)
            finally:
                conn.close()

        return headers, pieces()

    # -- internals

    def _open_body(self, method: str, path: str, body: object | None,
                   query: dict[str, object] | None,
                   timeout: object) -> tuple[_Conn, int, dict[str, str]]:
        """Send a request on a connection of its own and read the head of a 2xx
        answer (its body left to read); an error answer or a timeout is raised."""
        deadline = self._deadline(timeout)
        data = self._build(method, path, body, query)
        conn = self._connect(deadline)
        try:
            status, headers, chunks, _ = self._exchange(conn, method, data, deadline)
            if not 200 <= status < 300:
                raise _failure(status, b"".join(chunks))
        except TimeoutError:
            conn.close()
            raise TimeoutError(
                f"the awp daemon did not answer {method} {path} within {self._timeout_of(timeout)}s"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn, status, headers

    def _timeout_of(self, timeout: object) -> float | None:
        return self.timeout if timeout is _DEFAULT else timeout  # type: ignore[return-value]

    def _deadline(self, timeout: object) -> float | None:
        t = self._timeout_of(timeout)
        return None if t is None else time.monotonic() + t

    def _take_idle(self) -> _Conn | None:
        conn, self._idle = self._idle, None
        if conn is not None and not conn.alive():
            conn.close()
            return None
        return conn

    def _connect(self, deadline: float | None) -> _Conn:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            while True:
                _set_deadline(sock, deadline)
                try:
                    sock.connect(self.sock_path)
                    break
                except BlockingIOError:
                    # AF_UNIX answers EAGAIN when the listen backlog is full:
                    # the daemon is busy, not gone; try again shortly.
                    time.sleep(0.005)
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise DaemonNotRunning(self.sock_path, "no socket at") from None
            if exc.errno == errno.ECONNREFUSED:
                raise DaemonNotRunning(self.sock_path, "nothing listening on") from None
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise DaemonForbidden(self.sock_path) from None
            if isinstance(exc, TimeoutError):
                raise TimeoutError(
                    f"timed out connecting to the awp daemon at {self.sock_path}"
                ) from None
            raise
        return _Conn(sock)

    @staticmethod
    def _build(
        method: str, path: str, body: object | None, query: dict[str, object] | None
    ) -> bytes:
        if not method.isalpha():
            raise ValueError(f"bad HTTP method: {method!r}")
        # A query written into the path ("/v1/x?a=1") is kept as given (only
        # characters that may not appear raw are escaped); ``query`` adds to it.
        path, _, inline_query = path.partition("?")
        target = quote(path, path=True)
        if not target.startswith("/"):
            target = "/" + target
        params = [quote(inline_query, path=True)] if inline_query else []
        if query:
            encoded = encode_query(query)
            if encoded:
                params.append(encoded)
        if params:
            target += "?" + "&".join(params)
        if body is None:
            payload = None
        elif isinstance(body, bytes | bytearray | memoryview):
            payload = bytes(body)
        else:
            payload = cjson.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        lines = [f"{method} {target} HTTP/1.1", "Host: awp", "Accept: application/json"]
        if payload is not None:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(payload)}")
        elif method not in _NO_BODY_METHODS:
            lines.append("Content-Length: 0")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        return head + payload if payload else head

    @staticmethod
    def _exchange(
        conn: _Conn, method: str, data: bytes, deadline: float | None
    ) -> tuple[int, dict[str, str], Iterator[bytes], bool]:
        """Send the request, read the head; the body is left to the caller."""
        conn.got_bytes = False
        sent = True
        try:
            conn.send(data, deadline)
        except (BrokenPipeError, ConnectionResetError):
            # The daemon may have refused early (413) and closed; its answer
            # can still be waiting in our receive buffer.
            sent = False
        try:
            status, headers, http11 = conn.read_head(deadline)
        except ConnectionError:
            if not sent:
                raise ConnectionError(
                    "the awp daemon closed the connection while the request was being sent"
                ) from None
            raise
        keep = sent and _keeps_connection(method, status, headers, http11)
        return status, headers, conn.iter_body(method, status, headers, deadline), keep


class NdjsonStream:
    """Iterator over the objects of a streaming (NDJSON) response.

    Objects are yielded as soon as their line is complete. Iteration ends
    when the daemon ends the response; ``ConnectionError`` if it breaks off
    instead. ``close()`` (or leaving a ``with`` block) hangs up, which makes
    the daemon stop producing.
    """

    def __init__(
        self,
        conn: _Conn,
        method: str,
        status: int,
        headers: dict[str, str],
        read_timeout: float | None,
    ) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn
        self._read_timeout = read_timeout
        self._objects = self._generate(method)

    def _generate(self, method: str) -> Iterator[object]:
        conn = self._conn
        # No overall deadline for a stream; each wait for data is bounded by
        # read_timeout instead (the longest silence tolerated).
        conn.silence_limit = self._read_timeout
        pending = bytearray()
        try:
            for piece in conn.iter_body(method, self.status, self.headers, None):
                pending += piece
                start = 0
                while True:
                    end = pending.find(b"\n", start)
                    if end < 0:
                        break
                    line = bytes(pending[start:end])
                    start = end + 1
                    if line.strip():
                        yield self._decode(line)
                del pending[:start]
            if pending.strip():
                yield self._decode(bytes(pending))
        finally:
            conn.close()

    @staticmethod
    def _decode(line: bytes) -> object:
        try:
            return cjson.loads(line)
        except ValueError as exc:
            raise ProtocolError(
                f"the awp daemon sent a stream line that is not JSON: {exc}"
            ) from None

    def __iter__(self) -> NdjsonStream:
        return self

    def __next__(self) -> object:
        try:
            return next(self._objects)
        except TimeoutError:
            self.close()
            raise TimeoutError(
                f"no stream data from the awp daemon within {self._read_timeout}s"
            ) from None

    def close(self) -> None:
        """Hang up; safe to call more than once."""
        self._objects.close()
        self._conn.close()

    def __enter__(self) -> NdjsonStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._conn.close()
        except Exception:
            pass


def wait_for_address(client: LocalClient, timeout: float,
                     stop: Callable[[], bool] = lambda: False) -> dict:
    """Poll ``/v1/status`` until the daemon has an address to share (or says why not).

    Tailcat takes a few seconds to come up, so its address or its error ends
    the wait; without tailcat news, the other listeners' results count as
    final after a 2 s grace.  Returns the last status seen.
    """
    started = time.monotonic()
    while True:
        st = client.get("/v1/status")
        assert isinstance(st, dict)
        if st.get("address") or st.get("tailcat_error"):
            return st
        waited = time.monotonic() - started
        if (st.get("listen_errors") or st.get("addresses")) and waited > 2:
            return st
        if waited >= timeout or stop():
            return st
        time.sleep(0.25)
