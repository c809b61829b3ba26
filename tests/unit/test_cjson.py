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


SHARED = [1, {"z": 2}]  # one list twice: no circle


@pytest.mark.parametrize("doc", [*DOCS, {1: "a", 2.5: [{"x": {}}, []], None: True, False: [1, {"y": ()}]},
                                 ({"deep": [{"a": [1, [2, [3]]]}]},), {"x": SHARED, "y": SHARED}])
def test_indented_is_json_dumps_indent_2(doc):
    assert cjson.indented(doc) == json.dumps(doc, indent=2, ensure_ascii=False)
    assert cjson.indented(doc, indent=4, ensure_ascii=True) == json.dumps(doc, indent=4)


def test_indented_refuses_what_json_refuses():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        cjson.indented({"a": loop})
    with pytest.raises(TypeError):
        cjson.indented({"a": object()})
    with pytest.raises(TypeError):
        cjson.indented({(1, 2): "tuple key"})


@pytest.mark.parametrize("bad", ["", " ", "{", "[1,]", '{"a":1} x', "nul", '"\x01"',
                                 "\ufeff{}", b"\xff", "{not json at all", '{"a": [1, }'])
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


def test_broken_input_without_the_json_package_loaded():
    """_json needs json.decoder to describe some errors; cjson must still say ValueError."""
    import subprocess
    import sys

    code = ("from awp.localapi import cjson\n"
            "for bad in ('{not json', '{\"a\": [1, }', '[1, 2'):\n"
            "    try:\n        cjson.loads(bad)\n    except ValueError:\n        pass\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": __file__.rsplit("/tests/", 1)[0]}, timeout=30)
    assert p.stdout == "ok\n", p.stderr
