"""awp.base.sockio: a non-blocking socket written and read at once, "not now" for any error."""

from __future__ import annotations

import os
import socket

from awp.base.sockio import read_now, write_some


def test_a_full_socket_takes_part_then_nothing_and_an_empty_one_gives_none_then_the_end():
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.setblocking(False)
        big = b"x" * (8 << 20)  # more than any socket buffer holds
        took = write_some(a.fileno(), big)
        assert 0 < took < len(big)
        assert write_some(a.fileno(), b"more") == 0  # full: nothing, no exception
        assert read_now(b.fileno(), 1 << 30)  # what is there comes at once
        while read_now(b.fileno(), 1 << 20) is not None:  # drain
            pass
        assert read_now(b.fileno(), 100) is None  # nothing there yet
        a.shutdown(socket.SHUT_WR)
        assert read_now(b.fileno(), 100) == b""  # the end of the stream


def test_a_closed_descriptor_is_not_now_rather_than_an_error():
    a, b = socket.socketpair()
    fd = os.dup(a.fileno())
    a.close()
    b.close()
    os.close(fd)
    assert write_some(fd, b"x") == 0
    assert read_now(fd, 10) is None
