"""cjson (the _json accelerator alone) reads and writes what the json package does."""

import json

import pytest

from awp.localapi import cjson

DOCS = [
    {"a": [1, 2.5, None, True, False, "é\u2028x\n\"\\"], "b": {"c": -0.0, "d": 10 ** 30}},
    [], {}, "s", 1, 1.5, None, True, [float("inf"), float("-inf")], {"k": [[[]]]},
    {"emoji": "\U0001f600", "ctl": "\x01"},
]


@pytest.mark.parametrize("doc", DOCS)
def test_same_text_and_values_as_json(doc):
    assert cjson.dumps(doc) == json.dumps(doc)
    compact = dict(separators=(",", ":"), ensure_ascii=False)
    assert cjson.dumps(doc, **compact) == json.dumps(doc, **compact)
    text = json.dumps(doc)
    assert repr(cjson.loads(text)) == repr(json.loads(text))
    assert repr(cjson.loads(text.encode())) == repr(json.loads(text))


@pytest.mark.parametrize("bad", ["", " ", "{", "[1,]", '{"a":1} x', "nul", '"\x01"',
                                 "\ufeff{}", b"\xff"])
def test_what_json_refuses_is_a_value_error(bad):
    with pytest.raises(ValueError):
        cjson.loads(bad)


def test_whitespace_nan_and_unserialisable():
    assert cjson.loads(b' {"x": [1]} \n') == {"x": [1]}
    assert cjson.loads("NaN") != cjson.loads("NaN")
    with pytest.raises(TypeError):
        cjson.dumps({"a": object()})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        cjson.dumps(loop)
