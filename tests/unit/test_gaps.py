"""AckGaps: which sent lines count as lost, and when they are sent again."""

from __future__ import annotations

from awp.node.gaps import AckGaps, line_id
from awp.wire.canonical import compact_json


def _sent(g: AckGaps, *ids: str) -> None:
    for i in ids:
        g.sent(i)


def test_acks_in_order_never_show_a_gap():
    g = AckGaps(5.0)
    _sent(g, "a", "b", "c")
    assert [g.answered(i, 1.0) for i in ("a", "b", "c")] == [False] * 3
    assert g.due() is None and len(g) == 0


def test_a_later_ack_starts_the_clock_for_the_older_lines():
    g = AckGaps(5.0)
    _sent(g, "a", "b", "c", "d")
    assert g.answered("c", 10.0) is True
    assert g.due() == 15.0
    # The older line acked late, within the deadline: nothing is sent again.
    assert g.answered("a", 12.0) is False
    assert g.take_overdue(15.0) == (["b"], [])
    assert len(g) == 1  # "d" still waits, but was sent after the acked "c"
    assert g.due() == 20.0  # "b", about to be sent again, gets its own timeout


def test_a_line_is_sent_again_once_then_left_for_resume():
    g = AckGaps(2.0)
    _sent(g, "a", "b")
    g.answered("b", 0.0)
    assert g.take_overdue(2.0) == (["a"], [])
    g.sent("a", resent=True)
    g.sent("c")
    assert g.answered("c", 3.0) is True
    assert g.take_overdue(5.0) == ([], ["a"])
    assert len(g) == 0


def test_lines_overtaken_after_the_first_gap_get_a_full_timeout():
    g = AckGaps(4.0)
    _sent(g, "a", "b", "c", "d")
    g.answered("b", 0.0)  # a overtaken at 0
    g.answered("d", 3.0)  # c overtaken at 3
    assert g.take_overdue(4.0) == (["a"], [])
    assert g.due() == 8.0  # c's clock starts again now, not at 0
    assert g.take_overdue(8.0) == (["c"], [])


def test_acks_for_unknown_ids_and_the_cap():
    g = AckGaps(1.0, cap=3)
    _sent(g, "a", "b", "c", "d")
    assert len(g) == 3
    assert g.answered("a", 0.0) is False  # forgotten: past the cap
    assert g.answered("zzz", 0.0) is False
    g.forget(["b"])
    assert g.answered("d", 0.0) is True
    assert g.take_overdue(1.0) == (["c"], [])


def test_disabled_with_a_zero_timeout():
    g = AckGaps(0)
    _sent(g, "a", "b")
    assert not g.enabled and len(g) == 0
    assert g.answered("b", 0.0) is False


def test_line_id_reads_our_own_lines():
    for t in ("msg", "state", "mirror", "private"):
        text = compact_json({"t": t, "id": "01M8N80000000000000000000A", "ts": "x", "th": "y"})
        assert line_id(text) == "01M8N80000000000000000000A"
    assert line_id('{"t":"msg","ts":"x"}') is None


def test_a_resend_lost_too_is_given_up_a_timeout_later_with_nothing_more_sent():
    g = AckGaps(2.0)
    _sent(g, "a", "b")
    g.answered("b", 0.0)
    assert g.take_overdue(2.0) == (["a"], [])
    g.sent("a", resent=True)  # and lost again; nothing else is sent
    assert g.due() == 4.0  # before: None, the line waited for good without a word
    assert g.take_overdue(4.0) == ([], ["a"])
    assert len(g) == 0 and g.due() is None


def test_a_resend_acked_in_time_is_not_given_up():
    g = AckGaps(2.0)
    _sent(g, "a", "b")
    g.answered("b", 0.0)
    assert g.take_overdue(2.0) == (["a"], [])
    g.sent("a", resent=True)
    assert g.answered("a", 2.5) is False
    assert g.due() is None
