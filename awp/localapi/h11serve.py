"""The one HTTP/1.1 server core both of awp's HTTP servers run on.

The local API (:mod:`awp.localapi.server`: JSON on ``awp.sock``) and the
dashboard (:mod:`awp.web.server`: a page, JSON and server-sent events on
TCP) are small, fixed APIs, so neither uses a web framework: each is h11 (a
sans-I/O HTTP parser) driven by trio.  What any HTTP server must get right,
whatever it serves, lives here once:

* a request is read within an idle deadline, its head within a size bound
  (h11's ``max_incomplete_event_size``) and its body within ``max_body``; a
  body declared or found larger is not read on, and the request comes back
  marked incomplete so the caller answers it and the connection closes;
* keep-alive: request after request on one connection while both sides
  finished cleanly;
* a plain response goes out in one write (head, body, end), with
  ``content-length`` and without the body for ``HEAD``;
* a streamed response (NDJSON, server-sent events, a file) is written piece
  by piece, while :meth:`HttpConnection.watch_hangup` ends it as soon as
  the client closes its end;
* every write may carry a deadline, so a client that stops reading holds up
  only its own connection;
* a malformed request gets the caller's error answer (h11's status hint)
  and the connection closes; a bug in a caller's handler is logged and the
  connection closed, never the server.

What to answer, and how errors look, stays with each server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Protocol

import h11
import trio

from ..base.sockio import read_now, write_some

_RECV_SIZE = 64 * 1024

#: Pipelined bytes buffered while a streamed response runs before reading stops.
MAX_PIPELINED = 64 * 1024


class Incoming:
    """One request as read off the wire: method, target, headers and body.

    ``complete`` is False when the body was larger than allowed (declared or
    sent): the rest is left unread, so the answer must close the connection.
    """

    __slots__ = ("method", "target", "headers", "body", "complete")

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 complete: bool) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.complete = complete


class Outlet(Protocol):
    """A streamed response's pieces written by others than its source (a direct
    ``Stream`` of the local API): whole pieces, at once or not at all, while the
    source waits (:meth:`HttpConnection.write_now`).

    ``write_now(piece)`` is False, with nothing written, when the piece must be
    yielded by the source instead; ``unsent`` is true while bytes it wrote in
    part wait for the source's next yield (``b""`` will do) to go out.
    """

    def write_now(self, data: bytes) -> bool: ...

    @property
    def unsent(self) -> bool: ...


class _Drop(Exception):
    """The connection is over (idle timeout, client gone): close it quietly."""


Headers = list[tuple[str, str]]


def reason(status: int) -> bytes:
    """The reason phrase of a status code (empty for codes HTTP does not name)."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class HttpConnection:
    """One server-side connection: h11's state machine over a trio stream."""

    def __init__(self, stream: trio.abc.Stream, *, idle_timeout: float, max_body: int,
                 write_timeout: float | None = None, max_head: int = 16 * 1024) -> None:
        self.stream = stream
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.max_body = max_body
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self.head_only = False  # answering a HEAD request: no body goes out
        self._chunked: bool | None = None  # a streamed response's pieces are chunks
        self._writing = False  # a write is under way (awaiting the socket)
        self._rest = b""  # what write_now wrote only in part: it goes before anything else
        # The first request of a connection (a CLI call, a hook: one request each) is
        # read without a deadline's cancel scope and a wait when its bytes are there.
        # Only the first: every later request is read the way that yields to the event
        # loop, so a client that pipelines requests cannot keep the loop to itself.
        self._fresh = True

    # -- reading ----------------------------------------------------------------------

    async def _next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self._fresh:
                data = self._read_now()
                if data is not None:
                    self.h11.receive_data(data)
                    continue
            with trio.move_on_after(self.idle_timeout):
                self.h11.receive_data(await self.stream.receive_some(_RECV_SIZE))
                continue
            raise _Drop()

    async def receive(self) -> Incoming | None:
        """The next request, or None once the client closed between requests.

        Raises ``h11.RemoteProtocolError`` for a malformed request.
        """
        if not self._fresh and self.h11.trailing_data[0]:
            # Pipelined: read with the last one, and answers need not wait, so no
            # read would yield: let the other tasks run first.
            await trio.lowlevel.checkpoint()
        event = await self._next_event()
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):  # pragma: no cover - h11 guarantees it
            raise _Drop()
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("latin-1")  # h11 lower-cases names already
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        method = event.method.decode("ascii", "replace").upper()
        target = event.target.decode("utf-8", "replace")
        self.head_only = method == "HEAD"
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            # Refused before reading (and without "100 Continue").
            return Incoming(method, target, headers, b"", False)
        if self.h11.they_are_waiting_for_100_continue:
            # curl sends "Expect: 100-continue" for larger bodies and would
            # otherwise pause a second before sending them.
            await self._write(self.h11.send(h11.InformationalResponse(status_code=100,
                                                                      headers=[])))
        body = bytearray()
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    return Incoming(method, target, headers, b"", False)
            elif isinstance(event, h11.EndOfMessage):
                return Incoming(method, target, headers, bytes(body), True)
            else:  # ConnectionClosed mid-body; h11 normally raises instead
                raise _Drop()

    def _read_now(self) -> bytes | None:
        """What the socket holds now (``b""`` at its end), or None: nothing yet, an
        error (the awaited read says which), or not a socket."""
        if type(self.stream) is not trio.SocketStream:
            return None
        return read_now(self.stream.socket.fileno(), _RECV_SIZE)

    def next_cycle(self) -> bool:
        """After an answer: ready for the next request on this connection, or False."""
        self._fresh = False
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            return False
        self.h11.start_next_cycle()
        return True

    def may_answer(self) -> bool:
        """Whether a response can still be started (none is under way)."""
        return self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    # -- writing ----------------------------------------------------------------------

    async def _write(self, data: bytes) -> None:
        if self._rest:
            data, self._rest = self._rest + data, b""
        # What the socket takes now goes without send_all's trips through the event
        # loop (most answers, a few KiB, go whole); the rest waits for the socket.
        data = data[self._write_some(data):]
        if not data:
            return
        self._writing = True
        try:
            if self.write_timeout is None:
                await self.stream.send_all(data)
                return
            with trio.fail_after(self.write_timeout):  # TooSlowError ends the connection
                await self.stream.send_all(data)
        finally:
            self._writing = False

    def _head(self, status: int, headers: Headers) -> bytes:
        return self.h11.send(h11.Response(
            status_code=status, reason=reason(status),
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]))

    async def respond(self, status: int, headers: Headers, body: bytes = b"", *,
                      close: bool = False) -> None:
        """A whole response in one write: fewer system calls on a hook's latency path."""
        headers = list(headers)
        if status != 204:
            headers.append(("content-length", str(len(body))))
        if close:
            headers.append(("connection", "close"))
        parts = [self._head(status, headers)]
        if body and status != 204 and not self.head_only:
            parts.append(self.h11.send(h11.Data(data=body)))
        parts.append(self.h11.send(h11.EndOfMessage()))
        await self._write(b"".join(p for p in parts if p))

    async def start(self, status: int, headers: Headers) -> None:
        """Send a streamed response's head; follow with :meth:`send` and :meth:`end`."""
        self._chunked = None
        await self._write(self._head(status, headers))

    async def send(self, data: bytes) -> None:
        """One piece of a streamed response.

        Chunked framing (what HTTP/1.1 clients get) is the same for every
        piece and changes nothing in h11's state, so once h11 has framed the
        first piece that way the rest are framed here: a stream that follows
        the board sends a piece per post, on every host.
        """
        if not data:
            await self._write(b"")  # what write_now left, if anything
            return
        own = b"%x\r\n%b\r\n" % (len(data), data)
        if self._chunked:
            await self._write(own)
            return
        framed = self.h11.send(h11.Data(data=data))
        self._chunked = framed == own
        await self._write(framed)

    @property
    def unsent(self) -> bool:
        """Bytes :meth:`write_now` left for the next :meth:`send` to finish."""
        return bool(self._rest)

    def write_now(self, data: bytes) -> bool:
        """One piece of a streamed response written to the socket at once, from any task,
        without a trip through the event loop; False, with nothing written, when it must
        go by :meth:`send` (no piece framed yet, a write under way or unfinished, the
        socket full or gone, not a socket).

        What the socket does not take is kept for the next :meth:`send` (or
        :meth:`end`), which writes it before anything else.  A follower of
        the board is sent each post this way by the code that stored it: the
        stream's task is not woken for it, and ``send_all``'s checkpoints
        are not paid.
        """
        if not self._chunked or self._writing or self._rest or not data:
            return False
        own = b"%x\r\n%b\r\n" % (len(data), data)
        n = self._write_some(own)
        if n <= 0:
            return False
        self._rest = own[n:]
        return True

    def _write_some(self, data: bytes) -> int:
        """Write what the socket takes of ``data`` now: how many bytes (0 when it is
        full or broken, which send_all then says, or when the stream is no socket)."""
        if not data or type(self.stream) is not trio.SocketStream:
            return 0
        return write_some(self.stream.socket.fileno(), data)

    async def end(self) -> None:
        await self._write(self.h11.send(h11.EndOfMessage()))

    async def watch_hangup(self, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` (a running stream) as soon as the client closes its end.

        Clients send nothing while reading a stream, so the only thing to
        wait for is EOF.  Bytes that do arrive (a pipelined next request) are
        handed to h11 for later, up to ``MAX_PIPELINED``; then reading stops.
        """
        buffered = 0
        try:
            while True:
                data = await self.stream.receive_some(_RECV_SIZE)
                if not data:
                    break
                self.h11.receive_data(data)
                buffered += len(data)
                if buffered > MAX_PIPELINED:
                    await trio.sleep_forever()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    async def aclose(self) -> None:
        if type(self.stream) is trio.SocketStream:  # closing a socket never waits
            await self.stream.aclose()
            return
        with trio.move_on_after(1):
            await self.stream.aclose()


async def serve_connection(
    conn: HttpConnection,
    answer: Callable[[Incoming], Awaitable[bool]],
    refuse: Callable[[int, str], Awaitable[None]],
    log: logging.Logger,
) -> None:
    """Answer requests on ``conn`` until one side is done, then close it.

    ``answer`` sends the response to one request and says whether the
    connection may take another; ``refuse(status, message)`` sends the
    error answer (with ``close``) to a request h11 could not parse.
    """
    try:
        while True:
            try:
                req = await conn.receive()
            except h11.RemoteProtocolError as exc:
                if conn.may_answer():
                    try:
                        await refuse(exc.error_status_hint, f"bad HTTP request: {exc}")
                    except h11.LocalProtocolError:
                        pass  # h11 will not let us answer in this state; just close
                return
            if req is None or not await answer(req) or not conn.next_cycle():
                return
    except (_Drop, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass  # the client went away, idled out or stopped reading
    except Exception:
        # A bug in the plumbing or a handler; never let it take the server down.
        log.exception("HTTP connection failed")
    finally:
        await conn.aclose()
