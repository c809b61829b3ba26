"""Fuzz the line splitter: any stream, any split, any limit."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.framing import LineReader, LineTooLarge, encode_line

line_bodies = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))


def _feed_all(reader: LineReader, data: bytes, cuts: list[int]) -> list[bytes]:
    out: list[bytes] = []
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts} | {len(data)}):
        out += reader.feed(data[start:cut])
        start = cut
    return out


@given(st.lists(line_bodies, max_size=8), st.integers(1, 48), st.lists(st.integers(0, 400)))
@example([b"x" * 5], 5, [])  # exactly the limit is accepted
@example([b"x" * 6], 5, [3])  # one over, split before the newline
def test_lines_come_back_whole_or_the_stream_is_refused(bodies, limit, cuts):
    """Split anywhere: the same lines come back, unless one passes the limit,
    and then LineTooLarge is raised (and nothing else is)."""
    data = b"".join(b + b"\n" for b in bodies)
    reader = LineReader(limit)
    try:
        got = _feed_all(reader, data, cuts)
    except LineTooLarge:
        assert any(len(b) > limit for b in bodies)
        return
    assert all(len(b) <= limit for b in bodies)
    assert got == bodies and reader.pending == 0


@given(st.lists(st.binary(max_size=80), max_size=10), st.integers(1, 64))
def test_any_bytes_give_bounded_lines_or_too_large(chunks, limit):
    reader = LineReader(limit)
    try:
        for chunk in chunks:
            for line in reader.feed(chunk):
                assert b"\n" not in line and len(line) <= limit
            assert reader.pending <= limit
    except LineTooLarge:
        pass


@given(st.text(max_size=50).filter(lambda s: "\n" not in s))
def test_encode_line_round_trips(text):
    try:
        data = encode_line(text)
    except UnicodeEncodeError:  # lone surrogates: never produced by our encoder
        return
    assert LineReader().feed(data) == [text.encode()]
