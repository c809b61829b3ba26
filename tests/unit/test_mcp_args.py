"""MCP tool arguments are checked against each tool's declared inputSchema."""

from __future__ import annotations

import pytest

from awp.mcp import argcheck, tools


def _ctx() -> tools.Context:
    def client(timeout: float | None) -> object:
        raise AssertionError("bad arguments must be refused before the daemon is asked")

    return tools.Context(client=client, cancelled=lambda: False)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "args", "why"), [
    ("awp_state", {"thread": "thr_x", "state": "banana"}, "state: unknown value 'banana'"),
    ("awp_state", {"thread": "thr_x", "state": 3}, "state must be a string"),
    ("awp_grant", {"peer": "bob", "caps": ["root"]}, "caps: unknown value 'root'"),
    ("awp_grant", {"peer": "bob", "caps": [1]}, "caps must be a list of strings"),
    ("awp_grant", {"peer": "bob", "caps": "exec"}, "caps must be a list of strings"),
    ("awp_read", {"wait_seconds": -1}, "between 0 and 600"),
    ("awp_read", {"wait_seconds": True}, "wait_seconds must be a number"),
    ("awp_read", {"until_state": [1]}, "until_state must be a list of strings"),
    ("awp_send", {"peer": "bob", "data": [1]}, "data must be an object"),
    ("awp_send", {"peer": "bob", "text": "x", "bogus": 1}, "unknown argument 'bogus'"),
    ("awp_listen", {"x": 1}, "takes: no arguments"),
    ("awp_connect", {"address": ""}, "address is required"),
])
def test_schema_violations_are_refused(name: str, args: dict, why: str) -> None:
    with pytest.raises(tools.ToolError, match=why.replace("[", r"\[")):
        tools.call(name, args, _ctx())


def test_every_state_in_the_enum_passes_the_check() -> None:
    schema = tools.BY_NAME["awp_state"].schema
    for word in tools.STATES:
        argcheck.check_object({"thread": "thr_x", "state": word}, schema)


def test_every_schema_keyword_is_enforced() -> None:
    """A schema must not promise more than the checker enforces."""
    for tool in tools.TOOLS:
        assert argcheck.unsupported(tool.schema) == [], tool.name


def test_nested_and_other_keywords() -> None:
    schema = {"type": "object", "properties": {
        "o": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
              "required": ["n"], "additionalProperties": False},
        "s": {"type": "string", "minLength": 2, "maxLength": 3},
        "u": {"type": ["string", "null"]},
    }, "additionalProperties": {"type": "boolean"}}
    argcheck.check_object({"o": {"n": 2}, "s": "abc", "u": None, "flag": True}, schema)
    for args, why in [({"o": {"n": 0}}, "o.n must be at least 1"),
                      ({"o": {"n": 1.5}}, "o.n must be an integer"),
                      ({"o": {}}, "o.n is required"),
                      ({"o": {"n": 1, "m": 2}}, "unknown argument 'o.m'"),
                      ({"s": "a"}, "at least 2 characters"),
                      ({"s": "abcd"}, "at most 3 characters"),
                      ({"u": 1}, "u must be a string or a null"),
                      ({"flag": "yes"}, "flag must be a boolean")]:
        with pytest.raises(argcheck.ArgumentError, match=why):
            argcheck.check_object(args, schema)


def test_channel_meta_leaves_source_to_the_harness() -> None:
    from awp.mcp.server import channel_notification

    rec = {"t": "msg", "id": "01M0", "th": "thr_a", "peer": "ed25519:x", "peer_name": "bob",
           "dir": "in", "line": {"t": "msg", "parts": [{"k": "text", "text": "hi"}]}}
    meta = channel_notification([rec])["params"]["meta"]
    assert "source" not in meta
    assert meta["from"] == "bob" and meta["thread"] == "thr_a"
