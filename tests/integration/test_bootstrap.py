"""awp bootstrap against fake home directories, for all eight harnesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest
from nodes import ROOT

BIN = "/opt/awp tools/bin/awp"  # a space, to check the quoting
ALL = ["claude", "opencode", "codex", "cursor", "gemini", "copilot", "grok", "pi"]

FAKE_TOOL = r'''#!{python}
"""A stand-in for `{name} mcp add NAME -- CMD ARGS...` / `{name} mcp remove NAME`."""
import json, os, sys
home = os.environ["HOME"]
with open(os.path.join(home, ".fake-calls"), "a") as f:
    f.write(json.dumps(["{name}", *sys.argv[1:]]) + "\n")
args = sys.argv[1:]
name = "{name}"
path = {{"codex": ".codex/config.toml", "copilot": ".copilot/mcp-config.json",
         "grok": ".grok/user-settings.json"}}[name]
path = os.path.join(home, path)
os.makedirs(os.path.dirname(path), exist_ok=True)
if name == "codex":
    servers = {{}}
    if os.path.exists(path):
        import tomllib
        servers = tomllib.load(open(path, "rb")).get("mcp_servers", {{}})
else:
    data = json.load(open(path)) if os.path.exists(path) else {{}}
    servers = data.get("mcpServers", {{}})
if args[:2] == ["mcp", "add"]:
    cmd = args[args.index("--") + 1:]
    servers[args[2]] = {{"command": cmd[0], "args": cmd[1:]}}
elif args[:2] == ["mcp", "remove"]:
    if args[2] not in servers:
        sys.exit("no such server")
    del servers[args[2]]
else:
    sys.exit("unexpected arguments")
if name == "codex":
    with open(path, "w") as f:
        f.write('model = "gpt-5.1-codex"\n')
        for k, v in servers.items():
            f.write(f"\n[mcp_servers.{{k}}]\ncommand = {{json.dumps(v['command'])}}\n"
                    f"args = {{json.dumps(v['args'])}}\n")
else:
    data["mcpServers"] = servers
    json.dump(data, open(path, "w"), indent=2)
'''


def make_home(tmp_path, *, tools=("codex", "copilot", "grok")) -> tuple[str, str]:
    home = tmp_path / "home"
    for d in (".claude", ".config/opencode", ".codex", ".cursor", ".gemini", ".copilot",
              ".grok", ".pi"):
        (home / d).mkdir(parents=True)
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    for name in tools:
        p = fakebin / name
        p.write_text(FAKE_TOOL.format(python=sys.executable, name=name))
        p.chmod(0o755)
    return str(home), str(fakebin)


def write(home: str, rel: str, text: str) -> None:
    path = os.path.join(home, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(home: str, rel: str) -> str:
    with open(os.path.join(home, rel)) as f:
        return f.read()


def snapshot(home: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(home):
        for name in files:
            path = os.path.join(dirpath, name)
            if name == ".fake-calls":
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, home)] = f.read()
    return out


def calls(home: str) -> list[list[str]]:
    try:
        with open(os.path.join(home, ".fake-calls")) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def bootstrap(home: str, fakebin: str, *args: str, code: int = 0) -> str:
    env = {"HOME": home, "PATH": f"{fakebin}:/usr/bin:/bin",
           "PYTHONPATH": ROOT, "LANG": "C.UTF-8"}
    p = subprocess.run([sys.executable, "-m", "awp", "bootstrap", *args], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == code, (p.stdout, p.stderr)
    return p.stdout


ORIGINAL = {
    ".cursor/mcp.json": '{\n  "mcpServers": {\n    "github": {"command": "gh-mcp"}\n  },\n'
                        '  "zzz": 1\n}\n',
    ".cursor/hooks.json": '{\n  "version": 1,\n  "hooks": {\n    "stop": [\n'
                          '      {"command": "./audit.sh"}\n    ]\n  }\n}\n',
    ".gemini/settings.json": '{\n    "theme": "GitHub",\n    "mcpServers": {},\n'
                             '    "hooks": {"AfterTool": [{"matcher": "write_file", '
                             '"hooks": [{"type": "command", "command": "lint.sh"}]}]}\n}\n',
    ".config/opencode/opencode.json": '{\n  "$schema": "https://opencode.ai/config.json",\n'
                                      '  "theme": "tokyonight",\n  "model": "x/y"\n}\n',
}


def test_all_eight_harnesses(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    for rel, text in ORIGINAL.items():
        write(home, rel, text)
    before = snapshot(home)

    listing = json.loads(bootstrap(home, fakebin, "--list", "--json"))
    assert [r["harness"] for r in listing] == ALL
    assert all(r["detected"] and not r["installed"] for r in listing)

    # --dry-run shows the changes and changes nothing
    out = bootstrap(home, fakebin, "--dry-run", "--all", "--bin", BIN)
    assert "would create" in out and "dry run: nothing was changed" in out
    assert snapshot(home) == before and calls(home) == []

    out = bootstrap(home, fakebin, "--all", "--bin", BIN)
    assert "Restart your harness sessions" in out
    assert "the plugin built into awp " in out and "plugin/awp of its repository" in out
    after = snapshot(home)

    # Claude Code: the plugin, with the launcher wired to --bin
    plugin = ".claude/skills/awp/"
    for rel in ("skills/awp/SKILL.md", ".claude-plugin/plugin.json", ".mcp.json",
                "com.anthropic.claude-code/hooks.json", "bin/awp", "plugin.json", "mcp.json"):
        assert plugin + rel in after, rel
    assert f"\nWIRED='{BIN}'\n" in read(home, plugin + "bin/awp")
    assert os.access(os.path.join(home, plugin, "bin/awp"), os.X_OK)

    # skills everywhere
    for rel in (".config/opencode/skills/awp/SKILL.md", ".codex/skills/awp/SKILL.md",
                ".cursor/skills/awp/SKILL.md", ".gemini/skills/awp/SKILL.md",
                ".copilot/skills/awp/SKILL.md", ".grok/skills/awp/SKILL.md",
                ".pi/agent/skills/awp/SKILL.md"):
        assert read(home, rel).startswith("---\nname: awp\n"), rel

    # opencode: MCP server in opencode.json (key order kept) and the plugin
    oc = json.loads(read(home, ".config/opencode/opencode.json"))
    assert list(oc) == ["$schema", "theme", "model", "mcp"]
    assert oc["mcp"]["awp"] == {"type": "local", "command": [BIN, "mcp", "--harness", "opencode"],
                                "enabled": True}
    js = read(home, ".config/opencode/plugins/awp.js")
    assert f"const WIRED = {json.dumps([BIN])};" in js and "tool.execute.after" in js

    # Cursor: MCP server and hooks, others kept in place
    mcp = json.loads(read(home, ".cursor/mcp.json"))
    assert list(mcp) == ["mcpServers", "zzz"] and list(mcp["mcpServers"]) == ["github", "awp"]
    assert mcp["mcpServers"]["awp"] == {"command": BIN, "args": ["mcp", "--harness", "cursor"]}
    hooks = json.loads(read(home, ".cursor/hooks.json"))
    q = f"'{BIN}'"
    assert hooks["hooks"] == {
        "stop": [{"command": "./audit.sh"}, {"command": f"{q} hook stop --format cursor"}],
        "sessionStart": [{"command": f"{q} hook session-start --format cursor"}],
        "postToolUse": [{"command": f"{q} hook inbox --format cursor"}],
    }

    # Gemini CLI: MCP server and hooks in settings.json
    gem = json.loads(read(home, ".gemini/settings.json"))
    assert list(gem) == ["theme", "mcpServers", "hooks"]
    assert gem["mcpServers"]["awp"]["args"] == ["mcp", "--harness", "gemini"]
    assert list(gem["hooks"]) == ["AfterTool", "SessionStart", "BeforeAgent"]
    assert gem["hooks"]["AfterTool"][0]["matcher"] == "write_file"
    assert gem["hooks"]["AfterTool"][1]["matcher"] == "*"
    assert gem["hooks"]["AfterTool"][1]["hooks"][0]["command"] == f"{q} hook inbox --format gemini"
    assert gem["hooks"]["BeforeAgent"][0]["hooks"][0]["command"].endswith("hook inbox --format gemini")
    assert "Gemini CLI enables MCP servers only in folders you have trusted" in out

    # codex and grok: their own `mcp add`; Copilot CLI: its mcp-config.json
    assert calls(home) == [
        [h, "mcp", "add", "awp", "--", BIN, "mcp", "--harness", h] for h in ("codex", "grok")]
    assert json.loads(read(home, ".copilot/mcp-config.json")) == {"mcpServers": {"awp": {
        "type": "local", "command": BIN, "args": ["mcp", "--harness", "copilot"],
        "tools": ["*"]}}}
    with open(os.path.join(home, ".codex/config.toml"), "rb") as f:
        assert tomllib.load(f)["mcp_servers"]["awp"]["args"] == ["mcp", "--harness", "codex"]
    # Codex: its three hooks in ~/.codex/hooks.json, which it runs once the user trusts them
    codex = json.loads(read(home, ".codex/hooks.json"))
    assert list(codex) == ["hooks"]  # Codex refuses other top-level keys
    assert {e: [h["command"] for g in groups for h in g["hooks"]]
            for e, groups in codex["hooks"].items()} == {
        "SessionStart": [f"'{BIN}' hook session-start --format codex"],
        "PostToolUse": [f"'{BIN}' hook inbox --format codex"],
        "Stop": [f"'{BIN}' hook stop --format codex"]}
    assert "trust them" in out

    # a one-time backup of every config file changed, holding the original
    for rel, text in ORIGINAL.items():
        assert read(home, rel + ".awp-backup") == text

    listing = json.loads(bootstrap(home, fakebin, "--list", "--json"))
    assert all(r["installed"] for r in listing)
    parts = {r["harness"]: r["parts"] for r in listing}
    assert parts["cursor"] == {"skill": True, "mcp": True, "hooks": True}
    assert parts["pi"] == {"skill": True, "mcp": None, "hooks": None}

    # again: nothing changes, nothing runs
    out = bootstrap(home, fakebin, "--all", "--bin", BIN)
    assert "nothing to change" in out and "created" not in out and "updated" not in out
    assert snapshot(home) == after and len(calls(home)) == 2

    # a new binary: only the wiring changes, and the backups stay the first ones
    bootstrap(home, fakebin, "--all", "--bin", "/usr/bin/awp2")
    assert json.loads(read(home, ".cursor/mcp.json"))["mcpServers"]["awp"]["command"] == "/usr/bin/awp2"
    for rel, text in ORIGINAL.items():
        assert read(home, rel + ".awp-backup") == text
    assert calls(home)[-2:] == [["grok", "mcp", "remove", "awp"],
                                ["grok", "mcp", "add", "awp", "--", "/usr/bin/awp2", "mcp",
                                 "--harness", "grok"]]

    # uninstall: back to what was there, byte for byte, and the backups that
    # restore exactly are gone with our entries
    out = bootstrap(home, fakebin, "--uninstall", "--all")
    assert "removed" in out
    now = snapshot(home)
    for rel, text in ORIGINAL.items():
        assert now.pop(rel).decode() == text
        assert rel + ".awp-backup" not in now
    assert tomllib.loads(now.pop(".codex/config.toml").decode()).get("mcp_servers", {}) == {}
    # awp created Copilot's and Codex's hook file: nothing of the user's in them, no
    # backup made when the rewiring above changed them, and both gone again
    assert json.loads(now.pop(".grok/user-settings.json"))["mcpServers"] == {}
    assert now == {}
    assert not os.path.exists(os.path.join(home, ".claude/skills/awp"))
    assert json.loads(bootstrap(home, fakebin, "--list", "--json"))[0]["installed"] is False
    assert "no harnesses with awp installed" in bootstrap(home, fakebin, "--uninstall")


def test_opencode_config_with_comments(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    commented = '{\n  // my theme\n  "theme": "tokyonight",\n}\n'
    write(home, ".config/opencode/opencode.json", commented)
    out = bootstrap(home, fakebin, "--harness", "opencode", "--bin", BIN)
    assert "opencode.json has comments" in out
    assert read(home, ".config/opencode/opencode.json") == commented
    assert not os.path.exists(os.path.join(home, ".config/opencode/opencode.json.awp-backup"))
    jsonc = json.loads(read(home, ".config/opencode/opencode.jsonc"))
    assert jsonc["mcp"]["awp"]["command"][0] == BIN
    assert "unchanged" in bootstrap(home, fakebin, "--harness", "opencode", "--bin", BIN)
    bootstrap(home, fakebin, "--uninstall", "--harness", "opencode")
    assert read(home, ".config/opencode/opencode.json") == commented
    assert not os.path.exists(os.path.join(home, ".config/opencode/opencode.jsonc"))
    assert not os.path.exists(os.path.join(home, ".config/opencode/plugins"))


def test_opencode_jsonc_with_comments_is_left_alone(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    write(home, ".config/opencode/opencode.json", '{/* c */ "a": 1}')
    write(home, ".config/opencode/opencode.jsonc", '{"b": 2 // c\n}')
    out = bootstrap(home, fakebin, "--harness", "opencode", "--bin", BIN, code=1)
    assert "left it alone" in out
    assert read(home, ".config/opencode/opencode.jsonc") == '{"b": 2 // c\n}'


def test_a_config_it_cannot_parse_is_left_alone(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    write(home, ".gemini/settings.json", '{ "theme": "x", oops }')
    write(home, ".cursor/mcp.json", "not json at all")
    before = snapshot(home)
    out = bootstrap(home, fakebin, "--harness", "gemini,cursor", "--bin", BIN, code=1)
    assert "ERROR" in out and "cannot edit it: it is not valid JSON" in out
    assert "left it alone" in out
    now = snapshot(home)
    for rel in (".gemini/settings.json", ".cursor/mcp.json"):
        assert now[rel] == before[rel]
        assert rel + ".awp-backup" not in now
    # What could be installed was: the skills, and Cursor's hooks.
    assert ".cursor/hooks.json" in now and ".gemini/skills/awp/SKILL.md" in now
    # Uninstall leaves them alone too.
    bootstrap(home, fakebin, "--uninstall", "--harness", "gemini,cursor", code=1)
    assert snapshot(home)[".gemini/settings.json"] == before[".gemini/settings.json"]
    assert ".cursor/hooks.json" not in snapshot(home)


def test_mcp_add_runs_only_when_the_program_exists(tmp_path) -> None:
    home, fakebin = make_home(tmp_path, tools=())
    out = bootstrap(home, fakebin, "--harness", "codex,copilot,grok", "--bin", BIN)
    assert calls(home) == []
    assert out.count("skipped") == 2 and "codex is not on PATH: run this once it is" in out
    # Copilot CLI needs no program: its config file is written either way.
    assert json.loads(read(home, ".copilot/mcp-config.json"))["mcpServers"]["awp"]["tools"] == [
        "*"]
    assert "codex mcp add awp -- '/opt/awp tools/bin/awp' mcp --harness codex" in out
    assert os.path.exists(os.path.join(home, ".codex/skills/awp/SKILL.md"))


def test_without_flags_and_without_a_terminal_it_sets_up_what_it_finds(tmp_path) -> None:
    home, fakebin = make_home(tmp_path, tools=())
    for d in (".claude", ".config/opencode", ".codex", ".cursor", ".gemini", ".copilot",
              ".grok"):
        os.rmdir(os.path.join(home, d))
    os.rmdir(os.path.join(home, ".config"))
    out = bootstrap(home, fakebin, "--bin", BIN)  # only pi is there
    assert out.startswith("pi\n") and "Claude Code" not in out
    assert os.path.exists(os.path.join(home, ".pi/agent/skills/awp/SKILL.md"))
    out = bootstrap(home, fakebin, "--harness", "claude", "--dry-run", "--bin", BIN)
    assert "would create" in out and not os.path.exists(os.path.join(home, ".claude"))


def test_bad_harness_names(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    env = {"HOME": home, "PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT}
    p = subprocess.run([sys.executable, "-m", "awp", "bootstrap", "--harness", "claude,emacs"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and "unknown harness 'emacs'" in p.stderr


@pytest.mark.parametrize("harness", ALL)
def test_each_harness_alone(tmp_path, harness: str) -> None:
    home, fakebin = make_home(tmp_path)
    base = snapshot(home)
    bootstrap(home, fakebin, "--harness", harness, "--bin", BIN)
    rows = {r["harness"]: r for r in json.loads(bootstrap(home, fakebin, "--list", "--json"))}
    assert rows[harness]["installed"]
    assert [h for h, r in rows.items() if r["installed"]] == [harness]
    assert "nothing to change" in bootstrap(home, fakebin, "--harness", harness, "--bin", BIN)
    bootstrap(home, fakebin, "--uninstall", "--harness", harness)
    left = snapshot(home)
    if harness in ("codex", "copilot", "grok"):  # the fake tool's own config file stays
        left = {k: v for k, v in left.items() if not k.startswith(f".{harness}/")
                or "skills" in k}
    assert left == base


# -- issue 14: formats that moved on, and users' files kept as they are --------------------

COPILOT_MINE = ('{\n   "mcpServers": {\n      "github": {"type": "http", "url": "https://x/mcp",'
                ' "tools": ["*"]}\n   },\n   "other": [1,2,3]\n}\n')


def test_copilot_gets_its_config_file_not_a_command(tmp_path) -> None:
    """The Copilot CLI has no `copilot mcp add`; its servers live in mcp-config.json."""
    home, fakebin = make_home(tmp_path)  # a `copilot` on PATH that would record any call
    write(home, ".copilot/mcp-config.json", COPILOT_MINE)
    bootstrap(home, fakebin, "--harness", "copilot", "--bin", BIN)
    assert calls(home) == []
    text = read(home, ".copilot/mcp-config.json")
    data = json.loads(text)
    assert list(data["mcpServers"]) == ["github", "awp"]
    assert data["mcpServers"]["awp"] == {"type": "local", "command": BIN,
                                         "args": ["mcp", "--harness", "copilot"], "tools": ["*"]}
    # The user's lines are untouched (no re-indenting, no re-wrapping).
    for line in COPILOT_MINE.splitlines()[:3] + ['   "other": [1,2,3]']:
        assert line in text.splitlines() or line + "," in text.splitlines(), (line, text)
    rows = {r["harness"]: r for r in json.loads(bootstrap(home, fakebin, "--list", "--json"))}
    assert rows["copilot"]["parts"]["mcp"] is True
    assert "nothing to change" in bootstrap(home, fakebin, "--harness", "copilot", "--bin", BIN)
    bootstrap(home, fakebin, "--uninstall", "--harness", "copilot")
    assert read(home, ".copilot/mcp-config.json") == COPILOT_MINE
    assert calls(home) == []


@pytest.mark.parametrize("mine", ["", "\n", "  \n\n"])
def test_an_empty_config_comes_back_empty_and_leaves_no_backup(tmp_path, mine: str) -> None:
    """An empty (or blank) mcp-config.json round-trips byte for byte, and the backup made of
    it goes once the file is the user's again (issue 39.5; it came back as ``{}``)."""
    home, fakebin = make_home(tmp_path)
    write(home, ".copilot/mcp-config.json", mine)
    bootstrap(home, fakebin, "--harness", "copilot", "--bin", BIN)
    assert "awp" in json.loads(read(home, ".copilot/mcp-config.json"))["mcpServers"]
    bootstrap(home, fakebin, "--uninstall", "--harness", "copilot")
    assert read(home, ".copilot/mcp-config.json") == mine
    assert not os.path.exists(os.path.join(home, ".copilot/mcp-config.json.awp-backup"))


GEMINI_COMMENTED = """{
  // my editor theme
  "theme": "GitHub",      /* keep: the dark one hurts */
     "mcpServers": {
        "github": { "command": "gh-mcp" }  // work account
     },
  "hooks": {
    "AfterTool": [
      // lint after writes
      {"matcher": "write_file", "hooks": [{"type": "command", "command": "lint.sh"}]},
    ],
  },
}
"""


def test_gemini_settings_with_comments_are_edited_in_place(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    write(home, ".gemini/settings.json", GEMINI_COMMENTED)
    out = bootstrap(home, fakebin, "--harness", "gemini", "--bin", BIN)
    assert "ERROR" not in out, out
    text = read(home, ".gemini/settings.json")
    from awp.harness import jsonc

    data = jsonc.loads(text)
    assert data["mcpServers"]["awp"]["args"] == ["mcp", "--harness", "gemini"]
    assert data["mcpServers"]["github"] == {"command": "gh-mcp"}
    assert [g.get("matcher") for g in data["hooks"]["AfterTool"]] == ["write_file", "*"]
    assert set(data["hooks"]) == {"AfterTool", "SessionStart", "BeforeAgent"}
    # Every line of the user's file is still there, comments and indentation included.
    # (A comma may have been added after the value that was last in its object.)
    lines = [ln.replace(",", "") for ln in text.splitlines()]
    for line in GEMINI_COMMENTED.splitlines():
        assert line.replace(",", "") in lines, (line, text)
    assert read(home, ".gemini/settings.json.awp-backup") == GEMINI_COMMENTED
    rows = {r["harness"]: r for r in json.loads(bootstrap(home, fakebin, "--list", "--json"))}
    assert rows["gemini"]["parts"] == {"skill": True, "mcp": True, "hooks": True}
    assert "nothing to change" in bootstrap(home, fakebin, "--harness", "gemini", "--bin", BIN)
    bootstrap(home, fakebin, "--uninstall", "--harness", "gemini")
    assert read(home, ".gemini/settings.json") == GEMINI_COMMENTED


def test_an_otherwise_unchanged_file_keeps_its_formatting(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    mine = ('{\n\t"mcpServers": {\n\t\t"github": {"command": "gh-mcp", "args": ["--x"]}\n\t},'
            '\n\t"zzz": {"a": [1, 2],   "b": null}\n}\n')
    write(home, ".cursor/mcp.json", mine)
    bootstrap(home, fakebin, "--harness", "cursor", "--bin", BIN)
    text = read(home, ".cursor/mcp.json")
    assert '\t\t"github": {"command": "gh-mcp", "args": ["--x"]},' in text
    assert '\t"zzz": {"a": [1, 2],   "b": null}' in text
    assert json.loads(text)["mcpServers"]["awp"]["command"] == BIN
    bootstrap(home, fakebin, "--uninstall", "--harness", "cursor")
    assert read(home, ".cursor/mcp.json") == mine


def test_uninstall_keeps_empty_directories_the_user_had(tmp_path) -> None:
    home, fakebin = make_home(tmp_path)
    for d in (".codex/skills", ".config/opencode/plugins", ".claude/skills"):
        os.makedirs(os.path.join(home, d), exist_ok=True)
    bootstrap(home, fakebin, "--harness", "codex,opencode,claude,gemini", "--bin", BIN)
    bootstrap(home, fakebin, "--uninstall", "--harness", "codex,opencode,claude,gemini")
    for d in (".codex/skills", ".config/opencode/plugins", ".claude/skills"):
        assert os.path.isdir(os.path.join(home, d)), d
    # What awp created itself is gone again.
    assert not os.path.exists(os.path.join(home, ".gemini/skills"))
    assert not os.path.exists(os.path.join(home, ".codex/skills/awp"))
    assert not os.path.exists(os.path.join(home, ".gemini/.awp-dirs.json"))


def test_home_points_every_wired_command_at_that_awp_home(tmp_path) -> None:
    """awp bootstrap --home DIR: hooks, MCP servers and the plugin launcher use DIR."""
    home, fakebin = make_home(tmp_path)
    awp_home = str(tmp_path / "awp home")
    stub = tmp_path / "stub-awp"
    stub.write_text('#!/bin/sh\nprintf "%s|%s\\n" "${AWP_HOME:-unset}" "$*"\n')
    stub.chmod(0o755)
    bootstrap(home, fakebin, "--harness", "claude,cursor,gemini,codex", "--bin", str(stub),
              "--home", awp_home)
    hooks = json.loads(read(home, ".cursor/hooks.json"))
    commands = [h["command"] for hs in hooks["hooks"].values() for h in hs
                if "hook" in h.get("command", "")]
    assert commands and all(f"--home '{awp_home}'" in c for c in commands), commands
    mcp = json.loads(read(home, ".cursor/mcp.json"))["mcpServers"]["awp"]
    assert mcp["args"][:2] == ["--home", awp_home]
    codex = tomllib.loads(read(home, ".codex/config.toml"))["mcp_servers"]["awp"]
    assert codex["args"][:2] == ["--home", awp_home]
    # The Claude plugin's launcher exports the home unless the harness set one.
    launcher = os.path.join(home, ".claude", "skills", "awp", "bin", "awp")
    env = {"PATH": "/usr/bin:/bin", "HOME": home}
    out = subprocess.run([launcher, "hook", "inbox"], capture_output=True, text=True,
                         env=env, timeout=30).stdout
    assert out == f"{awp_home}|hook inbox\n"
    out = subprocess.run([launcher, "status"], capture_output=True, text=True,
                         env={**env, "AWP_HOME": "/elsewhere"}, timeout=30).stdout
    assert out == "/elsewhere|status\n"
