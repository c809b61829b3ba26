"""Reading a peer's socket with one pass of the event loop per read.

``trio.SocketStream.receive_some`` tries the ``recv`` first: with nothing
there (the usual case for a peer that sends a line now and then) that is a
failed system call and an exception, then a wait for the socket, then the
``recv`` again; and a ``recv`` that succeeds at once still yields to the
event loop once more (every trio call is a checkpoint).  So a line read
cost two passes of the loop and four system calls.  A board post is one
such read on every host it reaches, and at a few posts a second each read
finds the process cold: a bare trio reader of one line every 20 ms spent
0.25 ms of CPU a line on a loaded two-core machine through
``SocketStream.receive_some``, 0.18 ms waiting first (a loop around
``epoll`` alone: 0.06 ms), some 0.05-0.09 ms of the 1.2 ms a leaf spends
on a post (``bench/board_cost.py``).

:func:`receive_some` waits for the socket first and then reads what is
there: one pass and two system calls (the wait and the read), and it is
still a checkpoint (the wait) as trio's is.  Streams other than a plain
socket (the pluggable transports) are read the ordinary way.
"""

from __future__ import annotations

import os

import trio

from .cpu import STEPS, clock


async def receive_some(stream: trio.abc.ReceiveStream, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` from ``stream`` once any are there; ``b""`` at end of stream.

    Raises what the read raises (``OSError`` for a reset connection) and
    ``trio.ClosedResourceError`` when the stream is closed meanwhile.
    """
    if type(stream) is not trio.SocketStream:
        return await stream.receive_some(max_bytes)
    sock = stream.socket
    while True:
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        await trio.lowlevel.wait_readable(sock)  # readable, or closed by another task
        t = clock()
        try:
            data = os.read(fd, max_bytes)
        except BlockingIOError:  # woken without data (rare): wait again
            continue
        STEPS["read"] += clock() - t
        return data


__all__ = ["receive_some"]
