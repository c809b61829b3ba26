"""Editing JSON-with-comments files in place: only what changes is rewritten."""

from __future__ import annotations

import json

import pytest

from awp.harness import jsonc

AWP = {"command": "awp", "args": ["mcp"]}


def roundtrip(text: str, change) -> str:
    """Apply ``change`` to the data, edit, check, then undo and expect the text back."""
    data = jsonc.loads(text)
    new = json.loads(json.dumps(data))
    change(new)
    out = jsonc.edit(text, new)
    assert jsonc.loads(out) == new
    assert jsonc.edit(out, data) == text
    return out


def test_parse_comments_trailing_commas_and_tricky_strings() -> None:
    text = '{"a": "// not a comment", /* c */ "b": "/* nor this */", "c": [1, 2,],}'
    assert jsonc.loads(text) == {"a": "// not a comment", "b": "/* nor this */", "c": [1, 2]}
    for bad in ('{"a": 1', '{"a" 1}', '{"a": 1} x', '/* open', '{"a": tru}'):
        with pytest.raises(jsonc.EditError):
            jsonc.loads(bad)


def test_add_to_a_multiline_object_keeps_comments_and_indentation() -> None:
    text = '{\n\t// mine\n\t"theme": "x" // trailing\n}\n'
    out = roundtrip(text, lambda d: d.setdefault("mcpServers", {"awp": AWP}))
    assert out.startswith('{\n\t// mine\n\t"theme": "x", // trailing\n\t"mcpServers": {\n\t\t"awp"')


def test_add_with_trailing_comma_style() -> None:
    text = '{\n  "a": 1,\n}\n'
    out = roundtrip(text, lambda d: d.update(b=2))
    assert out == '{\n  "a": 1,\n  "b": 2,\n}\n'


def test_add_to_single_line_and_empty_containers() -> None:
    assert roundtrip('{"a": 1}', lambda d: d.update(b=[2])) == '{"a": 1, "b": [2]}'
    out = roundtrip('{\n  "servers": {}\n}\n', lambda d: d["servers"].update(awp=1))
    assert out == '{\n  "servers": {\n    "awp": 1\n  }\n}\n'
    assert jsonc.loads(roundtrip("{}", lambda d: d.update(a=1))) == {"a": 1}


def test_array_items_inserted_replaced_and_removed() -> None:
    text = '[\n  {"m": "x"}, // theirs\n  {"m": "ours", "h": [1]}\n]'
    out = roundtrip(text, lambda d: d[1].update(h=[2]))
    assert '{"m": "x"}, // theirs' in out
    out = roundtrip(text, lambda d: d.insert(1, {"m": "new"}))
    assert '{"m": "x"}, // theirs' in out
    out = jsonc.edit(text, [{"m": "x"}])
    assert out == '[\n  {"m": "x"} // theirs\n]'


def test_replace_a_scalar_value() -> None:
    assert roundtrip('{"a": /* c */ 1}', lambda d: d.update(a="two")) == '{"a": /* c */ "two"}'


def test_edit_refuses_what_it_cannot_do_faithfully() -> None:
    with pytest.raises(jsonc.EditError):
        jsonc.edit('{"a": 1}', {"b": 1})  # one member out, another in
    with pytest.raises(jsonc.EditError):
        jsonc.edit('{"a": 1, "a": 2}', {"a": 3})  # a duplicate key


def test_crlf_files_get_crlf_lines() -> None:
    text = '{\r\n  "a": 1\r\n}\r\n'
    out = roundtrip(text, lambda d: d.update(b={"c": [1]}))
    assert "\n" not in out.replace("\r\n", "")
    assert out.startswith('{\r\n  "a": 1,\r\n  "b": {\r\n')
