"""A board link's queue is bounded in bytes; what does not fit is compared again later."""

from __future__ import annotations

from awp.node.board import _Link


class _Conn:
    peer_key = "ed25519:" + "A" * 43


def test_a_full_queue_refuses_records_and_marks_the_topic_for_a_digest():
    link = _Link(_Conn(), max_bytes=1000)  # type: ignore[arg-type]
    assert link.push(b"x" * 600, "t1")
    assert not link.push(b"y" * 600, "t1")  # would pass the bound: held back
    assert link.size == 600 and list(link.queue) == [b"x" * 600]
    assert link.resync == {"t1"} and link.wake.is_set()
    assert link.push(b"z" * 300, "t2")  # what fits still goes


def test_lines_of_the_link_itself_are_never_dropped():
    """Subscriptions, digests and answers carry no topic to resync: they always queue."""
    link = _Link(_Conn(), max_bytes=10)  # type: ignore[arg-type]
    assert link.push(b"s" * 100)
    assert link.size == 100 and not link.resync
