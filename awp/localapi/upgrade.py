"""A local API answer that turns the connection into raw bytes (``101 Switching Protocols``).

``awp pair`` asks with ``Connection: Upgrade`` and ``Upgrade: awp-pair``; the
handler returns an :class:`Upgrade`.  Its ``ready`` is awaited first, while
the client waits (an acceptor waiting for a peer's request, a dialer waiting
for the peer's answer), and a client that hangs up meanwhile cancels it.
``ready`` refuses with an ``ApiError`` (a plain JSON answer, then close) or
returns the 101's headers and the coroutine that gets the raw connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import h11
import trio

from ..wire.canonical import compact_json
from .h11serve import HttpConnection

Run = Callable[[trio.abc.HalfCloseableStream | None, bytes], Awaitable[None]]


class Upgrade:
    """``ready()`` -> ``(headers, run)``; ``run(stream, rest)`` owns the bytes after the
    101 (``stream`` None: the client went away before it, only clean up)."""

    __slots__ = ("protocol", "ready")

    def __init__(self, protocol: str, ready: Callable[[], Awaitable[tuple[dict, Run]]]) -> None:
        self.protocol = protocol
        self.ready = ready

    async def answer(self, conn: HttpConnection) -> bool:
        """Run the exchange on ``conn``; False always: the connection is over after it."""
        from .server import ApiError

        asked = conn.h11.their_state is h11.MIGHT_SWITCH_PROTOCOL
        if not asked:
            err = ApiError(400, f"this endpoint needs Connection: Upgrade and Upgrade:"
                           f" {self.protocol}", "bad_request")
            await _json(conn, err.status, err.body())
            return False
        got: list = []
        refused: list[ApiError] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.watch_hangup, nursery.cancel_scope)
            try:
                got.append(await self.ready())
            except ApiError as e:
                refused.append(e)
            nursery.cancel_scope.cancel()
        if refused:
            await _json(conn, refused[0].status, refused[0].body())
            return False
        if not got:
            return False  # the client hung up while it waited
        headers, run = got[0]
        head = conn.h11.send(h11.InformationalResponse(status_code=101, headers=[
            ("upgrade", self.protocol), ("connection", "Upgrade"),
            *((k, str(v).encode("utf-8")) for k, v in headers.items())]))
        try:
            await conn.stream.send_all(head)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await run(None, b"")
            return False
        rest = bytes(conn.h11.trailing_data[0])
        await run(conn.stream, rest)
        return False


async def _json(conn: HttpConnection, status: int, body: dict) -> None:
    await conn.respond(status, [("content-type", "application/json")],
                       compact_json(body).encode(), close=True)
