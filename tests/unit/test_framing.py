"""LineReader: splitting a byte stream into lines, and the 1 MiB limit."""

from __future__ import annotations

import pytest

from awp.wire.framing import MAX_LINE, LineReader, LineTooLarge, encode_line


def test_max_line_is_one_mebibyte():
    assert MAX_LINE == 1_048_576


def test_single_complete_line():
    r = LineReader()
    assert r.feed(b'{"t":"ping"}\n') == [b'{"t":"ping"}']
    assert r.pending == 0


def test_line_split_across_feeds():
    r = LineReader()
    assert r.feed(b'{"t":') == []
    assert r.pending == 5
    assert r.feed(b'"ping"') == []
    assert r.feed(b"}") == []
    assert r.feed(b"\n") == [b'{"t":"ping"}']
    assert r.pending == 0


def test_line_split_byte_by_byte():
    r = LineReader()
    data = b'{"t":"msg","text":"h\xc3\xa9"}\n{"t":"ping"}\n'
    out: list[bytes] = []
    for i in range(len(data)):
        out += r.feed(data[i : i + 1])
    assert out == [b'{"t":"msg","text":"h\xc3\xa9"}', b'{"t":"ping"}']
    assert r.pending == 0


def test_several_lines_in_one_feed():
    r = LineReader()
    assert r.feed(b"a\nbb\nccc\n") == [b"a", b"bb", b"ccc"]
    assert r.pending == 0


def test_several_lines_plus_fragment_then_rest():
    r = LineReader()
    assert r.feed(b"one\ntwo\nthr") == [b"one", b"two"]
    assert r.pending == 3
    assert r.feed(b"ee\nfour") == [b"three"]
    assert r.pending == 4
    assert r.feed(b"\n") == [b"four"]


def test_final_fragment_without_newline_stays_pending():
    r = LineReader()
    assert r.feed(b'{"t":"ping"}\n{"t":"pong"') == [b'{"t":"ping"}']
    assert r.pending == len(b'{"t":"pong"')
    # Nothing more arrives: the fragment is never handed out as a line.
    assert r.feed(b"") == []
    assert r.pending == len(b'{"t":"pong"')


def test_empty_lines():
    r = LineReader()
    assert r.feed(b"\n") == [b""]
    assert r.feed(b"\n\n") == [b"", b""]
    assert r.feed(b"x\n\ny\n") == [b"x", b"", b"y"]
    assert r.pending == 0


def test_empty_feed_returns_nothing():
    r = LineReader()
    assert r.feed(b"") == []
    assert r.pending == 0


def test_exactly_max_line_accepted_in_one_feed():
    r = LineReader()
    body = b"x" * MAX_LINE
    lines = r.feed(body + b"\n")
    assert len(lines) == 1
    assert len(lines[0]) == 1_048_576
    assert r.pending == 0


def test_exactly_max_line_accepted_in_pieces_before_newline():
    r = LineReader()
    piece = b"y" * 65536
    for _ in range(MAX_LINE // len(piece)):
        assert r.feed(piece) == []
    assert r.pending == MAX_LINE  # at the limit, not past it: no error yet
    lines = r.feed(b"\nnext")
    assert [len(x) for x in lines] == [MAX_LINE]
    assert r.pending == 4


def test_one_byte_over_raises_in_one_feed_with_newline():
    r = LineReader()
    with pytest.raises(LineTooLarge):
        r.feed(b"x" * (MAX_LINE + 1) + b"\n")


def test_one_byte_over_raises_in_one_feed_without_newline():
    r = LineReader()
    with pytest.raises(LineTooLarge):
        r.feed(b"x" * (MAX_LINE + 1))


def test_over_limit_raises_as_soon_as_buffer_passes_limit_without_newline():
    r = LineReader()
    piece = b"z" * 100_000
    fed = 0
    while fed + len(piece) <= MAX_LINE:
        assert r.feed(piece) == []
        fed += len(piece)
    rest = MAX_LINE - fed
    assert r.feed(b"z" * rest) == []  # exactly at the limit: still fine
    assert r.pending == MAX_LINE
    # The very next byte passes the limit: raise at once, no newline needed.
    with pytest.raises(LineTooLarge):
        r.feed(b"z")


def test_over_limit_after_complete_lines_in_same_stream():
    r = LineReader()
    assert r.feed(b"ok\n" + b"a" * MAX_LINE) == [b"ok"]
    assert r.pending == MAX_LINE
    with pytest.raises(LineTooLarge):
        r.feed(b"a")


def test_complete_lines_before_oversized_line_in_same_feed_are_delivered():
    r = LineReader()
    lines = r.feed(b"first\nsecond\n" + b"q" * 10)
    assert lines == [b"first", b"second"]
    with pytest.raises(LineTooLarge):
        r.feed(b"q" * MAX_LINE)


def test_limit_counts_only_the_current_line():
    # Many lines whose total is far over the limit are fine.
    r = LineReader()
    line = b"w" * 300_000
    out: list[bytes] = []
    for _ in range(10):
        out += r.feed(line + b"\n")
    assert len(out) == 10
    assert all(len(x) == 300_000 for x in out)


def test_custom_small_limit():
    r = LineReader(limit=4)
    assert r.feed(b"abcd\n") == [b"abcd"]
    assert r.feed(b"abcd") == []
    with pytest.raises(LineTooLarge):
        r.feed(b"e")


def test_custom_small_limit_complete_line_over():
    r = LineReader(limit=4)
    with pytest.raises(LineTooLarge):
        r.feed(b"abcde\nok\n")


def test_encode_line():
    assert encode_line('{"t":"ping","x":"é"}') == '{"t":"ping","x":"é"}\n'.encode()


def test_lines_come_out_as_one_split_of_the_stream_however_it_is_cut():
    """Random cuts of a stream: the same lines as splitting it whole, the rest held,
    and a line over the limit refused whether or not its newline came."""
    import random

    rnd = random.Random(7)
    for _trial in range(2000):
        parts = [bytes(rnd.choice(b"ab\n") for _ in range(rnd.randint(0, 30)))
                 for _ in range(rnd.randint(1, 10))]
        whole = b"".join(parts)
        want = whole.split(b"\n")
        tail = want.pop()
        over = any(len(x) > 8 for x in want) or len(tail) > 8
        r = LineReader(limit=8)
        got: list[bytes] = []
        try:
            for p in parts:
                got += r.feed(p)
        except LineTooLarge:
            assert over
            continue
        assert not over and got == want and r.pending == len(tail)
        assert all(type(x) is bytes for x in got)
