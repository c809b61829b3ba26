"""Canonical JSON (what grants and presence docs are signed over)."""

from __future__ import annotations

import json

import pytest

from awp.wire.canonical import canonical_bytes, canonical_json, compact_json


def reference(v: object) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


TRICKY_VALUES = [
    {},
    [],
    "",
    0,
    -1,
    1.5,
    True,
    False,
    None,
    {"b": 1, "a": 2, "c": {"z": [3, 2, 1], "y": None}},
    {"B": 1, "a": 2, "_": 3, "0": 4, "~": 5},
    {"é": 1, "z": 2, "e": 3, "ß": 4, "日本": 5, "😀": 6, "\ufb01": 7},
    {"q": 'say "hi" \\ back\\slash'},
    {"ctl": "".join(chr(i) for i in range(0x20))},
    {"del": "\x7f", "html": "<script>&amp;</script>", "ls": "\u2028\u2029"},
    {"nonascii": "café ☕ 😀 𝄞 \u00a0 \ufeff"},
    {"nested": [{"b": [], "a": {}}, [[], [{}]], "x"]},
    {"sig": "AAAA", "iss": "ed25519:x", "caps": ["exec", "fs:read"], "exp": "2026-09-25T17:03:11Z"},
    {"unknown": {"deep": {"deeper": [1, 2.25, -0.5, 10**20]}}},
    ["\u0000", "\u001f", "\u0020", "/", "\\/"],
]


@pytest.mark.parametrize("value", TRICKY_VALUES)
def test_equals_reference_json_dumps(value):
    assert canonical_json(value) == reference(value)
    assert canonical_bytes(value) == reference(value).encode("utf-8")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"', '"\\""'),
        ("\\", '"\\\\"'),
        ("\n", '"\\n"'),
        ("\t", '"\\t"'),
        ("\b", '"\\b"'),
        ("\f", '"\\f"'),
        ("\r", '"\\r"'),
        ("\x00", '"\\u0000"'),
        ("\x01", '"\\u0001"'),
        ("\x0b", '"\\u000b"'),  # lowercase hex
        ("\x1b", '"\\u001b"'),
        ("\x1f", '"\\u001f"'),
        (" ", '" "'),
        ("/", '"/"'),  # solidus not escaped
        ("\x7f", '"\x7f"'),  # DEL literal
        ("<>&", '"<>&"'),  # no HTML escaping
        ("\u2028", '"\u2028"'),
        ("\u2029", '"\u2029"'),
        ("é", '"é"'),
        ("😀", '"😀"'),
        ("a\u0001b", '"a\\u0001b"'),
    ],
)
def test_escaping_rules(text, expected):
    assert canonical_json(text) == expected
    assert canonical_json({"k": text}) == '{"k":' + expected + "}"


def test_no_uppercase_hex_escapes():
    out = canonical_json("".join(chr(i) for i in range(0x20)))
    assert "\\u000b" in out and "\\u000B" not in out
    assert "\\u001a" in out and "\\u001A" not in out


def test_only_expected_characters_escaped():
    # Everything from U+0020 upwards except '"' and '\' comes out literally.
    for cp in list(range(0x20, 0x300)) + [0x2028, 0x2029, 0xFEFF, 0xFFFD, 0x1F600]:
        c = chr(cp)
        if c in '"\\':
            continue
        assert canonical_json(c) == '"' + c + '"', hex(cp)


def test_non_ascii_bytes_are_utf8():
    assert canonical_bytes({"n": "é😀"}) == b'{"n":"\xc3\xa9\xf0\x9f\x98\x80"}'


def test_keys_sorted_by_code_point():
    assert canonical_json({"a": 1, "B": 2}) == '{"B":2,"a":1}'
    assert canonical_json({"é": 1, "z": 2}) == '{"z":2,"é":1}'
    assert canonical_json({"b": 1, "a": 2, "A": 3, "_": 4, "1": 5}) == (
        '{"1":5,"A":3,"_":4,"a":2,"b":1}'
    )
    assert canonical_json({"😀": 1, "\uffff": 2, "z": 3}) == '{"z":3,"\uffff":2,"😀":1}'


def test_nested_keys_sorted_too():
    assert canonical_json({"x": {"b": 1, "a": [{"d": 1, "c": 2}]}}) == (
        '{"x":{"a":[{"c":2,"d":1}],"b":1}}'
    )


def test_no_whitespace():
    out = canonical_json({"a": [1, 2, {"b": None}], "c": True})
    assert out == '{"a":[1,2,{"b":null}],"c":true}'


def test_compact_json_keeps_order_and_no_escaping():
    assert compact_json({"t": "msg", "a": "<é>&\u2028"}) == '{"t":"msg","a":"<é>&\u2028"}'
