"""A non-blocking socket's descriptor written or read at once, without the event loop.

Several hot paths skip trio's ``send_all`` / ``receive_some`` when the
socket can take or give the bytes right now: a peer's lone line
(``node.lineout``), a board follower's post and a local API answer
(``localapi.h11serve``).  Each then falls back to the awaited call, which
waits for the socket and reports any error properly; so here an error of
any kind (would block, reset, a descriptor closed meanwhile) means only
"not now".
"""

from __future__ import annotations

import os


def write_some(fd: int, data: bytes) -> int:
    """How many bytes of ``data`` the socket took at once (0: none, or an error)."""
    try:
        return os.write(fd, data)
    except OSError:
        return 0


def read_now(fd: int, size: int) -> bytes | None:
    """Up to ``size`` bytes the socket holds now (``b""`` at its end); None when it
    holds none yet, or on an error."""
    try:
        return os.read(fd, size)
    except OSError:
        return None


class Encoded(bytes):
    """Bytes every stream layer above the socket has already encoded (sealed, framed).

    What a ``write_now`` leaves when the socket took only part of its
    bytes: their place in the stream is fixed (a sealed record's number,
    a WebSocket frame's header), so each layer passes them down as they
    are, never encoding them again, and nothing else may go between.
    """

    __slots__ = ()
