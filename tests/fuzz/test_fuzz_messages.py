"""Fuzz envelope parsing: every line is an envelope or a bad_frame, nothing else."""

from __future__ import annotations

import json

from fuzzgen import deep_text, dumps, envelopes, lines
from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.canonical import compact_json
from awp.wire.errors import BAD_FRAME, ProtocolError
from awp.wire.messages import (
    _REQUIRED,
    _STR_FIELDS,
    MAX_DEPTH,
    depth_over,
    dump,
    parse_line,
    storable,
)


def _check_envelope(obj: dict) -> None:
    """What parse_line promises about anything it accepts."""
    assert isinstance(obj, dict)
    assert isinstance(obj["t"], str) and obj["t"]
    for f in _STR_FIELDS:
        assert obj.get(f) is None or isinstance(obj[f], str)
    for f in _REQUIRED.get(obj["t"], ()):
        assert isinstance(obj.get(f), str) and obj[f]
    assert not depth_over(obj, MAX_DEPTH + (obj["t"] == "mirror"))
    # whatever was accepted can be written out again (no lone surrogates left)
    assert dump(obj).endswith(b"\n")


@given(lines)
@example(b'{"t":"x","s":"\\ud800"}')  # the live fuzzer's find: kept raw, it broke the inbox
@example(b'{"t":"x","\\udc00":"\\ud83d\\ude00\\ud83d"}')
@example(b'{"t":"mirror","line":' + deep_text(MAX_DEPTH).encode() + b"}")
@example(b'{"t":"x","v":' + deep_text(990).encode() + b"}")  # once decoded, then crashed later
@example(b'{"t":"x","n":1e999}')
@example(b'{"t":"x","n":NaN}')
@example(b'{"t":" ","":[1e309,"\\ud800"]}')  # bench/fuzz.py: kept as "Infinity", unreadable
def test_any_line_is_an_envelope_or_bad_frame(raw):
    try:
        obj = parse_line(raw)
    except ProtocolError as e:
        assert e.code == BAD_FRAME and e.closes
        return
    _check_envelope(obj)
    # what is kept of it reads back as the same envelope and can be written as UTF-8
    kept = storable(raw, obj)
    assert parse_line(kept) == obj
    compact_json(json.loads(kept)).encode("utf-8")


@given(envelopes())
def test_valid_envelopes_round_trip(obj):
    raw = dumps(obj)
    try:
        parsed = parse_line(raw)
    except ProtocolError:
        return
    _check_envelope(parsed)
    if "\\ud" not in json.dumps(obj).lower():  # no surrogate to replace
        assert parsed == obj
    assert parse_line(dump(parsed)[:-1]) == parsed


@given(st.integers(1, 2000), st.sampled_from(["x", "mirror", "msg"]))
def test_depth_decides_exactly(depth, t):
    extra = ',"id":"1","th":"t"'
    raw = ('{"t":"' + t + '"' + extra + ',"v":' + deep_text(depth - 1) + "}").encode() \
        if depth > 1 else ('{"t":"' + t + '"' + extra + "}").encode()
    allowed = MAX_DEPTH + (t == "mirror")
    try:
        parse_line(raw)
        assert depth <= allowed
    except ProtocolError as e:
        assert depth > allowed and "nested deeper" in e.detail
