"""An async (trio) client for the daemon's local API, for ``awp web``.

The CLI's client (:mod:`awp.localapi.client`) is blocking; the web process
runs on trio, so this one speaks the same small HTTP subset with h11 over
the Unix socket: a GET with a JSON answer, or a GET whose answer is an NDJSON
stream. One connection per call: the socket is local and cheap to open.

It never starts a daemon: when none answers, calls raise ``DaemonDown``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import h11
import trio

from ..base.sockpath import find_socket
from ..localapi.client import DaemonForbidden, encode_query

_RECV = 64 * 1024
#: Largest JSON answer accepted (a snapshot of a big network is a few MiB).
MAX_ANSWER = 64 * 1024 * 1024
#: Longest NDJSON line accepted from a stream.
MAX_STREAM_LINE = 1024 * 1024


class DaemonDown(Exception):
    """No daemon answers on this home's socket."""


class DaemonError(Exception):
    """The daemon answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class DaemonLink:
    """Reads one home's daemon through its local API."""

    def __init__(self, home: str, *, timeout: float = 20.0) -> None:
        self.home = home
        self.timeout = timeout

    async def _open(self) -> trio.SocketStream:
        try:
            path = find_socket(self.home)
        except PermissionError as e:
            raise DaemonDown(str(DaemonForbidden(e.filename or self.home))) from None
        except OSError as e:
            raise DaemonDown(f"no daemon socket: {e}") from None
        try:
            return await trio.open_unix_socket(path)
        except PermissionError:
            raise DaemonDown(str(DaemonForbidden(path))) from None
        except FileNotFoundError:
            raise DaemonDown(f"the awp daemon is not running (no socket at {path})") from None
        except OSError as e:
            raise DaemonDown(f"the awp daemon is not running ({e.strerror or e}: {path})") \
                from None

    @staticmethod
    def _target(path: str, query: dict[str, Any] | None) -> bytes:
        qs = encode_query(query) if query else ""
        return (path + ("?" + qs if qs else "")).encode()

    async def _start(self, stream: trio.SocketStream, conn: h11.Connection, path: str,
                     query: dict[str, Any] | None) -> h11.Response:
        req = h11.Request(method="GET", target=self._target(path, query),
                          headers=[("host", "awp"), ("accept", "application/json")])
        await stream.send_all(conn.send(req) + conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(_RECV)
                if not data:
                    raise DaemonDown("the daemon closed the connection")
                conn.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                return event
            raise DaemonDown(f"unexpected answer from the daemon: {event!r}")

    async def get(self, path: str, query: dict[str, Any] | None = None) -> Any:
        """GET ``path`` and return its JSON; ``DaemonError`` for a non-2xx status."""
        try:
            with trio.fail_after(self.timeout):
                stream = await self._open()
                async with stream:
                    conn = h11.Connection(h11.CLIENT)
                    resp = await self._start(stream, conn, path, query)
                    body = bytearray()
                    while True:
                        event = conn.next_event()
                        if event is h11.NEED_DATA:
                            data = await stream.receive_some(_RECV)
                            if not data:
                                conn.receive_data(b"")
                            else:
                                conn.receive_data(data)
                            continue
                        if isinstance(event, h11.Data):
                            body += event.data
                            if len(body) > MAX_ANSWER:
                                raise DaemonDown("the daemon's answer is too large")
                            continue
                        if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                            break
        except trio.TooSlowError:
            raise DaemonDown(f"the daemon did not answer {path} in {self.timeout:g}s") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError,
                ConnectionError) as e:
            raise DaemonDown(f"lost the daemon: {e or type(e).__name__}") from None
        try:
            obj = json.loads(bytes(body)) if body else None
        except ValueError:
            raise DaemonDown(f"the daemon's answer to {path} is not JSON") from None
        if not 200 <= resp.status_code < 300:
            msg = obj.get("error") if isinstance(obj, dict) else None
            raise DaemonError(resp.status_code, msg or f"HTTP {resp.status_code}")
        return obj

    async def stream(self, path: str, query: dict[str, Any] | None = None
                     ) -> AsyncIterator[Any]:
        """GET an NDJSON stream; yields each object until the daemon ends it.

        Ends by raising ``DaemonDown`` when the connection goes away.
        """
        try:
            with trio.fail_after(self.timeout):
                stream = await self._open()
                conn = h11.Connection(h11.CLIENT)
                resp = await self._start(stream, conn, path, query)
        except trio.TooSlowError:
            raise DaemonDown(f"the daemon did not answer {path}") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError,
                ConnectionError) as e:
            raise DaemonDown(f"lost the daemon: {e or type(e).__name__}") from None
        async with stream:
            if not 200 <= resp.status_code < 300:
                raise DaemonError(resp.status_code, f"HTTP {resp.status_code} for {path}")
            buf = bytearray()
            try:
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(_RECV)
                        conn.receive_data(data if data else b"")
                        continue
                    if isinstance(event, h11.Data):
                        buf += event.data
                        while True:
                            nl = buf.find(b"\n")
                            if nl < 0:
                                break
                            line = bytes(buf[:nl])
                            del buf[: nl + 1]
                            if line.strip():
                                try:
                                    yield json.loads(line)
                                except ValueError:
                                    continue
                        if len(buf) > MAX_STREAM_LINE:
                            raise DaemonDown("a line of the daemon's stream is too long")
                        continue
                    break  # EndOfMessage or ConnectionClosed
            except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError,
                    ConnectionError) as e:
                raise DaemonDown(f"lost the daemon: {e or type(e).__name__}") from None
        raise DaemonDown("the daemon ended the stream")
