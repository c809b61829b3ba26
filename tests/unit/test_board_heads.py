"""The gap check a subscriber runs some seconds after a head came: records in flight since
are not a gap, records the head named and still missing are."""

from __future__ import annotations

from awp.board.heads import still_lacking
from awp.board.sync import Holdings, opening
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
DAY = 86_400_000
OWNER = Identity(b"\x01" * 32)
TOPIC = f"{OWNER.key}/ops"
FLOOR = T0 - 30 * DAY


def _keys(n: int, start: int, tag: str) -> list[tuple[int, str]]:
    return [(start + i, f"{tag}{i:060d}") for i in range(n)]


def _head(held: list[tuple[int, str]], at: int, doc: int = 1) -> dict:
    h = Holdings(held)
    return b.make_head(OWNER, TOPIC, at, doc, FLOOR, opening(h, FLOOR, at, 0)["ranges"])


def test_records_signed_after_the_head_are_not_a_gap():
    named = _keys(5, T0 - 100, "a")
    head = _head(named, T0)
    since = _keys(7, T0 + 10, "b")  # came after the head: the newest head would name them
    assert not still_lacking(head, Holdings(named + since), 1, FLOOR)


def test_a_record_the_head_named_and_still_missing_is_a_gap():
    named = _keys(5, T0 - 100, "a")
    head = _head(named, T0)
    assert still_lacking(head, Holdings(named[:4] + _keys(3, T0 + 10, "b")), 1, FLOOR)


def test_as_many_records_with_another_fingerprint_is_a_gap():
    named = _keys(5, T0 - 100, "a")
    head = _head(named, T0)
    other = named[:4] + [(T0 - 50, "c" * 60)]
    assert still_lacking(head, Holdings(other), 1, FLOOR)


def test_an_older_policy_is_a_gap():
    named = _keys(2, T0 - 100, "a")
    head = _head(named, T0, doc=3)
    assert still_lacking(head, Holdings(named), 2, FLOOR)
    assert still_lacking(head, Holdings(named), None, FLOOR)
    assert not still_lacking(head, Holdings(named), 3, FLOOR)
