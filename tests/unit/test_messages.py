"""parse_line (what is a bad_frame), dump, and default_subject."""

from __future__ import annotations

import json

import pytest

from awp.wire.canonical import canonical_json, compact_json
from awp.wire.errors import BAD_FRAME, CLOSING, KNOWN, NON_CLOSING, ProtocolError
from awp.wire.messages import (
    ACKED_TYPES,
    CONTENT_TYPES,
    ack,
    default_subject,
    dump,
    err,
    hello,
    parse_line,
    text_part,
)

ID = "01K5ZQ0Y6S7C8D9E0F1G2H3J4K"
TS = "2026-09-25T17:03:11.123Z"


def bad_frame(line: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_line(line)
    assert info.value.code == BAD_FRAME
    assert info.value.closes
    return info.value


def line_of(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- parse_line: bad frames ----------------------------------------------------------


def test_not_json_is_bad_frame():
    bad_frame(b"this is not json")


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b'[{"t":"msg"}]',
        b'"hello"',
        b"42",
        b"null",
        b"true",
        b"",
        b"   ",
        b"{",
        b'{"t":"ping"',
        b'{"t":"ping"} trailing',
        b'{"t":"ping"}{"t":"ping"}',
        b"{'t':'ping'}",
        b'{"t":"ping",}',
    ],
)
def test_non_objects_and_broken_json_are_bad_frame(line):
    bad_frame(line)


def test_missing_t_is_bad_frame():
    bad_frame(b"{}")
    bad_frame(b'{"id":"' + ID.encode() + b'"}')


@pytest.mark.parametrize("t", [5, 0, None, True, [], {}, ""])
def test_wrongly_typed_t_is_bad_frame(t):
    bad_frame(line_of({"t": t}))


@pytest.mark.parametrize("field", ["id", "ts", "th", "re"])
@pytest.mark.parametrize("value", [5, 1.5, True, [], {}, ["x"]])
def test_wrongly_typed_envelope_fields_are_bad_frame(field, value):
    bad_frame(line_of({"t": "ping", field: value}))


@pytest.mark.parametrize("field", ["id", "ts", "th", "re"])
def test_null_envelope_fields_are_tolerated(field):
    assert parse_line(line_of({"t": "ping", field: None}))[field] is None


def test_msg_without_id_or_th_is_bad_frame():
    bad_frame(line_of({"t": "msg", "th": "thr_abcdefgh", "parts": []}))
    bad_frame(line_of({"t": "msg", "id": ID, "parts": []}))
    bad_frame(line_of({"t": "msg", "id": "", "th": "thr_abcdefgh", "parts": []}))
    bad_frame(line_of({"t": "msg", "id": ID, "th": "", "parts": []}))


def test_state_without_id_th_or_state_is_bad_frame():
    base = {"t": "state", "id": ID, "th": "thr_abcdefgh", "state": "working"}
    assert parse_line(line_of(base))["state"] == "working"
    for missing in ("id", "th", "state"):
        obj = dict(base)
        del obj[missing]
        bad_frame(line_of(obj))
    bad_frame(line_of({**base, "state": 3}))
    bad_frame(line_of({**base, "state": ""}))


def test_chunk_without_id_or_ref_is_bad_frame():
    base = {"t": "chunk", "id": ID, "th": "thr_abcdefgh", "ref": "b_" + ID, "n": 0,
            "last": True, "data": "YQ=="}
    assert parse_line(line_of(base))["ref"] == "b_" + ID
    for missing in ("id", "ref"):
        obj = dict(base)
        del obj[missing]
        bad_frame(line_of(obj))
    bad_frame(line_of({**base, "ref": 7}))


def test_grant_without_grant_object_is_bad_frame():
    bad_frame(line_of({"t": "grant", "id": ID}))
    bad_frame(line_of({"t": "grant", "id": ID, "grant": "x"}))
    bad_frame(line_of({"t": "grant", "id": ID, "grant": ["x"]}))
    bad_frame(line_of({"t": "grant", "id": ID, "grant": None}))
    g = {"iss": "ed25519:x", "sub": "ed25519:y", "caps": ["exec"], "future": 1}
    assert parse_line(line_of({"t": "grant", "id": ID, "grant": g}))["grant"] == g


@pytest.mark.parametrize("parts", ["text", 5, {"k": "text"}, [1], ["x"], [{"k": "text"}, None]])
def test_msg_parts_not_a_list_of_objects_is_bad_frame(parts):
    bad_frame(line_of({"t": "msg", "id": ID, "th": "thr_abcdefgh", "parts": parts}))


def test_msg_parts_ok():
    obj = parse_line(line_of({"t": "msg", "id": ID, "th": "thr_abcdefgh", "parts": []}))
    assert obj["parts"] == []
    obj = parse_line(line_of({"t": "msg", "id": ID, "th": "thr_abcdefgh"}))
    assert "parts" not in obj


@pytest.mark.parametrize(
    "line",
    [
        b'{"t":"msg","id":"X","th":"t","x":"\xff"}',
        b'{"t":"msg","id":"X","th":"t","x":"\xc3"}',
        b'{"t":"ping","x":"\xed\xa0\x80"}',  # UTF-8-encoded surrogate
        b'{"t":"ping","x":"\xc0\xaf"}',  # overlong
        b'\xef\xbb\xbf{"t":"ping"}',  # BOM before the object
    ],
)
def test_invalid_utf8_is_bad_frame(line):
    bad_frame(line)


@pytest.mark.parametrize("const", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_json_constants_are_bad_frame(const):
    bad_frame(b'{"t":"msg","id":"X","th":"t","n":' + const + b"}")


def test_lone_surrogate_escape_becomes_replacement_char():
    obj = parse_line(b'{"t":"ping","id":"a\\ud800b","x":["\\uDFFF"],"\\ud801":1}')
    assert obj["id"] == "a\ufffdb"
    assert obj["x"] == ["\ufffd"]
    assert obj["\ufffd"] == 1
    dump(obj)  # must stay encodable


def test_valid_surrogate_pair_escape_is_kept():
    obj = parse_line(b'{"t":"ping","x":"\\ud83d\\ude00","y":"\\\\ud800"}')
    assert obj["x"] == "😀"
    assert obj["y"] == "\\ud800"  # an escaped backslash, not a surrogate


def test_deep_nesting_is_bad_frame_not_crash():
    bad_frame(b'{"t":"x","d":' + b"[" * 100_000 + b"]" * 100_000 + b"}")


# --- parse_line: what passes --------------------------------------------------------


def test_unknown_type_passes_and_is_preserved():
    obj = parse_line(b'{"t":"conformance-future","id":"' + ID.encode() + b'","blob":{"a":[1]}}')
    assert obj == {"t": "conformance-future", "id": ID, "blob": {"a": [1]}}


def test_unknown_fields_pass_and_are_preserved_everywhere():
    src = {
        "t": "msg", "id": ID, "ts": TS, "th": "thr_abcdefgh", "x-top": {"n": 1, "l": [None]},
        "parts": [{"k": "text", "text": "hi", "x-part": True},
                  {"k": "future-kind", "whatever": [1, 2]}],
    }
    obj = parse_line(line_of(src))
    assert obj == src
    assert obj["parts"][0]["x-part"] is True
    assert obj["parts"][1]["whatever"] == [1, 2]


def test_unknown_fields_survive_dump_round_trip():
    src = b'{"t":"msg","id":"X","th":"t","parts":[{"k":"text","text":"a","zz":1}],"extra":"<&>"}'
    assert dump(parse_line(src)) == src + b"\n"


def test_leading_whitespace_is_fine():
    assert parse_line(b' {"t":"ping"}') == {"t": "ping"}
    assert parse_line(b'  \t{"t":"ping"}') == {"t": "ping"}
    assert parse_line(b'{"t":"ping"}  ') == {"t": "ping"}


def test_envelope_types_other_than_t_can_be_missing():
    assert parse_line(b'{"t":"ping"}') == {"t": "ping"}
    assert parse_line(b'{"t":"ack","th":"thr_x","re":"' + ID.encode() + b'"}')["re"] == ID


def test_non_ascii_content_decoded():
    obj = parse_line('{"t":"msg","id":"X","th":"t","parts":[{"k":"text","text":"é😀"}]}'.encode())
    assert obj["parts"][0]["text"] == "é😀"


# --- dump ---------------------------------------------------------------------------


def test_dump_no_html_escaping_non_ascii_literal_single_newline():
    out = dump({"t": "msg", "text": "<b>&amp;</b> é 😀 \u2028"})
    assert out == '{"t":"msg","text":"<b>&amp;</b> é 😀 \u2028"}\n'.encode()
    assert out.endswith(b"\n") and not out.endswith(b"\n\n")
    assert out.count(b"\n") == 1
    assert b"\\u" not in out
    assert b", " not in out and b": " not in out


def test_dump_escapes_newlines_inside_strings():
    out = dump({"t": "msg", "text": "a\nb\r\n"})
    assert out == b'{"t":"msg","text":"a\\nb\\r\\n"}\n'
    assert out.count(b"\n") == 1


def test_dump_keeps_insertion_order_and_is_compact():
    assert dump({"t": "ack", "th": "x", "re": "y"}) == b'{"t":"ack","th":"x","re":"y"}\n'


def test_dump_parse_round_trip():
    obj = {"t": "msg", "id": ID, "ts": TS, "th": "thr_abcdefgh",
           "parts": [text_part("héllo <world>")]}
    assert parse_line(dump(obj)[:-1]) == obj


# --- constructors -------------------------------------------------------------------


def test_hello_always_has_v():
    h = hello(id=ID, ts=TS, key="ed25519:k", name="n", nonce="nn", caps=["blob"])
    assert h["v"] == 0
    assert b'"v":0' in dump(h)
    assert "addr" not in h and "shares" not in h
    h = hello(id=ID, ts=TS, key="k", name="n", nonce="nn", caps=[], addr="tcp:h:1",
              shares=["ed25519:s"])
    assert h["addr"] == "tcp:h:1" and h["shares"] == ["ed25519:s"]


def test_ack_and_err_shapes():
    assert ack("thr_x", ID, id="I", ts=TS) == {"t": "ack", "id": "I", "ts": TS, "th": "thr_x",
                                                "re": ID}
    assert err("auth", id="I", ts=TS) == {"t": "err", "id": "I", "ts": TS, "code": "auth"}
    e = err("blob_refused", id="I", ts=TS, re=ID, detail="too big", ref="b_x")
    assert e["re"] == ID and e["detail"] == "too big" and e["ref"] == "b_x"


def test_type_sets_and_error_codes():
    assert set(ACKED_TYPES) == {"msg", "state", "mirror", "private"}
    assert "ack" not in CONTENT_TYPES and "chunk" in CONTENT_TYPES
    assert {"bad_frame", "version", "auth", "too_large"} == CLOSING
    assert {"forbidden", "unsupported", "blob_refused", "internal", "quota"} == NON_CLOSING
    assert KNOWN == CLOSING | NON_CLOSING
    assert not ProtocolError("unsupported").closes


# --- default_subject ----------------------------------------------------------------


def test_subject_first_non_empty_trimmed_text_line():
    parts = [{"k": "text", "text": "\n   \n  Build is red  \nsecond line"}]
    assert default_subject(parts) == "Build is red"


def test_subject_skips_blank_text_parts_and_other_kinds():
    parts = [
        {"k": "code", "text": "not me"},
        {"k": "text", "text": "   \n\t"},
        {"k": "blob", "name": "report.pdf"},
        {"k": "text", "text": "\nhere\n"},
    ]
    assert default_subject(parts) == "here"


def test_subject_81_chars_becomes_77_plus_ellipsis():
    line = "x" * 81
    out = default_subject([text_part(line)])
    assert out == "x" * 77 + "..."
    assert len(out) == 80


def test_subject_exactly_80_stays():
    line = "".join(str(i % 10) for i in range(80))
    assert default_subject([text_part(line)]) == line


def test_subject_long_counts_characters_not_bytes():
    line = "é" * 80
    assert default_subject([text_part(line)]) == line
    assert default_subject([text_part("é" * 81)]) == "é" * 77 + "..."


def test_subject_trims_before_measuring():
    assert default_subject([text_part("   " + "y" * 80 + "   ")]) == "y" * 80


def test_subject_without_text_is_first_blob_name():
    parts = [{"k": "data", "mime": "application/json", "data": {}},
             {"k": "blob", "ref": "b_1", "name": "a.txt", "size": 1},
             {"k": "blob", "ref": "b_2", "name": "b.txt", "size": 1}]
    assert default_subject(parts) == "a.txt"


def test_subject_nothing_is_empty():
    assert default_subject([]) == ""
    assert default_subject([{"k": "data", "data": 1}]) == ""
    assert default_subject([{"k": "text", "text": "  \n "}]) == ""
    assert default_subject([{"k": "text", "text": 5}, {"k": "blob"}]) == ""


def test_subject_of_a_long_text_is_found_the_same_way():
    """A long text is read only as far as its first line needs; the subject is
    the one splitting all of it into lines gives, whatever breaks and blanks."""

    def whole(text: str) -> str:
        for ln in text.splitlines():
            if ln.strip():
                ln = ln.strip()
                return ln if len(ln) <= 80 else ln[:77] + "..."
        return ""

    for text in ("x" * 1_000_000, " " * 9000 + "late start", "a" + " " * 9000 + "b",
                 "a" + " " * 9000, "a" + " " * 9000 + "\n" + "b" * 90, "\u2028" * 5000 + "z",
                 "\x1c abc \x1d def", "\u3000 wide space \u3000\n", "ab\r\ncd" + "e" * 5000):
        assert default_subject([text_part(text)]) == whole(text), repr(text[:40])


def test_nesting_past_the_depth_limit_is_bad_frame():
    from awp.wire.messages import MAX_DEPTH, depth_over

    def line(depth: int, t: str = "x") -> bytes:  # the line object itself is level 1
        inner = depth - 1
        return (b'{"t":"' + t.encode() + b'","id":"1","v":' + b"[" * inner + b"]" * inner
                + b"}")

    assert parse_line(line(MAX_DEPTH))["t"] == "x"
    for depth in (MAX_DEPTH + 1, 990, 100_000):
        with pytest.raises(ProtocolError) as e:
            parse_line(line(depth))
        assert e.value.code == "bad_frame" and "nested deeper" in e.value.detail
    # a mirror wraps a line that had the whole allowance
    assert parse_line(line(MAX_DEPTH + 1, "mirror"))["t"] == "mirror"
    with pytest.raises(ProtocolError):
        parse_line(line(MAX_DEPTH + 2, "mirror"))
    assert parse_line(line(8), max_depth=8) and not depth_over({"a": [[]]}, 3)
    with pytest.raises(ProtocolError):
        parse_line(line(9), max_depth=8)
    # brackets inside strings are not nesting
    assert parse_line(b'{"t":"x","s":"' + b"[" * 500 + b'"}')["s"] == "[" * 500
    # nor in a long line, whose brackets are searched for, not counted
    assert parse_line(b'{"t":"x","s":"' + b"[{" * 50_000 + b'"}')["t"] == "x"
    with pytest.raises(ProtocolError):
        parse_line(b'{"t":"x","s":"' + b"x" * 50_000 + b'","v":' + b"[" * 90 + b"]" * 90
                   + b"}")


def test_numbers_json_cannot_carry_are_bad_frame_and_never_written():
    """1e999 read as an infinity was written back as ``Infinity`` (found by bench/fuzz.py)."""
    for raw in (b'{"t":"x","n":1e999}', b'{"t":"x","n":-1e400}', b'{"t":"x","n":NaN}',
                b'{"t":" ","":[1e309,"\\ud800"]}'):
        with pytest.raises(ProtocolError) as e:
            parse_line(raw)
        assert e.value.code == BAD_FRAME
    assert parse_line(b'{"t":"x","n":1e308,"m":-0.0}')["n"] == 1e308
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError):  # nothing signed holds one
            canonical_json({"n": bad})
    # the local API's answers may hold one stored by an older version: never a failure
    assert compact_json({"n": float("nan")}) == '{"n":NaN}'


def test_ack_line_is_the_ack_dumped():
    """Written straight for speed, it must be byte for byte what dump writes,
    whatever the peer put in th and re."""
    from awp.wire.messages import ack, ack_line, dump

    for th, re in [("thr_abcdefgh", "01KBD0000000000000000000AB"), ("", "x"),
                   ('a"b\\c\u00e9\u2028\x01\x1f', "\U0001f600 \ufffd /</script>")]:
        kw = {"id": "01KBD0000000000000000000AB", "ts": "2026-12-01T19:00:00.000Z"}
        assert ack_line(th, re, **kw) == dump(ack(th, re, **kw))
        assert parse_line(ack_line(th, re, **kw)[:-1])["re"] == re


def test_a_runs_acks_are_its_lines_acks_one_by_one():
    from awp.wire.messages import ack_line, ack_lines

    acks = [("thr_abcdefgh", "01KBD0000000000000000000AB"), ("", "x"),
            ('a"b\\c\u00e9\u2028\x01', "\U0001f600 /</script>"), ("thr_abcdefgh", "y")]
    ids = [f"01KBD00000000000000000{n:04d}" for n in range(len(acks))]
    ts = "2026-12-01T19:00:00.000Z"
    assert ack_lines(acks, ids, ts) == b"".join(
        ack_line(th, re, id=i, ts=ts) for (th, re), i in zip(acks, ids, strict=True))


def test_an_ack_as_we_write_it_parses_as_json_would():
    """The short way for plain acks gives json's dict; anything else about an
    ack (escapes, other order, extra fields, bad types) takes the full way."""
    from awp.wire.messages import ack_line

    plain = ack_line("thr_abc-d_e", "01KBD0000000000000000000AB",
                     id="01KBD0000000000000000000AC", ts="2026-12-01T19:00:00.000Z")[:-1]
    assert parse_line(plain) == json.loads(plain)
    assert list(parse_line(plain)) == list(json.loads(plain))
    others = [
        ack_line("thr_\u00e9", "x", id="1", ts="2026-12-01T19:00:00.000Z")[:-1],
        b'{"t":"ack","id":"1","ts":"t","th":"a\\u0041","re":"x"}',
        b'{"t":"ack","th":"a","re":"x","id":"1","ts":"t"}',
        b'{"t":"ack","id":"1","ts":"t","th":"a","re":"x","more":[1,2]}',
        b'{"t":"ack","id":"1","ts":"t","th":"a","re":"x"} ',
    ]
    for raw in others:
        assert parse_line(raw) == json.loads(raw)
    with pytest.raises(ProtocolError):
        parse_line(b'{"t":"ack","id":"1","ts":"t","th":"a","re":"x"}}')
    with pytest.raises(ProtocolError):
        parse_line(b'{"t":"ack","id":1,"ts":"t","th":"a","re":"x"}')
