"""Harness identity, bootstrap's JSON and hook-list helpers, the embedded plugin."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from awp.harness import bootstrap as bs
from awp.harness import configfiles as cf
from awp.harness import plugin_files
from awp.harness.identity import HARNESSES, detect, explicit, normalize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = os.path.join(ROOT, "plugin", "awp")


# -- identity ---------------------------------------------------------------------------

def test_normalize() -> None:
    assert normalize("claude-code") == "claude"
    assert normalize("Gemini-CLI") == "gemini"
    assert normalize("codex") == "codex"
    assert normalize("cursor-agent") == "cursor"
    assert normalize("github-copilot") == "copilot"
    assert normalize("claude-code/2.1.3") == "claude"
    assert normalize("vim") is None
    assert normalize("") is None and normalize(None) is None
    assert all(normalize(h) == h for h in HARNESSES)


def test_detect_ai_agent_first() -> None:
    assert detect({"AI_AGENT": "gemini-cli", "CLAUDECODE": "1"}) == "gemini"
    # An unknown AI_AGENT falls through to the markers.
    assert detect({"AI_AGENT": "something-else", "CLAUDECODE": "1"}) == "claude"


def test_detect_marker_order() -> None:
    # The ones most often found wrapping others come last.
    assert detect({"CLAUDECODE": "1", "CODEX_SANDBOX": "seatbelt"}) == "codex"
    assert detect({"CLAUDECODE": "1", "OPENCODE": "1"}) == "opencode"
    assert detect({"OPENCODE": "1", "CURSOR_AGENT": "1"}) == "cursor"
    assert detect({"PI_CODING_AGENT": "1", "CLAUDECODE": "1"}) == "pi"
    assert detect({"COPILOT_CLI": "1", "OPENCODE": "1"}) == "copilot"
    assert detect({"GEMINI_CLI": "1", "COPILOT_CLI": "1"}) == "gemini"
    assert detect({"CODEX_THREAD_ID": "t"}) == "codex"
    assert detect({"CLAUDECODE": ""}) == ""
    assert detect({}) == ""


def test_explicit() -> None:
    assert explicit("cursor", {"AWP_HARNESS": "codex"}) == "cursor"
    assert explicit(None, {"AWP_HARNESS": "codex"}) == "codex"
    assert explicit(None, {}) == ""
    with pytest.raises(ValueError, match="unknown harness"):
        explicit("emacs", {})
    with pytest.raises(ValueError, match="AWP_HARNESS"):
        explicit(None, {"AWP_HARNESS": "emacs"})


# -- JSON helpers ---------------------------------------------------------------------------

def test_strip_jsonc() -> None:
    text = '// top\n{\n  "a": "x // not a comment", /* block\n */ "b": [1, 2,],\n}\n'
    assert json.loads(cf.strip_jsonc(text)) == {"a": "x // not a comment", "b": [1, 2]}
    assert json.loads(cf.strip_jsonc('{"s": "a\\"b/*c*/"}')) == {"s": 'a"b/*c*/'}


def test_load_json_kinds(tmp_path) -> None:
    p = tmp_path / "c.json"
    assert not cf.load_json(str(p)).exists
    p.write_text('{"a": 1}')
    assert cf.load_json(str(p)).data == {"a": 1}
    p.write_text('{"a": 1, // c\n}')
    assert cf.load_json(str(p)).problem == "comments"
    p.write_text("{nope")
    assert cf.load_json(str(p)).problem == "invalid"
    p.write_text("[1]")
    assert cf.load_json(str(p)).problem == "invalid"
    p.write_text("")
    assert cf.load_json(str(p)).data == {}


def test_dump_json_keeps_indent_and_order() -> None:
    assert cf.dump_json({"b": 1, "a": 2}).startswith('{\n  "b": 1,\n  "a": 2')
    assert cf.dump_json({"b": 1}, '{\n    "x": 1\n}').startswith('{\n    "b"')
    assert cf.dump_json({"b": 1}, '{\n\t"x": 1\n}').startswith('{\n\t"b"')


def test_set_and_delete_prune() -> None:
    d: dict = {"z": 1}
    cf.set_at(d, ("mcp", "awp"), {"k": 1})
    assert list(d) == ["z", "mcp"]
    cf.delete_at(d, ("mcp", "awp"))
    assert d == {"z": 1}
    d = {"mcp": {"other": 1, "awp": 2}}
    cf.delete_at(d, ("mcp", "awp"))
    assert d == {"mcp": {"other": 1}}


def test_is_our_hook() -> None:
    assert cf.is_our_hook("/usr/local/bin/awp hook inbox --format cursor")
    assert cf.is_our_hook("'/home/me/my tools/awp' hook stop")
    assert cf.is_our_hook('"${CLAUDE_PLUGIN_ROOT}/bin/awp" hook session-start')
    assert cf.is_our_hook("/venv/bin/python -m awp hook inbox --format gemini")
    assert cf.is_our_hook("/usr/bin/awp2 hook stop --format cursor")
    assert cf.is_our_hook("awp-dev hook inbox")
    assert not cf.is_our_hook("awp send bob hi")
    assert not cf.is_our_hook("./format.sh")
    assert not cf.is_our_hook(None)


def test_flat_hooks_keep_place_and_others() -> None:
    hooks = {"stop": [{"command": "mine.sh"}, {"command": "/old/awp hook stop"},
                      {"command": "other.sh"}]}
    cf.put_flat_hook(hooks, "stop", {"command": "/new/awp hook stop --format cursor"})
    assert [e["command"] for e in hooks["stop"]] == [
        "mine.sh", "/new/awp hook stop --format cursor", "other.sh"]
    cf.put_flat_hook(hooks, "postToolUse", {"command": "/new/awp hook inbox"})
    assert hooks["postToolUse"] == [{"command": "/new/awp hook inbox"}]
    cf.drop_flat_hooks(hooks, "stop")
    cf.drop_flat_hooks(hooks, "postToolUse")
    assert hooks == {"stop": [{"command": "mine.sh"}, {"command": "other.sh"}]}


def test_nested_hooks() -> None:
    theirs = {"matcher": "write_file", "hooks": [{"type": "command", "command": "lint.sh"}]}
    mixed = {"matcher": "*", "hooks": [{"type": "command", "command": "log.sh"},
                                       {"type": "command", "command": "awp hook inbox"}]}
    hooks = {"AfterTool": [theirs, mixed]}
    ours = {"matcher": "*", "hooks": [{"type": "command", "command": "/b/awp hook inbox"}]}
    cf.put_nested_hook(hooks, "AfterTool", ours)
    assert hooks["AfterTool"] == [
        theirs, ours, {"matcher": "*", "hooks": [{"type": "command", "command": "log.sh"}]}]
    cf.put_nested_hook(hooks, "AfterTool", ours)  # idempotent
    assert hooks["AfterTool"].count(ours) == 1 and len(hooks["AfterTool"]) == 3
    cf.drop_nested_hooks(hooks, "AfterTool")
    assert hooks["AfterTool"] == [
        theirs, {"matcher": "*", "hooks": [{"type": "command", "command": "log.sh"}]}]
    only = {"SessionStart": [{"hooks": [{"type": "command", "command": "awp hook session-start"}]}]}
    cf.drop_nested_hooks(only, "SessionStart")
    assert only == {}


def test_parse_list() -> None:
    assert bs.parse_list("claude, codex,claude-code") == ["claude", "codex"]
    with pytest.raises(ValueError, match="unknown harness"):
        bs.parse_list("claude,emacs")
    with pytest.raises(ValueError):
        bs.parse_list(" , ")


# -- the plugin ---------------------------------------------------------------------------

def test_embedded_plugin_matches_the_repository() -> None:
    """plugin_data.py is generated from plugin/awp/: regenerate it after editing the tree
    (python -m awp.harness.plugin_files)."""
    assert plugin_files.read_tree(PLUGIN) == plugin_files.files()


def test_plugin_layout() -> None:
    tree = plugin_files.files()
    for rel in ("skills/awp/SKILL.md", "plugin.json", ".claude-plugin/plugin.json",
                ".mcp.json", "mcp.json", "com.anthropic.claude-code/hooks.json", "bin/awp"):
        assert rel in tree, rel
    assert tree["bin/awp"][0] == 0o755
    hooks = json.loads(tree["com.anthropic.claude-code/hooks.json"][1])["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"}
    assert hooks["PostToolUse"][0]["matcher"] == "*"
    cmd = hooks["PostToolUse"][0]["hooks"][0]
    assert cmd == {"type": "command", "command": '"${CLAUDE_PLUGIN_ROOT}/bin/awp" hook inbox',
                   "timeout": 10}
    assert hooks["Stop"][0]["hooks"][0]["command"].endswith(" hook stop")
    assert hooks["SessionStart"][0]["hooks"][0]["command"].endswith(" hook session-start")
    mcp = json.loads(tree[".mcp.json"][1])["mcpServers"]["awp"]
    assert mcp["args"] == ["mcp", "--harness", "claude"]
    for rel in ("plugin.json", ".claude-plugin/plugin.json", "mcp.json"):
        assert json.loads(tree[rel][1])
    # Claude Code reads the plugin root's .mcp.json by itself: naming the
    # default location again in the manifest only repeats it.
    manifest = json.loads(tree[".claude-plugin/plugin.json"][1])
    assert manifest.get("mcpServers") not in ("./.mcp.json", ".mcp.json")
    skill = tree["skills/awp/SKILL.md"][1]
    assert skill.startswith("---\nname: awp\ndescription: ")
    flat = " ".join(skill.split())
    for topic in ("untrusted", "waiting", "awp read", "--subject", "awp tail --once",
                  "awp wait", "explicitly agrees", "awp model", "Read before you reply"):
        assert topic in flat, topic


def test_wiring_the_binary() -> None:
    tree = plugin_files.plugin_tree(["/opt/awp bin/awp"])
    assert "\nWIRED='/opt/awp bin/awp'\n" in tree["bin/awp"][1]
    assert plugin_files.OPENCODE_PLUGIN not in tree
    tree = plugin_files.plugin_tree(["/venv/bin/python3", "-I", "-m", "awp"])
    assert "\nWIRED_PY=/venv/bin/python3\n" in tree["bin/awp"][1]
    js = plugin_files.opencode_plugin(["/opt/awp"])
    assert 'const WIRED = ["/opt/awp"];' in js


def _launcher(tmp_path, wired: str | None, env: dict, *args: str):
    text = plugin_files.plugin_tree([wired] if wired else None)["bin/awp"][1]
    path = tmp_path / "plugin" / "bin" / "awp"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return subprocess.run([str(path), *args], capture_output=True, text=True, env=env,
                          timeout=30)


def test_launcher_runs_the_wired_awp(tmp_path) -> None:
    fake = tmp_path / "real-awp"
    fake.write_text('#!/bin/sh\necho "real awp: $*"\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    p = _launcher(tmp_path, str(fake), env, "hook", "inbox")
    assert p.stdout == "real awp: hook inbox\n"
    # AWP_BIN wins over the wired one.
    other = tmp_path / "other-awp"
    other.write_text('#!/bin/sh\necho "other: $*"\n')
    other.chmod(0o755)
    p = _launcher(tmp_path, str(fake), {**env, "AWP_BIN": str(other)}, "mcp")
    assert p.stdout == "other: mcp\n"


def test_launcher_skips_itself_on_path_and_hooks_stay_quiet(tmp_path) -> None:
    env = {"PATH": f"{tmp_path / 'plugin' / 'bin'}:/nonexistent", "HOME": str(tmp_path)}
    p = _launcher(tmp_path, None, env, "hook", "inbox")
    assert (p.returncode, p.stdout) == (0, "")
    p = _launcher(tmp_path, None, env, "status")
    assert p.returncode == 127 and "cannot find the awp program" in p.stderr
    home_bin = tmp_path / ".local" / "bin"
    home_bin.mkdir(parents=True)
    (home_bin / "awp").write_text('#!/bin/sh\necho "home awp: $*"\n')
    (home_bin / "awp").chmod(0o755)
    p = _launcher(tmp_path, None, env, "status")
    assert p.stdout == "home awp: status\n"
