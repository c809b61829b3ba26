"""``awp bootstrap``: install awp into the agent harnesses on this machine.

What each harness gets (the docs' "Set up your harnesses" table):

============  ==============================================================
claude        the plugin (skill, MCP server, hooks) in ``~/.claude/skills/awp``
opencode      skill; MCP server in ``~/.config/opencode/opencode.json`` (or
              ``opencode.jsonc`` when the first has comments); the plugin
              ``~/.config/opencode/plugins/awp.js``
codex         skill; MCP server via ``codex mcp add``; hooks in
              ``~/.codex/hooks.json`` (Codex runs them once the user trusts them)
cursor        skill; MCP server and hooks in ``~/.cursor/mcp.json`` and
              ``~/.cursor/hooks.json``
gemini        skill; MCP server and hooks in ``~/.gemini/settings.json`` (which
              may have comments: Gemini CLI accepts them, and so do we)
copilot       skill; MCP server in ``~/.copilot/mcp-config.json`` (the Copilot
              CLI has no ``mcp add`` command: it adds servers interactively
              with ``/mcp add`` or reads that file); no hooks: the Copilot CLI
              reads hooks only from a repository's ``.github/hooks/*.json``,
              none from the user's home
grok          skill; MCP server via ``grok mcp add``
pi            skill
============  ==============================================================

Rules: only awp's own entries are touched (the ``awp`` MCP server, hook
entries that run ``awp hook ...``, awp's own files); a JSON file is edited in
place (:mod:`awp.harness.jsonc`), so only awp's entries are rewritten and the
user's comments, layout and key order stay; the first change to an existing config file leaves a one-time
``<file>.awp-backup``; every write is atomic (temp file, fsync, rename); a
config that does not parse is left alone and reported; ``X mcp add`` runs
only when ``X`` is on PATH. Running it again changes nothing, and
``--uninstall`` removes only what it added (and a backup once the file it
copied is back byte for byte): a directory only if awp created
it (recorded in the harness directory's ``.awp-dirs.json``) or it is awp's
own ``awp`` directory. Every path is under ``$HOME``.

How a file is changed (JSON with comments, awp's hook entries, backups,
atomic writes, dry runs) is :mod:`awp.harness.configfiles`.

Why one module: what each harness gets is written once for installing and
once for removing, and the two sit side by side (``install_harness`` and
``remove_harness``, the Claude plugin's install and removal) so that every
removal visibly undoes its install and nothing else; the harness table
above is the map of both.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict

from . import plugin_files
from .configfiles import (
    BACKUP_SUFFIX,
    Existed,
    Files,
    JsonFile,
    Outcome,
    Step,
    atomic_write,
    delete_at,
    drop_flat_hooks,
    drop_nested_hooks,
    get_at,
    has_nested_hooks,
    is_our_hook,
    jsonc_has_awp,
    load_json,
    never_existed,
    put_flat_hook,
    put_nested_hook,
    set_at,
)
from .identity import HARNESSES, TITLES, normalize

MANIFEST = ".awp-installed"
#: In a harness's own directory: the directories awp created there.
MADE_DIRS = ".awp-dirs.json"
COMMAND_TIMEOUT = 60.0

#: Which hook events run which ``awp hook`` event, per harness.
CURSOR_HOOKS = (("sessionStart", "session-start"), ("postToolUse", "inbox"), ("stop", "stop"))
GEMINI_HOOKS = (("SessionStart", "session-start", None), ("BeforeAgent", "inbox", None),
                ("AfterTool", "inbox", "*"))
#: Codex's ~/.codex/hooks.json (groups as Gemini's; ``timeout`` in seconds). Codex runs
#: a hook only after the user trusts it (its /hooks), so these wait for that.
CODEX_HOOKS = (("SessionStart", "session-start"), ("PostToolUse", "inbox"), ("Stop", "stop"))

def parse_list(text: str) -> list[str]:
    """``"claude,codex"`` -> ids; ``ValueError`` naming an unknown one."""
    out: list[str] = []
    for raw in text.split(","):
        if not raw.strip():
            continue
        h = normalize(raw)
        if h is None:
            raise ValueError(f"--harness: unknown harness {raw.strip()!r}: choose from "
                             + ", ".join(HARNESSES))
        if h not in out:
            out.append(h)
    if not out:
        raise ValueError("--harness: name at least one harness")
    return out


# -- the harnesses --------------------------------------------------------------------------

def _which(name: str, env: dict[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", os.defpath))


def default_argv() -> list[str]:
    """The command that runs this awp (its script, else ``python -m awp``)."""
    from ..daemon.service import awp_command

    return awp_command()


class Bootstrap:
    """One bootstrap run: where home is, which awp to wire in, and the harnesses."""

    def __init__(self, *, bin_path: str | None = None, home: str | None = None,
                 env: dict[str, str] | None = None, awp_home: str | None = None,
                 runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> None:
        """``home`` is the user's home (where harness configs live); ``awp_home``,
        when given, is the awp home every wired command is pointed at."""
        self.env = dict(os.environ) if env is None else env
        self.home = os.path.abspath(home or self.env.get("HOME") or os.path.expanduser("~"))
        if bin_path:
            self.argv = [os.path.abspath(os.path.expanduser(bin_path))]
        else:
            self.argv = default_argv()
        if awp_home:
            # "awp --home H hook ..." and "awp --home H mcp ..." both work.
            self.argv = [*self.argv, "--home", os.path.abspath(os.path.expanduser(awp_home))]
        self.runner = runner

    # paths

    def p(self, *parts: str) -> str:
        return os.path.join(self.home, *parts)

    def show(self, path: str) -> str:
        return "~" + path[len(self.home):] if path.startswith(self.home + os.sep) else path

    def skill_path(self, h: str) -> str:
        return {
            "opencode": self.p(".config", "opencode", "skills", "awp", "SKILL.md"),
            "codex": self.p(".codex", "skills", "awp", "SKILL.md"),
            "cursor": self.p(".cursor", "skills", "awp", "SKILL.md"),
            "gemini": self.p(".gemini", "skills", "awp", "SKILL.md"),
            "copilot": self.p(".copilot", "skills", "awp", "SKILL.md"),
            "grok": self.p(".grok", "skills", "awp", "SKILL.md"),
            "pi": self.p(".pi", "agent", "skills", "awp", "SKILL.md"),
            "claude": self.p(".claude", "skills", "awp", plugin_files.SKILL),
        }[h]

    def claude_dir(self) -> str:
        return self.p(".claude", "skills", "awp")

    def opencode_dir(self) -> str:
        return self.p(".config", "opencode")

    # commands

    def mcp_argv(self, h: str) -> list[str]:
        return [*self.argv, "mcp", "--harness", h]

    def hook_command(self, event: str, fmt: str) -> str:
        return shlex.join([*self.argv, "hook", event, "--format", fmt])

    def mcp_entry(self, h: str) -> dict:
        argv = self.mcp_argv(h)
        return {"command": argv[0], "args": argv[1:]}

    def codex_hooks_path(self) -> str:
        return self.p(".codex", "hooks.json")

    def copilot_config(self) -> str:
        return self.p(".copilot", "mcp-config.json")

    def copilot_entry(self) -> dict:
        """A local (stdio) server entry as the Copilot CLI's mcp-config.json holds it."""
        return {"type": "local", **self.mcp_entry("copilot"), "tools": ["*"]}

    # detection

    def detect(self, h: str) -> bool:
        marks = {
            "claude": ([".claude"], ["claude"]),
            "opencode": ([os.path.join(".config", "opencode")], ["opencode"]),
            "codex": ([".codex"], ["codex"]),
            "cursor": ([".cursor"], ["cursor-agent", "cursor"]),
            "gemini": ([".gemini"], ["gemini"]),
            "copilot": ([".copilot"], ["copilot"]),
            "grok": ([".grok"], ["grok"]),
            "pi": ([".pi"], ["pi"]),
        }[h]
        return any(os.path.isdir(self.p(d)) for d in marks[0]) or any(
            _which(prog, self.env) for prog in marks[1])

    # -- listing ------------------------------------------------------------------------

    def installed(self, h: str) -> dict[str, bool | None]:
        """What of awp is in harness ``h``: skill, mcp, hooks (None: not applicable)."""
        skill = os.path.isfile(self.skill_path(h))
        if h == "claude":
            plugin = os.path.isfile(os.path.join(self.claude_dir(), ".claude-plugin",
                                                 "plugin.json"))
            return {"skill": skill, "mcp": plugin, "hooks": plugin}
        if h == "opencode":
            mcp = any(isinstance(get_at(jf.data, ("mcp", "awp")), dict)
                      for jf in self._opencode_files())
            plug = os.path.isfile(os.path.join(self.opencode_dir(), "plugins", "awp.js"))
            return {"skill": skill, "mcp": mcp, "hooks": plug}
        if h == "cursor":
            mcp = isinstance(get_at(load_json(self.p(".cursor", "mcp.json")).data,
                                  ("mcpServers", "awp")), dict)
            hooks = get_at(load_json(self.p(".cursor", "hooks.json")).data, ("hooks",))
            has = isinstance(hooks, dict) and any(
                isinstance(e, dict) and is_our_hook(e.get("command"))
                for lst in hooks.values() if isinstance(lst, list) for e in lst)
            return {"skill": skill, "mcp": mcp, "hooks": has}
        if h == "gemini":
            data = load_json(self.p(".gemini", "settings.json"), comments_ok=True).data
            mcp = isinstance(get_at(data, ("mcpServers", "awp")), dict)
            return {"skill": skill, "mcp": mcp, "hooks": has_nested_hooks(data)}
        if h == "codex":
            hooks = has_nested_hooks(load_json(self.codex_hooks_path()).data)
            return {"skill": skill, "mcp": self.registered_mcp(h) is not None, "hooks": hooks}
        if h in ("copilot", "grok"):
            return {"skill": skill, "mcp": self.registered_mcp(h) is not None, "hooks": None}
        return {"skill": skill, "mcp": None, "hooks": None}

    def listing(self) -> list[dict]:
        rows = []
        for h in HARNESSES:
            parts = self.installed(h)
            rows.append({"harness": h, "title": TITLES[h], "detected": self.detect(h),
                         "installed": any(bool(v) for v in parts.values()), "parts": parts})
        return rows

    # -- running ------------------------------------------------------------------------

    def run(self, names: list[str], *, uninstall: bool = False,
            dry_run: bool = False) -> list[dict]:
        files = Files(dry_run)
        report = []
        for h in names:
            out = Outcome(h, TITLES[h])
            try:
                if uninstall:
                    files.ours = self.made_dirs(h)
                    self.remove_harness(h, files, out)
                    if not files.dry_run:
                        self.forget_made_dirs(h)
                else:
                    files.made = []
                    self.install_harness(h, files, out)
                    if files.made and not files.dry_run:
                        self.remember_made_dirs(h, files.made)
            except OSError as e:
                out.steps.append(Step("files", self.show(getattr(e, "filename", "") or ""),
                                      "error", e.strerror or str(e)))
            if uninstall:
                for step in out.steps:
                    if step.status == "unchanged":
                        step.status = "absent"
            report.append(asdict(out))
        return report

    # install

    def install_harness(self, h: str, files: Files, out: Outcome) -> None:
        if h == "claude":
            self.install_claude(files, out)
            return
        path = self.skill_path(h)
        out.steps.append(Step("skill", self.show(path),
                              files.write(path, plugin_files.skill_text())))
        if h == "opencode":
            self.install_opencode(files, out)
        elif h == "cursor":
            self.json_step(files, out, "MCP server", self.p(".cursor", "mcp.json"),
                           lambda d: set_at(d, ("mcpServers", "awp"), self.mcp_entry("cursor")))

            def hooks(d: dict) -> None:
                d.setdefault("version", 1)
                table = d.get("hooks")
                if not isinstance(table, dict):
                    table = d["hooks"] = {}
                for event, ours in CURSOR_HOOKS:
                    put_flat_hook(table, event, {"command": self.hook_command(ours, "cursor")})

            self.json_step(files, out, "hooks", self.p(".cursor", "hooks.json"), hooks,
                           skeleton={"version": 1})
        elif h == "gemini":
            def settings(d: dict) -> None:
                set_at(d, ("mcpServers", "awp"), self.mcp_entry("gemini"))
                table = d.get("hooks")
                if not isinstance(table, dict):
                    table = d["hooks"] = {}
                for event, ours, matcher in GEMINI_HOOKS:
                    group: dict = {"matcher": matcher} if matcher else {}
                    group["hooks"] = [{"name": f"awp-{ours}", "type": "command",
                                       "command": self.hook_command(ours, "gemini"),
                                       "timeout": 10000}]
                    put_nested_hook(table, event, group)

            self.json_step(files, out, "MCP server and hooks", self.p(".gemini", "settings.json"),
                           settings, comments_ok=True)
            out.notes.append("Gemini CLI enables MCP servers only in folders you have trusted.")
        elif h == "copilot":
            self.json_step(files, out, "MCP server", self.copilot_config(),
                           lambda d: set_at(d, ("mcpServers", "awp"), self.copilot_entry()))
        elif h in ("codex", "grok"):
            self.command_step(h, files, out, uninstall=False)
            if h == "codex":
                def codex_hooks(d: dict) -> None:
                    table = d.get("hooks")
                    if not isinstance(table, dict):
                        table = d["hooks"] = {}
                    for event, ours in CODEX_HOOKS:
                        put_nested_hook(table, event, {"hooks": [{
                            "type": "command", "command": self.hook_command(ours, "codex"),
                            "timeout": 10}]})

                self.json_step(files, out, "hooks", self.codex_hooks_path(), codex_hooks)
                out.notes.append("Codex runs hooks only once you trust them: open /hooks in"
                                 " Codex and trust awp's three (until then, awp tail --once,"
                                 " awp wait or the MCP tools bring messages in).")
        elif h == "pi":
            out.notes.append("pi has no MCP: the skill teaches it the awp commands.")

    def json_step(self, files: Files, out: Outcome, what: str, path: str,
                  mutate: Callable[[dict], None], *, skeleton: dict | None = None,
                  drop_if: tuple[dict, ...] = ({},), comments_ok: bool = False) -> None:
        jf = load_json(path, comments_ok=comments_ok)
        status, backup = files.edit_json(jf, mutate, skeleton=skeleton, drop_if=drop_if)
        detail = f"cannot edit it: {jf.why}; left it alone" if status == "error" else ""
        out.steps.append(Step(what, self.show(path), status, detail,
                              self.show(backup) if backup else ""))

    def install_claude(self, files: Files, out: Outcome) -> None:
        dest = self.claude_dir()
        tree = plugin_files.plugin_tree(self.argv)
        existed = os.path.isdir(dest)
        statuses = [files.write(os.path.join(dest, rel), text, mode)
                    for rel, (mode, text) in sorted(tree.items())]
        manifest = json.dumps(sorted(tree), indent=2) + "\n"
        statuses.append(files.write(os.path.join(dest, MANIFEST), manifest))
        if all(s == "unchanged" for s in statuses):
            status = "unchanged"
        else:
            status = "update" if existed else "create"
        out.steps.append(Step("plugin (skill, MCP server, hooks)", self.show(dest), status,
                              f"loads as awp@skills-dir; {plugin_origin()}"))

    def _opencode_files(self) -> list[JsonFile]:
        base = self.opencode_dir()
        return [load_json(os.path.join(base, "opencode.json")),
                load_json(os.path.join(base, "opencode.jsonc"))]

    def install_opencode(self, files: Files, out: Outcome) -> None:
        main, alt = self._opencode_files()
        entry = {"type": "local", "command": self.mcp_argv("opencode"), "enabled": True}

        def mutate(d: dict) -> None:
            set_at(d, ("mcp", "awp"), entry)

        target: JsonFile | None
        if main.exists and not main.problem:
            holds_alt = not alt.problem and isinstance(get_at(alt.data, ("mcp", "awp")), dict)
            target = alt if holds_alt else main
        elif main.problem == "comments" or (not main.exists and alt.exists):
            target = alt
        elif main.problem:
            target = None
        else:
            target = main
        if target is None:
            out.steps.append(Step("MCP server", self.show(main.path), "error",
                                  f"cannot edit it: {main.why}; left it alone"))
        elif target.problem:
            why = target.why
            if target is alt and main.problem == "comments":
                why = f"opencode.json has comments and opencode.jsonc cannot be edited ({why})"
            out.steps.append(Step("MCP server", self.show(target.path), "error",
                                  f"{why}; left it alone"))
        else:
            skeleton = {"$schema": "https://opencode.ai/config.json"}
            status, backup = files.edit_json(target, mutate, skeleton=skeleton)
            detail = ("opencode.json has comments, so awp's entry goes here; opencode merges"
                      " the two" if target is alt and main.problem == "comments" else "")
            out.steps.append(Step("MCP server", self.show(target.path), status, detail,
                                  self.show(backup) if backup else ""))
        plug = os.path.join(self.opencode_dir(), "plugins", "awp.js")
        out.steps.append(Step("plugin (new messages in tool output, model reporting)",
                              self.show(plug),
                              files.write(plug, plugin_files.opencode_plugin(self.argv))))

    # MCP servers added by the harness's own command

    def registered_mcp(self, h: str) -> dict | None:
        """The ``awp`` MCP server entry in the harness's own config, if any."""
        if h == "codex":
            try:
                import tomllib

                with open(self.p(".codex", "config.toml"), "rb") as f:
                    data = tomllib.load(f)
            except (OSError, ValueError):
                return None
            entry = get_at(data, ("mcp_servers", "awp"))
        elif h == "copilot":
            entry = get_at(load_json(self.copilot_config()).data, ("mcpServers", "awp"))
        elif h == "grok":
            entry = get_at(load_json(self.p(".grok", "user-settings.json")).data,
                         ("mcpServers", "awp"))
        else:
            return None
        return entry if isinstance(entry, dict) else None

    def _run(self, argv: list[str]) -> tuple[bool, str]:
        try:
            proc = self.runner(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                               env=self.env, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            return False, str(e)
        why = (proc.stderr or proc.stdout or "").strip().splitlines()
        return proc.returncode == 0, (why[-1] if why else f"exit status {proc.returncode}")

    def command_step(self, h: str, files: Files, out: Outcome, *, uninstall: bool) -> None:
        exe = _which(h, self.env)
        current = self.registered_mcp(h)
        add = [h, "mcp", "add", "awp", "--", *self.mcp_argv(h)]
        remove = [h, "mcp", "remove", "awp"]
        shown = shlex.join(remove if uninstall else add)
        if uninstall:
            if exe is None:
                status = "skip" if current else "absent"
                detail = f"{h} is not on PATH: run this once it is" if current else ""
                out.steps.append(Step("MCP server", shown, status, detail))
                return
            if current is None:
                out.steps.append(Step("MCP server", shown, "absent"))
                return
            if files.dry_run:
                out.steps.append(Step("MCP server", shown, "remove"))
                return
            ok, why = self._run([exe, *remove[1:]])
            out.steps.append(Step("MCP server", shown, "remove" if ok else "error",
                                  "" if ok else why))
            return
        wanted = self.mcp_entry(h)
        if current is not None and current.get("command") == wanted["command"] and list(
                current.get("args") or []) == wanted["args"]:
            out.steps.append(Step("MCP server", shown, "unchanged"))
            return
        if exe is None:
            out.steps.append(Step("MCP server", shown, "skip",
                                  f"{h} is not on PATH: run this once it is"))
            return
        if files.dry_run:
            out.steps.append(Step("MCP server", shown, "update" if current else "create"))
            return
        if current is not None:
            self._run([exe, *remove[1:]])
        ok, why = self._run([exe, *add[1:]])
        out.steps.append(Step("MCP server", shown, ("update" if current else "create") if ok
                              else "error", "" if ok else why))

    # uninstall

    def remove_harness(self, h: str, files: Files, out: Outcome) -> None:
        if h == "claude":
            self.remove_claude(files, out)
            return
        path = self.skill_path(h)
        out.steps.append(Step("skill", self.show(path), self.remove_skill(path, files, h)))
        if h == "opencode":
            for jf in self._opencode_files():
                if not jf.exists:
                    continue
                if jf.problem == "comments" and not jsonc_has_awp(jf.text):
                    continue  # never written to by us
                if jf.problem:
                    out.steps.append(Step("MCP server", self.show(jf.path), "skip",
                                          f"cannot edit it: {jf.why}; left it alone"))
                    continue
                existed = self.existed(jf.path)
                self.json_step(files, out, "MCP server", jf.path,
                               lambda d, e=existed: delete_at(d, ("mcp", "awp"), e),
                               drop_if=({}, {"$schema": "https://opencode.ai/config.json"}))
            plug = os.path.join(self.opencode_dir(), "plugins", "awp.js")
            out.steps.append(Step("plugin", self.show(plug), files.remove(plug)))
            files.prune_dirs(os.path.dirname(plug), self.opencode_dir())
        elif h == "cursor":
            existed = self.existed(self.p(".cursor", "mcp.json"))
            self.json_step(files, out, "MCP server", self.p(".cursor", "mcp.json"),
                           lambda d: delete_at(d, ("mcpServers", "awp"), existed))
            had = self.existed(self.p(".cursor", "hooks.json"))

            def hooks(d: dict) -> None:
                table = d.get("hooks")
                if isinstance(table, dict):
                    for event, _ in CURSOR_HOOKS:
                        drop_flat_hooks(table, event, had(("hooks", event)))
                    if not table and not had(("hooks",)):
                        del d["hooks"]

            self.json_step(files, out, "hooks", self.p(".cursor", "hooks.json"), hooks,
                           drop_if=({}, {"version": 1}))
        elif h == "gemini":
            had = self.existed(self.p(".gemini", "settings.json"))

            def settings(d: dict) -> None:
                delete_at(d, ("mcpServers", "awp"), had)
                table = d.get("hooks")
                if isinstance(table, dict):
                    for event, _, _ in GEMINI_HOOKS:
                        drop_nested_hooks(table, event, had(("hooks", event)))
                    if not table and not had(("hooks",)):
                        del d["hooks"]

            self.json_step(files, out, "MCP server and hooks", self.p(".gemini", "settings.json"),
                           settings, comments_ok=True)
        elif h == "copilot":
            had = self.existed(self.copilot_config())
            self.json_step(files, out, "MCP server", self.copilot_config(),
                           lambda d: delete_at(d, ("mcpServers", "awp"), had))
        elif h in ("codex", "grok"):
            self.command_step(h, files, out, uninstall=True)
            if h == "codex":
                had = self.existed(self.codex_hooks_path())

                def codex_hooks(d: dict) -> None:
                    table = d.get("hooks")
                    if isinstance(table, dict):
                        for event, _ in CODEX_HOOKS:
                            drop_nested_hooks(table, event, had(("hooks", event)))
                        if not table and not had(("hooks",)):
                            del d["hooks"]

                self.json_step(files, out, "hooks", self.codex_hooks_path(), codex_hooks,
                               drop_if=({}, {"hooks": {}}))

    # directories awp created, per harness, in <root>/.awp-dirs.json

    def _made_record(self, h: str) -> str:
        return os.path.join(self.root(h), MADE_DIRS)

    def made_dirs(self, h: str) -> set[str]:
        root = self.root(h)
        try:
            with open(self._made_record(h), encoding="utf-8") as f:
                listed = json.load(f)
        except (OSError, ValueError):
            return set()
        if not isinstance(listed, list):
            return set()
        return {os.path.normpath(os.path.join(root, r)) for r in listed
                if isinstance(r, str) and ".." not in r.split("/") and not os.path.isabs(r)}

    def remember_made_dirs(self, h: str, made: list[str]) -> None:
        root = os.path.abspath(self.root(h))
        new = {os.path.relpath(d, root) for d in made
               if os.path.abspath(d).startswith(root + os.sep)}
        if not new:
            return
        known = {os.path.relpath(d, root) for d in self.made_dirs(h)}
        if new <= known:
            return
        atomic_write(self._made_record(h), json.dumps(sorted(known | new), indent=2) + "\n")

    def forget_made_dirs(self, h: str) -> None:
        try:
            os.unlink(self._made_record(h))
        except OSError:
            pass

    def root(self, h: str) -> str:
        """The harness's own directory under home (never removed)."""
        return {"opencode": self.opencode_dir(), "pi": self.p(".pi")}.get(h) or self.p(f".{h}")

    def existed(self, path: str) -> Existed:
        """Whether a key path was in the config before awp first changed it (its backup).

        Without a backup awp created the file, so nothing in it is the user's own
        container; with a backup it cannot read, everything counts as the user's.
        """
        backup = path + BACKUP_SUFFIX
        if not os.path.exists(backup):
            return never_existed
        jf = load_json(backup, comments_ok=True)
        if jf.problem:
            return lambda p: True
        return lambda p: get_at(jf.data, p) is not None

    def remove_skill(self, path: str, files: Files, h: str) -> str:
        status = files.remove(path)
        files.prune_dirs(os.path.dirname(path), self.root(h))
        return status

    def remove_claude(self, files: Files, out: Outcome) -> None:
        dest = self.claude_dir()
        rels = set(plugin_files.plugin_tree())
        try:
            with open(os.path.join(dest, MANIFEST), encoding="utf-8") as f:
                listed = json.load(f)
            rels |= {r for r in listed if isinstance(r, str) and ".." not in r.split("/")}
        except (OSError, ValueError, TypeError):
            pass
        rels.add(MANIFEST)
        removed = [files.remove(os.path.join(dest, rel)) for rel in sorted(rels)]
        if not files.dry_run:
            for dirpath, _dirs, _files in sorted(os.walk(dest, topdown=False), reverse=True):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
        files.prune_dirs(os.path.dirname(dest), self.root("claude"))
        status = "remove" if "remove" in removed else "absent"
        out.steps.append(Step("plugin (skill, MCP server, hooks)", self.show(dest), status))


def plugin_origin() -> str:
    """Where the installed plugin came from: the copy built into this awp, which is
    ``plugin/awp`` of the repository at this version (and commit, when known)."""
    from .. import __version__
    from ..base.version import commit

    c = commit()
    at = f"awp {__version__}" + (f", commit {c[:12]}" if c else "")
    return (f"the plugin built into {at} (plugin/awp of its repository, which is also a"
            " Claude Code marketplace: /plugin marketplace add REPO)")


# -- output --------------------------------------------------------------------------------

_WORDS = {
    "create": ("created", "would create"),
    "update": ("updated", "would update"),
    "unchanged": ("unchanged", "unchanged"),
    "remove": ("removed", "would remove"),
    "absent": ("not there", "not there"),
    "skip": ("skipped", "would skip"),
    "error": ("ERROR", "ERROR"),
}


def format_report(report: list[dict], *, dry_run: bool = False, uninstall: bool = False) -> str:
    lines: list[str] = []
    changed = False
    for r in report:
        lines.append(r["title"])
        for s in r["steps"]:
            word = _WORDS.get(s["status"], (s["status"], s["status"]))[1 if dry_run else 0]
            changed |= s["status"] in ("create", "update", "remove")
            extra = f"  ({s['detail']})" if s.get("detail") else ""
            backup = f"  [backup: {s['backup']}]" if s.get("backup") else ""
            lines.append(f"  {word:<13} {s['what']}: {s['target']}{extra}{backup}")
        for note in r.get("notes") or []:
            lines.append(f"  note: {note}")
    if dry_run:
        lines.append("dry run: nothing was changed")
    elif changed:
        lines.append("Restart your harness sessions to pick up the changes"
                     + ("." if uninstall else " (an old session's MCP server can restart an"
                        " old daemon)."))
    else:
        lines.append("nothing to change")
    return "\n".join(lines)


def format_listing(rows: list[dict]) -> str:
    def mark(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    table = [["harness", "detected", "skill", "MCP", "hooks/plugin"]]
    for r in rows:
        p = r["parts"]
        table.append([f"{r['harness']} ({r['title']})", "yes" if r["detected"] else "no",
                      mark(p.get("skill")), mark(p.get("mcp")), mark(p.get("hooks"))])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip()
                     for row in table)
