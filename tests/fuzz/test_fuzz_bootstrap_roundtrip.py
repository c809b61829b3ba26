"""Install then uninstall gives back the user's config byte for byte.

The user's Gemini ``settings.json`` and Cursor ``hooks.json`` are generated
with what real files have: comments (line and block), trailing commas, arrays
and objects on one line, odd indentation, hooks and MCP servers of their own.
``awp bootstrap`` for that harness, then ``--uninstall``, must leave the file
as it was, bytes and all, and no ``*.awp-backup`` behind.  (Issue 22, items 9
and 10: removing the last two members of an object made overlapping edits,
so such a file kept our entries.)
"""

from __future__ import annotations

import json
import os
import tempfile
import zlib

from hypothesis import example, given
from hypothesis import strategies as st

from awp.harness import jsonc
from awp.harness.bootstrap import BACKUP_SUFFIX, Bootstrap

BIN = "/opt/awp/bin/awp"

keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=8)
scalars = st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(),
                    st.text(alphabet="abc xyz/.-", max_size=10))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)), max_leaves=6)


@st.composite
def styles(draw, comments: bool, trailing: bool) -> dict:
    return {"unit": draw(st.sampled_from(["  ", "    ", "\t"])),
            "comments": comments and draw(st.booleans()),
            "trailing": trailing and draw(st.booleans()),
            "inline": draw(st.floats(0, 1)), "seed": draw(st.integers(0, 2**16)),
            "crlf": draw(st.booleans())}


def _h(*parts) -> int:
    """A hash that is the same in every process (str's hash is not)."""
    return zlib.crc32(repr(parts).encode())


def render(value, style: dict, depth: int = 0, path: tuple = ()) -> str:
    """``value`` as a user might have written it (deterministic in ``style``)."""
    h = _h(style["seed"], path) % 1000 / 1000
    if not isinstance(value, dict | list) or not value:
        return json.dumps(value)
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    opn, cls = ("{", "}") if isinstance(value, dict) else ("[", "]")

    def one(k, v) -> str:
        head = f"{json.dumps(k)}: " if isinstance(value, dict) else ""
        return head + render(v, style, depth + 1, (*path, k))

    if h < style["inline"]:  # on one line
        body = ", ".join(one(k, v) for k, v in items)
        if style["trailing"] and h < style["inline"] / 2:
            body += ","
        return f"{opn}{body}{cls}"
    ind = style["unit"] * (depth + 1)
    lines = []
    for i, (k, v) in enumerate(items):
        if style["comments"] and _h(style["seed"], path, i) % 3 == 0:
            lines.append(f"{ind}// about {k}")
        last = i == len(items) - 1
        comma = "," if not last or style["trailing"] else ""
        tail = " /* mine */" if style["comments"] and _h(style["seed"], path, i) % 4 == 1 \
            else ""
        lines.append(f"{ind}{one(k, v)}{comma}{tail}")
    return opn + "\n" + "\n".join(lines) + "\n" + style["unit"] * depth + cls


def gemini_settings():
    hook = st.fixed_dictionaries({"type": st.just("command"),
                                  "command": st.sampled_from(["lint.sh", "fmt.sh"])})
    group = st.fixed_dictionaries({"matcher": st.sampled_from(["write_file", "*", "shell"]),
                                   "hooks": st.lists(hook, min_size=1, max_size=2)})
    events = st.dictionaries(st.sampled_from(["AfterTool", "BeforeAgent", "SessionStart",
                                              "BeforeTool"]),
                             st.lists(group, min_size=0, max_size=2), max_size=3)
    servers = st.dictionaries(st.sampled_from(["github", "files", "db"]),
                              st.fixed_dictionaries({"command": st.sampled_from(["gh", "x"])}),
                              max_size=2)
    return st.fixed_dictionaries({}, optional={
        "theme": st.sampled_from(["GitHub", "Dark"]), "mcpServers": servers, "hooks": events,
        "general": st.dictionaries(keys, values, max_size=3)})


def cursor_hooks():
    entry = st.fixed_dictionaries({"command": st.sampled_from(["./audit.sh", "./fmt.sh"])})
    table = st.dictionaries(st.sampled_from(["stop", "postToolUse", "beforeShellExecution",
                                             "sessionStart"]),
                            st.lists(entry, max_size=2), max_size=3)
    return st.fixed_dictionaries({"version": st.just(1)}, optional={"hooks": table})


def roundtrip(harness: str, rel: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as home:
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path))
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        b = Bootstrap(bin_path=BIN, home=home, env={"HOME": home, "PATH": "/nonexistent"})
        report = b.run([harness])
        assert not [s for s in report[0]["steps"] if s["status"] == "error"], report
        with open(path, encoding="utf-8", newline="") as f:
            installed = f.read()
        assert "awp" in json.dumps(jsonc.loads(installed)), installed
        report = b.run([harness], uninstall=True)
        assert not [s for s in report[0]["steps"] if s["status"] == "error"], report
        with open(path, "rb") as f:
            assert f.read() == text.encode("utf-8"), (text, installed)
        assert not os.path.exists(path + BACKUP_SUFFIX)


GEMINI_ONE_LINE = ('{\n  // mine\n  "theme": "GitHub",\n  "hooks": {"AfterTool": [{"matcher":'
                   ' "write_file", "hooks": [{"type": "command", "command": "lint.sh"}]}]}\n}\n')


@example(data={"theme": "GitHub"}, style={"unit": "  ", "comments": True, "trailing": False,
                                          "inline": 0.0, "seed": 1, "crlf": False})
@given(data=gemini_settings(), style=styles(comments=True, trailing=True))
def test_gemini_settings_come_back_byte_for_byte(data, style):
    text = render(data, style) + "\n"
    if style["crlf"]:
        text = text.replace("\n", "\r\n")
    assert jsonc.loads(text) == data
    roundtrip("gemini", ".gemini/settings.json", text)


@given(data=cursor_hooks(), style=styles(comments=False, trailing=False))
def test_cursor_hooks_come_back_byte_for_byte(data, style):
    text = render(data, style) + "\n"
    assert json.loads(text) == data
    roundtrip("cursor", ".cursor/hooks.json", text)


def test_a_one_line_hook_array_with_comments():
    roundtrip("gemini", ".gemini/settings.json", GEMINI_ONE_LINE)


def test_the_last_two_members_removed():
    assert jsonc.edit('{"A": 1, "B": 2, "C": 3}', {"A": 1}) == '{"A": 1}'
    assert jsonc.edit('{\n  "A": 1,\n  "B": 2, // b\n  "C": 3\n}', {"A": 1}) == '{\n  "A": 1\n}'
    assert jsonc.edit("[1, 2, 3, 4]", [1, 2]) == "[1, 2]"
