"""One WebSocket connection as a trio byte stream, so the engine runs over it unchanged.

The engine reads NDJSON from a ``HalfCloseableStream``; it never sees frames.
Lines are independent of frame boundaries: a write becomes one or more binary
messages (:attr:`WsLimits.send_chunk` bytes at most each), and every received
data frame, binary or text, is appended to one byte buffer the line reader
drains.  A Close frame is the stream's end: receiving one is EOF, sending one
is ``send_eof`` (RFC 6455 lets the closing side keep reading until the
peer's Close, which is exactly a half-close).

The framing itself is wsproto's (sans-I/O, like h11 beside it); this module
only moves bytes and enforces the bounds: a data frame or a message over its
limit ends the connection with close code 1009 before more of it is kept.
No extension is offered or accepted, so there is no permessage-deflate and no
compression bomb.
"""

from __future__ import annotations

import trio
from wsproto import WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason

from ..base.sockio import Encoded, write_some
from ..base.sockread import receive_some as read_socket
from .wsconfig import WsLimits

__all__ = ["WebSocketStream"]

_READ = 64 * 1024
_CLOSE_WAIT = 1.0  # seconds aclose() spends telling the peer before it drops the socket


class WebSocketStream(trio.abc.HalfCloseableStream):
    """A ``HalfCloseableStream`` over an upgraded connection (``ws`` is open).

    ``transport_stream`` is the stream underneath (TCP, or TLS over TCP), as
    trio's ``SSLStream`` names it, so callers that ask what carries a link
    (is it loopback? :func:`awp.node.sealed.is_local_stream`) see through.
    """

    def __init__(self, transport: trio.abc.Stream, ws: WSConnection | Connection, limits: WsLimits, *,
                 desc: str = "ws") -> None:
        self.transport_stream = transport
        self.peer_description = desc
        self._ws = ws
        self._limits = limits
        self._buf = bytearray()
        self._eof = False
        self._sent_close = False
        self._frame = 0
        self._message = 0
        self._wlock = trio.Lock()  # pongs and closes from the reader share the socket
        # Bytes of a frame write_now began and the caller still owes (an Encoded
        # rest): until they are written nothing else may go, or a pong would
        # land in the middle of that frame.
        self._owed = 0
        self._paid = trio.Event()
        self._paid.set()
        self.close_code: int | None = None  # the peer's close code, once it sent one
        self.close_reason = ""

    # -- sending -----------------------------------------------------------------------

    async def _write(self, data: bytes, *, owed: bool = False) -> None:
        if not owed:
            while self._owed:
                await self._paid.wait()
        async with self._wlock:
            try:
                await self.transport_stream.send_all(data)
            except OSError as e:
                raise trio.BrokenResourceError(f"websocket: {e}") from e

    def _check_open(self) -> None:
        if self._sent_close:
            raise trio.ClosedResourceError("websocket: this side has sent its close")
        if self._ws.state is not ConnectionState.OPEN:
            raise trio.BrokenResourceError("websocket: the peer closed the connection")

    def _frames(self, data: bytes | bytearray | memoryview) -> bytes:
        view = memoryview(data)
        step = self._limits.send_chunk
        return b"".join(self._ws.send(Message(data=bytes(view[i:i + step])))
                        for i in range(0, view.nbytes, step))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if type(data) is Encoded:  # the rest of a write_now: framed already
            try:
                await self._write(data, owed=True)
            finally:
                self._owed = max(0, self._owed - len(data))
                if not self._owed:
                    self._paid.set()
            return
        self._check_open()
        if not memoryview(data).nbytes:
            return
        await self._write(self._frames(data))

    def may_write_now(self) -> bool:
        """Whether :meth:`write_now` can write without the event loop: a plain
        socket under us, open, and no other write of ours under way."""
        return (type(self.transport_stream) is trio.SocketStream and not self._owed
                and not self._wlock.locked() and not self._sent_close
                and self._ws.state is ConnectionState.OPEN)

    def write_now(self, data: bytes) -> bytes:
        """Frame ``data`` and write what the socket takes at once (the engine's
        fast path, as on a plain socket: :meth:`awp.node.lineout.LineOut.write_now`).

        ``data`` itself when nothing was done (:meth:`may_write_now` is false),
        ``b""`` when every byte went, else the framed rest as
        :class:`~awp.base.sockio.Encoded`, which the caller must hand to
        :meth:`send_all` before anything else goes.
        """
        if not data or not self.may_write_now():
            return data
        out = self._frames(data)
        sent = write_some(self.transport_stream.socket.fileno(), out)
        if sent == len(out):
            return b""
        self._owed = len(out) - sent
        self._paid = trio.Event()
        return Encoded(out[sent:])

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def _send_close(self, code: int, reason: str = "") -> None:
        if self._sent_close or self._ws.state not in (ConnectionState.OPEN,
                                                      ConnectionState.REMOTE_CLOSING):
            return
        self._sent_close = True
        await self._write(self._ws.send(CloseConnection(code=code, reason=reason)))

    async def send_eof(self) -> None:
        """Send our Close (1000): no more data from us; the peer's keeps coming."""
        await self._send_close(CloseReason.NORMAL_CLOSURE)

    # -- receiving ---------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._buf:
            if self._eof:
                return b""
            try:
                data = await read_socket(self.transport_stream, _READ)
            except OSError as e:
                raise trio.BrokenResourceError(f"websocket: {e}") from e
            if self._ws.state is ConnectionState.CLOSED:
                self._eof = True
                return b""
            self._ws.receive_data(data or None)
            await self._take_events()
        n = len(self._buf) if max_bytes is None else min(max_bytes, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def feed(self, data: bytes) -> None:
        """Take bytes that arrived before this stream existed (frames sent right
        behind the upgrade request, read with it)."""
        self._ws.receive_data(data)
        await self._take_events()

    async def _take_events(self) -> None:
        for ev in self._ws.events():
            if isinstance(ev, BytesMessage | TextMessage):
                data = ev.data if isinstance(ev.data, bytes | bytearray) else ev.data.encode()
                await self._count(len(data), ev.frame_finished, ev.message_finished)
                self._buf += data
            elif isinstance(ev, Ping):
                if self._ws.state is ConnectionState.OPEN and not self._sent_close:
                    await self._write(self._ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                self.close_code, self.close_reason = ev.code, ev.reason or ""
                self._eof = True
                if self._ws.state is ConnectionState.OPEN:
                    # wsproto's word for a frame it could not parse: say so, and end.
                    await self._fail(ev.code, ev.reason or "protocol error")
                return

    async def _count(self, n: int, frame_done: bool, message_done: bool) -> None:
        self._frame += n
        self._message += n
        if self._frame > self._limits.frame_bytes:
            await self._fail(CloseReason.MESSAGE_TOO_BIG,
                             f"a frame over {self._limits.frame_bytes} bytes")
        if self._message > self._limits.message_bytes:
            await self._fail(CloseReason.MESSAGE_TOO_BIG,
                             f"a message over {self._limits.message_bytes} bytes")
        if frame_done:
            self._frame = 0
        if message_done:
            self._message = 0

    async def _fail(self, code: int, reason: str) -> None:
        """End the connection for what the peer sent: tell it why, then raise."""
        self._eof = True
        self._buf.clear()
        try:
            with trio.move_on_after(_CLOSE_WAIT):
                await self._send_close(code, reason[:120])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        raise trio.BrokenResourceError(f"websocket closed ({int(code)}): {reason}")

    async def aclose(self) -> None:
        """Say Close if we have not, briefly, then drop the socket."""
        with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_WAIT):
            try:
                await self._send_close(CloseReason.NORMAL_CLOSURE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(self.transport_stream)
