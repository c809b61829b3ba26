"""Copying a pair stream's bytes between a local caller and a side connection.

One read in flight each way: a chunk read from one end is written whole to
the other before the next read, so nothing queues in the daemon beyond one
chunk a direction, and a reader that stops blocks the writer through the
kernel's socket buffers (capped here, so the whole path holds at most a few
MiB).  An end of file travels as a half-close; the local caller closing
its connection entirely (its command exited) ends the session.
"""

from __future__ import annotations

import select
import socket

import trio

CHUNK = 64 * 1024
#: SO_SNDBUF and SO_RCVBUF asked for on every socket of a stream (Linux doubles it).
SOCK_BUF = 256 * 1024
#: How often a local end that half-closed is checked for having closed entirely.
HUP_POLL = 0.2

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Outcome:
    """What a session did: bytes each way as this daemon copied them, and why it broke."""

    __slots__ = ("sent", "received", "error", "started", "ended")

    def __init__(self) -> None:
        self.sent = 0  # local -> peer
        self.received = 0  # peer -> local
        self.error = ""
        self.started = trio.current_time()
        self.ended = 0.0

    @property
    def ms(self) -> int:
        end = self.ended or trio.current_time()
        return int((end - self.started) * 1000)

    def as_dict(self) -> dict:
        return {"sent": self.sent, "received": self.received, "ms": self.ms,
                "error": self.error, "done": bool(self.ended)}


def socket_of(stream: object) -> trio.socket.SocketType | None:
    """The trio socket under a stream (through a seal or a WebSocket), or None."""
    for _ in range(4):
        if type(stream) is trio.SocketStream:
            return stream.socket
        stream = getattr(stream, "raw", None) or getattr(stream, "transport_stream", None)
        if stream is None:
            return None
    return None


def cap_buffers(stream: object, size: int = SOCK_BUF) -> None:
    """Bound what the kernel holds for this stream's socket (both directions)."""
    sock = socket_of(stream)
    if sock is None:
        return
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
        except OSError:
            pass


def hung_up(stream: object) -> bool:
    """Whether the other end of a (Unix) socket closed entirely, not only its writing
    (or a held end's caller closed it: ``gone``)."""
    if getattr(stream, "gone", False):
        return True
    sock = socket_of(stream)
    if sock is None:
        return False
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN)
    return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))


async def splice(local: trio.abc.HalfCloseableStream, local_rest: bytes,
                 remote: trio.abc.HalfCloseableStream, remote_rest: bytes,
                 peer: str = "the peer") -> Outcome:
    """Copy both ways until both directions ended, the local end hung up, or the
    remote broke (``Outcome.error``).  Closes neither stream."""
    out = Outcome()
    state = {"up": False, "down": False}  # each direction's end of file passed on

    async def up(cancel: trio.CancelScope) -> None:
        data = local_rest
        while True:
            if data:
                try:
                    await remote.send_all(data)
                except _GONE as e:
                    if not state["down"]:  # the peer had not ended its side: it broke
                        out.error = f"the stream to {peer} broke: {e or type(e).__name__}"
                    cancel.cancel()
                    return
                out.sent += len(data)
            try:
                data = await local.receive_some(CHUNK)
            except _GONE:
                data = b""
            if not data:
                break
        if hung_up(local):  # the caller's command exited: the session is over
            cancel.cancel()
            return
        try:
            await remote.send_eof()
        except _GONE as e:
            if not state["down"]:
                out.error = f"the stream to {peer} broke: {e or type(e).__name__}"
            cancel.cancel()
            return
        state["up"] = True
        if state["down"]:
            cancel.cancel()
            return
        while not hung_up(local):
            await trio.sleep(HUP_POLL)
        cancel.cancel()

    async def down(cancel: trio.CancelScope) -> None:
        data = remote_rest
        while True:
            if data:
                try:
                    await local.send_all(data)
                except _GONE:  # the caller went away
                    cancel.cancel()
                    return
                out.received += len(data)
            try:
                data = await remote.receive_some(CHUNK)
            except _GONE as e:
                out.error = f"the stream from {peer} broke: {e or type(e).__name__}"
                cancel.cancel()
                return
            if not data:
                break
        state["down"] = True
        try:
            await local.send_eof()
        except _GONE:
            cancel.cancel()
            return
        if state["up"]:
            cancel.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(up, nursery.cancel_scope)
            nursery.start_soon(down, nursery.cancel_scope)
    finally:
        out.ended = trio.current_time()
    if not out.error and not state["up"]:
        # Ended by the caller's exit: tell the peer cleanly (a seal's end record).
        with trio.move_on_after(2):
            try:
                await remote.send_eof()
            except _GONE:
                pass
    return out
