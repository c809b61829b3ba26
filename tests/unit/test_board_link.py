"""A board link's queue is bounded in bytes; what does not fit is compared again later."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import trio

from awp.node.board_sendq import BoardLink
from awp.node.lineout import LineOut


class _Conn:
    """A connection that is not up yet: every line waits in the link's queue."""

    peer_key = "ed25519:" + "A" * 43
    closed = trio.Event()
    established = trio.Event()


def _socket_conn(sock: socket.socket) -> SimpleNamespace:
    """A connection that is up, writing to ``sock`` (a trio stream, as the daemon's)."""
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
    conn = SimpleNamespace(peer_key="ed25519:" + "B" * 43, closed=trio.Event(),
                           established=trio.Event(),
                           session=SimpleNamespace(replay=SimpleNamespace(bye_sent=False)),
                           out=LineOut(stream, write_timeout=5, on_stall=lambda why: None))
    conn.established.set()
    return conn


def _drain(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        got += sock.recv(1 << 20)
    return got


def test_a_line_for_an_idle_link_goes_to_the_socket_at_once():
    """No task wake-up for the common case: the line is written before push returns."""
    async def main() -> None:
        a, b = socket.socketpair()
        conn = _socket_conn(a)
        stats = {"lines_out": 0, "bytes_out": 0}
        link = BoardLink(conn, max_bytes=10_000, stats=stats)  # type: ignore[arg-type]
        line = b'{"t":"board-posts","recs":[]}\n'
        assert link.push_records("t1", 0, ["a"], 100, lambda: line)
        assert not link.queue and link.size == 0 and not link.wake.is_set()
        assert _drain(b, len(line)) == line
        assert stats == {"lines_out": 1, "bytes_out": len(line)}
        # Another writer of the connection holds the send lock: the line waits its turn.
        conn.out.lock.acquire_nowait()
        assert link.push(b"second\n", "t1")
        assert list(link.queue) == [b"second\n"] and link.wake.is_set()
        conn.out.lock.release()
        # Behind a queued line, nothing jumps the queue.
        assert link.push_records("t1", 0, ["b"], 100, lambda: b"third\n")
        assert [getattr(x, "raws", x) for x in link.queue] == [b"second\n", ["b"]]
        a.close()
        b.close()

    trio.run(main)


def test_what_the_socket_does_not_take_is_finished_by_the_link_before_anything_else():
    async def main() -> None:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        conn = _socket_conn(a)
        link = BoardLink(conn, max_bytes=1 << 24)  # type: ignore[arg-type]
        big = b"x" * (4 << 20) + b"\n"
        assert link.push(big, "t1")
        assert link.partial and conn.out.busy()  # the rest waits, holding the send lock
        assert link.push(b"next\n", "t1")  # queued behind the rest, not written
        got = bytearray()

        async def reader() -> None:
            while len(got) < len(big):
                await trio.lowlevel.wait_readable(b)
                got.extend(b.recv(1 << 20))

        b.setblocking(False)
        async with trio.open_nursery() as n:
            n.start_soon(reader)
            await link.finish_partial()
        assert bytes(got) == big and link.partial is None and not conn.out.busy()
        a.close()
        b.close()

    trio.run(main)


def test_a_full_queue_refuses_records_and_marks_the_topic_for_a_digest():
    link = BoardLink(_Conn(), max_bytes=1000)  # type: ignore[arg-type]
    assert link.push(b"x" * 600, "t1")
    assert not link.push(b"y" * 600, "t1")  # would pass the bound: held back
    assert link.size == 600 and list(link.queue) == [b"x" * 600]
    assert link.resync == {"t1"} and link.wake.is_set()
    assert link.push(b"z" * 300, "t2")  # what fits still goes


def test_lines_of_the_link_itself_are_never_dropped():
    """Subscriptions, digests and answers carry no topic to resync: they always queue."""
    link = BoardLink(_Conn(), max_bytes=10)  # type: ignore[arg-type]
    assert link.push(b"s" * 100)
    assert link.size == 100 and not link.resync


def test_records_queued_one_after_another_leave_in_one_line():
    link = BoardLink(_Conn(), max_bytes=10_000)  # type: ignore[arg-type]
    assert link.push_records("t1", 0, ["a"], 100)
    assert link.push_records("t1", 0, ["b"], 100)  # joins the group before it
    assert link.push_records("t1", 1, ["c"], 100)  # other hops: a line of its own
    assert link.push_records("t2", 1, ["d"], 100)  # other topic: too
    groups = [(r.topic, r.hops, r.raws) for r in link.queue]
    assert groups == [("t1", 0, ["a", "b"]), ("t1", 1, ["c"]), ("t2", 1, ["d"])]
    assert link.size == 400
    assert not link.push_records("t3", 0, ["e"], 10_000)  # over the bound: held back
    assert link.resync == {"t3"} and link.size == 400


def test_a_group_never_grows_past_a_line():
    from awp.node.board_sendq import MAX_LINE

    link = BoardLink(_Conn(), max_bytes=4 * MAX_LINE)  # type: ignore[arg-type]
    for _ in range(3):
        assert link.push_records("t", 0, ["x"], MAX_LINE // 2)
    assert [len(r.raws) for r in link.queue] == [1, 1, 1]


def test_records_for_an_idle_link_leave_as_the_line_built_once_for_every_link():
    built: list[str] = []

    def line() -> bytes:
        built.append("t1")
        return b'{"t":"board-posts"...}\n'

    links = [BoardLink(_Conn(), max_bytes=10_000) for _ in range(3)]  # type: ignore[arg-type]
    shared: dict[str, bytes] = {}

    def once() -> bytes:
        if "l" not in shared:
            shared["l"] = line()
        return shared["l"]

    for link in links:
        assert link.push_records("t1", 0, ["a"], 100, once)
    assert [list(x.queue) for x in links] == [[b'{"t":"board-posts"...}\n']] * 3
    assert all(x.size == len(b'{"t":"board-posts"...}\n') for x in links)
    # Behind a queued line, records wait as records again, and later ones join them.
    assert links[0].push_records("t1", 0, ["b"], 100, line)
    assert links[0].push_records("t1", 0, ["c"], 100, line)
    assert [r.raws for r in list(links[0].queue)[1:]] == [["b", "c"]]
    assert len(built) == 1


def test_a_minute_window_counts_to_its_bound_and_starts_again_a_minute_later():
    import trio
    import trio.testing

    from awp.node.board_sendq import MinuteWindow

    async def main() -> None:
        w = MinuteWindow()
        assert w.take(3, 5) and w.left(5) == 2
        assert not w.take(3, 5)  # 6 > 5: refused, and the count stays over
        assert not w.take(1, 5)
        await trio.sleep(59)
        assert w.left(5) == -2  # 7 taken
        await trio.sleep(1)
        assert w.left(5) == 5 and w.take(5, 5)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
