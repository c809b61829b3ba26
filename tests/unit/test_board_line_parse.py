"""A board line with records is decoded once (awp.wire.boardline), and says what the
two-pass way (parse_line, then line_recs) says, or leaves the line to it."""

from __future__ import annotations

import json

import pytest

from awp.node.session import Session
from awp.node.session import actions as A
from awp.wire.board import line_recs, make_post
from awp.wire.boardline import RecsLine, parse_recs_line, recs_of
from awp.wire.errors import ProtocolError
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity
from awp.wire.messages import parse_line

T0 = 1_700_000_000_000
AUTHOR = Identity.generate()
TOPIC = AUTHOR.key + "/news"


def _line(t: str, raws: list[str], head: str = f'"topic":"{TOPIC}","hops":3') -> bytes:
    return (f'{{"t":"{t}","id":"01J0000000000000000000000A","ts":"2026-01-01T00:00:00.000Z",'
            f'{head},"recs":[{",".join(raws)}]}}').encode()


def _posts(n: int) -> list[str]:
    return [make_post(AUTHOR, TOPIC, [{"k": "text", "text": f"p{i} é"}], T0 + i).raw
            for i in range(n)]


@pytest.mark.parametrize("t", ["board-posts", "board-submit"])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_one_pass_gives_the_line_and_the_records_of_two_passes(t: str, n: int) -> None:
    raws = _posts(n)
    raw = _line(t, raws)
    line = parse_recs_line(raw, 32)
    assert isinstance(line, RecsLine)
    assert line == parse_line(raw, 32)
    assert list(line) == list(parse_line(raw, 32))  # members in the same order
    assert line.cut == line_recs(raw.decode(), 4096)
    assert [text for text, _v in line.cut] == raws  # each record's exact bytes
    assert recs_of(line, raw, 4096) == line.cut
    assert recs_of(line, raw, n - 1 if n else 0) is (None if n else line.cut)


@pytest.mark.parametrize("raw", [
    b'{"t":"board-posts","id":"x","topic":"a/b","hops":1,"recs":[1],"x":2}',  # recs not last
    b'{"t":"board-posts","id":"x","x":{"recs":[9]},"recs":[2]}',  # a nested recs first
    b'{"t":"board-posts","id":"x","recs":[1],"recs":[2]}',  # twice
    b'{"t":"board-posts","id":"x","s":"\\u00e9","recs":[1]}',  # an escape: the full rules
    b'{"t":"board-posts","id":5,"recs":[1]}',  # a bad envelope field: parse_line's err
    b'{"t":"board-head","id":"x","recs":[1]}',  # not a line with records
    b'{"t":"board-posts", "id":"x", "recs":[1]}',  # spaced
    b'{"t":"board-posts","id":"x","recs":[[[[[[1]]]]]]}',  # deeper than allowed
])
def test_anything_unusual_is_left_to_the_ordinary_parse(raw: bytes) -> None:
    assert parse_recs_line(raw, 4) is None


@pytest.mark.parametrize("raw", [
    b'{"t":"board-posts","id":"x","recs":[1,]}',
    b'{"t":"board-posts","id":"x","recs":[NaN]}',
    b'{"t":"board-posts","id":"x",,"recs":[1]}',
    b'{"t":"board-posts","id":"x","recs":[1]]}',
    b'{"t":"board-posts","id":"x","recs":["\xff"]}',
])
def test_a_bad_line_is_refused_as_before(raw: bytes) -> None:
    assert parse_recs_line(raw, 32) is None
    with pytest.raises(ProtocolError):
        parse_line(raw, 32)


def test_the_session_hands_the_board_the_records_cut_once() -> None:
    s = Session(IdGenerator(), now=0.0)
    raws = _posts(2)
    odd = _line("board-posts", raws, head=f'"hops":1,"topic":"{TOPIC}","x":"\\u00e9"')
    s.receive([_line("board-posts", raws), odd], 0.0)
    first, second = s.next_action(0.0), s.next_action(0.0)
    assert first[0] is A.OTHER and isinstance(first[1], RecsLine)
    assert [t for t, _v in first[1].cut] == raws
    # The line the fast path leaves is parsed the ordinary way; the board cuts it itself.
    assert second[0] is A.OTHER and not isinstance(second[1], RecsLine)
    assert second[1]["x"] == "é"
    assert recs_of(second[1], second[2], 10) == line_recs(odd.decode(), 10)
    assert [json.loads(t) for t, _v in recs_of(second[1], second[2], 10)] == [
        json.loads(r) for r in raws]
