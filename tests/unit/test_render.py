"""Rendering of records and tables for tail/read/wait, and CLI argv handling."""

from __future__ import annotations

import pytest

from awp.cli.app import fix_dash_peers
from awp.present.render import (
    ago,
    clip,
    lang_for,
    render_part,
    render_record,
    render_records,
    since,
    table,
    threads_table,
)

NOW = 1_700_000_000_000


def rec(dir_: str, t: str, line: dict, *, at: int = NOW - 120_000, peer_name: str = "bob",
        th: str = "thr_x4ii96t4", re: str = "") -> dict:
    return {"seq": 1, "dir": dir_, "t": t, "id": "01M3CCPH6QP57B7ZRNY8456ANB", "th": th,
            "re": re, "peer": "ed25519:AAAA", "peer_name": peer_name, "ts": at, "at": at,
            "read": False, "acked": True, "line": {"t": t, "th": th, **line}}


def test_inbound_msg_with_all_part_kinds():
    r = rec("in", "msg", {"subject": "Run the suite", "parts": [
        {"k": "text", "text": "Run make integration.\nSend failures."},
        {"k": "code", "lang": "diff", "text": "-a\n+b\n"},
        {"k": "data", "mime": "application/json", "data": {"repo": "acme/api", "n": 1}},
    ]})
    assert render_record(r, NOW) == "\n".join([
        '[2m ago] bob → you · thr_x4ii96t4 · "Run the suite"',
        "  Run make integration.",
        "  Send failures.",
        "  ```diff",
        "  -a",
        "  +b",
        "  ```",
        '  data application/json: {"repo":"acme/api","n":1}',
    ])


def test_outbound_msg_without_subject_and_reply():
    r = rec("out", "msg", {"parts": [{"k": "text", "text": "thanks"}]}, at=NOW - 5_000,
            re="01M3CCPH6QP57B7ZRNY8456ANA")
    assert render_record(r, NOW) == (
        "[5s ago] you → bob · thr_x4ii96t4 · re 01M3CCPH6QP57B7ZRNY8456ANA\n  thanks")


def test_states_in_and_out():
    r = rec("in", "state", {"state": "working", "note": "running the suite"})
    assert render_record(r, NOW) == "[2m ago] bob is now working in thr_x4ii96t4: running the suite"
    r = rec("out", "state", {"state": "done"}, at=NOW - 500)
    assert render_record(r, NOW) == "[just now] you are now done in thr_x4ii96t4 (told bob)"


def test_notice():
    r = rec("notice", "notice", {"kind": "bye", "text": "bob said bye: done"}, th="")
    assert render_record(r, NOW) == "[2m ago] · bob said bye: done"


def test_unknown_type_and_part_stay_visible():
    r = rec("in", "conformance-future", {"key": "ed25519:K"})
    out = render_record(r, NOW)
    assert out.splitlines()[0] == "[2m ago] bob → you · thr_x4ii96t4 · conformance-future"
    assert '"key":"ed25519:K"' in out
    assert render_part({"k": "weird", "x": 1}) == ['  [weird] {"x":1}']
    assert render_part({"k": "blob", "name": "build.log", "size": 12}) == [
        "  file build.log (12 bytes)"]


def test_code_fence_outgrows_backticks_inside():
    lines = render_part({"k": "code", "lang": "markdown", "text": "```py\nx\n```"})
    assert lines[0] == "  ````markdown" and lines[-1] == "  ````"


def test_blank_lines_in_text_are_not_padded():
    assert render_part({"k": "text", "text": "a\n\nb"}) == ["  a", "", "  b"]


def test_render_records_joins_blocks():
    rs = [rec("in", "state", {"state": "done"}), rec("notice", "notice", {"text": "x"})]
    assert render_records(rs, NOW).count("\n") == 1


@pytest.mark.parametrize("ms,expected", [
    (NOW, "just now"), (NOW - 47_000, "47s ago"), (NOW - 3 * 3600_000, "3h ago"),
    (None, "?"),
])
def test_ago(ms, expected):
    assert ago(ms, NOW) == expected


def test_since_and_clip():
    assert since("working", NOW - 2 * 3600_000, NOW) == "working 2h"
    assert since("open", 0, NOW) == "open"
    assert clip("a  b\nc", 50) == "a b c"
    assert clip("x" * 60, 50) == "x" * 49 + "…"
    assert clip("x" * 60, 0) == "x" * 60


def test_table_aligns_and_does_not_pad_last_column():
    assert table(["A", "LONGER"], [["xyz", 1], ["q", "two words"]]) == (
        "A    LONGER\nxyz  1\nq    two words")
    assert table(["A", "B", "C"], [["", "", ""], ["{0}", "x", "y "]]) == (
        "A    B  C\n\n{0}  x  y")  # empty rows stripped; cells are never format strings
    assert table(["ONLY"], [["x "], [2]]) == "ONLY\nx\n2"


def test_clip_folds_every_kind_of_whitespace():
    for text, folded in [("a\u00a0 b", "a b"), (" a", "a"), ("a ", "a"), ("a\u2028b", "a b"),
                         ("a\tb", "a b"), ("plain words", "plain words"), ("", "")]:
        assert clip(text, 0) == folded, text
    assert clip(None, 5) == "" and clip(42, 5) == "42"  # type: ignore[arg-type]


def test_threads_table_is_the_table_of_its_cells():
    """The 10,000-row layout gives what clip, since and table give cell by cell."""
    rows = [["thr_a", "bob", "working", NOW - 90_000, "open", NOW - 3 * 3600_000, 2,
             "fix  the\nbuild " + "x" * 60],
            ["thr_b", "bob", "done", 0, None, None, 0, None],
            ["thr_c", "carol " * 8, "open", NOW - 90_400, "waiting", NOW - 500, 0, "short"]]
    for width in (0, 50):
        expected = table(
            ["TH", "PEER", "MINE", "THEIRS", "UNREAD", "SUBJECT"],
            [[th, clip(name or "", 30), since(mine or "", ms1, NOW),
              since(theirs or "", ms2, NOW), unread, clip(subject or "", width)]
             for th, name, mine, ms1, theirs, ms2, unread, subject in rows])
        assert threads_table(rows, NOW, width) == expected
    lines = threads_table(rows, NOW, 50).splitlines()
    assert lines[1].split()[2:6] == ["working", "1m", "open", "3h"]
    assert lines[3].split()[-4:-1] == ["waiting", "0s", "0"]


@pytest.mark.parametrize("path,lang", [
    ("fix.py", "python"), ("a/b/x.diff", "diff"), ("p.patch", "diff"), ("x.yml", "yaml"),
    ("x.ts", "typescript"), ("x.rs", "rust"), ("x.rb", "ruby"), ("x.kt", "kt"),
    ("Makefile", ""), (".bashrc", ""),
])
def test_lang_for(path, lang):
    assert lang_for(path) == lang


SEND_OPTS = {"-s": True, "--subject": True, "-t": True, "--thread": True, "--to": True,
             "--json": False, "--home": True, "-n": True}


@pytest.mark.parametrize("args,expected", [
    # nothing to move: untouched
    (["w", "hello"], ["w", "hello"]),
    (["--bogus", "w"], ["--bogus", "w"]),
    (["-s", "-Subject-ish", "w", "x"], ["-s", "-Subject-ish", "w", "x"]),
    # a key prefix that starts with "-" becomes a positional; flags keep their meaning
    (["-Abc12", "hi", "--json"], ["--json", "--", "-Abc12", "hi"]),
    (["--subject", "S", "-Abc12", "hello", "world"],
     ["--subject", "S", "--", "-Abc12", "hello", "world"]),
    (["-Abc12", "--", "-x"], ["--", "-Abc12", "-x"]),
    # glued short-option values are options
    (["-n20", "-Abc12"], ["-n20", "--", "-Abc12"]),
    (["-tthr_abc12345", "-Abc12"], ["-tthr_abc12345", "--", "-Abc12"]),
    # too short to be a key prefix: left for click to judge
    (["-Ab", "x"], ["-Ab", "x"]),
])
def test_fix_dash_peers(args, expected):
    assert fix_dash_peers(args, SEND_OPTS) == expected


def test_introduction_says_how_to_connect():
    r = rec("in", "introduce", {"peer": {"key": "ed25519:AAAAAAAAAAAAAAAAAAAA", "name": "alice"},
                                "grant": {"caps": ["fs:read"]}})
    out = render_record(r, NOW)
    assert out.splitlines()[0].startswith("[2m ago] bob introduced alice (ed25519:AAAA")
    assert "with a grant for fs:read" in out
    assert out.splitlines()[1] == "  connect with: awp connect alice"


def test_request_marks_and_refusals():
    r = rec("in", "msg", {"parts": [{"k": "text", "text": "run it"}]})
    r["request"] = {"cap": "exec", "status": "forbidden"}
    assert "WITHOUT a grant" in render_record(r, NOW)
    r["request"] = {"cap": "fs:read", "status": "allowed"}
    assert "holds a grant" in render_record(r, NOW)
    e = rec("in", "err", {"code": "forbidden", "detail": "needs a grant"})
    e["re"] = "01ABC"
    assert render_record(e, NOW) == (
        "[2m ago] bob refused your message 01ABC in thr_x4ii96t4: forbidden: needs a grant")
