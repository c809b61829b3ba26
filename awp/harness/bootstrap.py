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
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..base.files import write_atomic
from . import jsonc, plugin_files
from .identity import HARNESSES, TITLES, normalize

BACKUP_SUFFIX = ".awp-backup"
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

# "... awp hook inbox ...", also for a binary named like awp-dev or awp2.
_OURS = re.compile(r"""[^\s/'"]*awp[^\s/'"]*['"]?\s+hook\s+(session-start|inbox|stop)\b""")


def is_our_hook(command: object) -> bool:
    """Whether a hook command is one of ours (``... awp hook inbox ...``)."""
    return isinstance(command, str) and bool(_OURS.search(command))


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


# -- JSON with comments -----------------------------------------------------------------

def strip_jsonc(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments and trailing commas."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
            continue
        else:
            out.append(ch)
        i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _jsonc_has_awp(text: str) -> bool:
    try:
        data = json.loads(strip_jsonc(text))
    except ValueError:
        return True  # cannot tell: say so rather than stay silent
    return isinstance(_get(data, ("mcp", "awp")), dict)


@dataclass
class JsonFile:
    path: str
    exists: bool = False
    text: str = ""
    data: Any = None
    problem: str = ""  # "", "comments" (valid JSONC), "invalid"
    why: str = ""


def load_json(path: str, *, comments_ok: bool = False) -> JsonFile:
    """Read a JSON config; with ``comments_ok`` (the harness reads JSONC) comments
    and trailing commas are accepted, and kept when the file is edited."""
    jf = JsonFile(path)
    try:
        with open(path, encoding="utf-8") as f:
            jf.text = f.read()
        jf.exists = True
    except FileNotFoundError:
        return jf
    except (OSError, UnicodeDecodeError) as e:
        jf.exists = True
        jf.problem, jf.why = "invalid", str(e)
        return jf
    if not jf.text.strip():
        jf.data = {}
        return jf
    try:
        jf.data = json.loads(jf.text)
    except ValueError as e:
        if comments_ok:
            try:
                jf.data = jsonc.loads(jf.text)
            except jsonc.EditError as e2:
                jf.problem, jf.why = "invalid", f"it is not valid JSON with comments ({e2})"
                return jf
            if not isinstance(jf.data, dict):
                jf.problem, jf.why, jf.data = "invalid", "it does not hold a JSON object", None
            return jf
        try:
            json.loads(strip_jsonc(jf.text))
            jf.problem, jf.why = "comments", "it has comments"
        except ValueError:
            jf.problem, jf.why = "invalid", f"it is not valid JSON ({e})"
        return jf
    if not isinstance(jf.data, dict):
        jf.problem, jf.why, jf.data = "invalid", "it does not hold a JSON object", None
    return jf


def dump_json(data: Any, like: str = "") -> str:
    """JSON text for ``data`` in the indentation of ``like`` (2 spaces by default)."""
    indent: str | int = 2
    m = re.search(r"\n([ \t]+)\S", like)
    if m:
        indent = m.group(1)
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


def _set(obj: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            obj[key] = nxt
        obj = nxt
    obj[path[-1]] = value


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _never(path: tuple[str, ...]) -> bool:
    return False


Existed = Callable[[tuple[str, ...]], bool]


def _delete(obj: dict, path: tuple[str, ...], existed: Existed = _never) -> None:
    """Delete ``path``, then every container on it left empty that ``existed`` disowns
    (so an empty ``"mcpServers": {}`` the user had stays)."""
    chain = [obj]
    for key in path[:-1]:
        nxt = chain[-1].get(key)
        if not isinstance(nxt, dict):
            return
        chain.append(nxt)
    chain[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if chain[depth] == {} and not existed(path[:depth]):
            chain[depth - 1].pop(path[depth - 1], None)


# -- hook lists -----------------------------------------------------------------------------

def put_flat_hook(hooks: dict, event: str, entry: dict) -> None:
    """Cursor style: ``hooks[event]`` is a list of ``{"command": ...}``."""
    lst = hooks.get(event)
    if not isinstance(lst, list):
        lst = []
        hooks[event] = lst
    at = next((i for i, e in enumerate(lst)
               if isinstance(e, dict) and is_our_hook(e.get("command"))), None)
    keep = [e for e in lst if not (isinstance(e, dict) and is_our_hook(e.get("command")))]
    if at is None:
        keep.append(entry)
    else:
        keep.insert(min(at, len(keep)), entry)
    lst[:] = keep


def drop_flat_hooks(hooks: dict, event: str, keep_empty: bool = False) -> None:
    lst = hooks.get(event)
    if not isinstance(lst, list):
        return
    lst[:] = [e for e in lst if not (isinstance(e, dict) and is_our_hook(e.get("command")))]
    if not lst and not keep_empty:
        del hooks[event]


def _drop_nested(lst: list) -> int | None:
    """Remove our hooks from Claude/Gemini-style groups; index of the first group we held."""
    at = None
    out = []
    for group in lst:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            out.append(group)
            continue
        mine = [h for h in inner if isinstance(h, dict) and is_our_hook(h.get("command"))]
        if not mine:
            out.append(group)
            continue
        if at is None:
            at = len(out)
        rest = [h for h in inner if h not in mine]
        if rest:
            out.append({**group, "hooks": rest})
    lst[:] = out
    return at


def _has_nested_hooks(data: object) -> bool:
    """Whether a Gemini- or Codex-style config holds one of our hooks."""
    hooks = _get(data, ("hooks",))
    return isinstance(hooks, dict) and any(
        isinstance(g, dict) and isinstance(g.get("hooks"), list)
        and any(isinstance(x, dict) and is_our_hook(x.get("command")) for x in g["hooks"])
        for lst in hooks.values() if isinstance(lst, list) for g in lst)


def without_ours(data: object) -> object:
    """``data`` with awp's own entries taken out (its MCP server, its hooks), and the
    containers that held only those: what of a config file is the user's."""
    if not isinstance(data, dict):
        return data
    d = copy.deepcopy(data)
    for key in ("mcpServers", "mcp"):
        servers = d.get(key)
        if isinstance(servers, dict) and "awp" in servers:
            del servers["awp"]
            if not servers:
                del d[key]
    hooks = d.get("hooks")
    if isinstance(hooks, dict):
        emptied = False
        for event in list(hooks):
            lst = hooks[event]
            if not isinstance(lst, list) or not lst:
                continue
            lst[:] = [e for e in lst if not (isinstance(e, dict)
                                              and is_our_hook(e.get("command")))]
            _drop_nested(lst)
            if not lst:
                del hooks[event]
                emptied = True
        if emptied and not hooks:
            del d["hooks"]
    return d


def put_nested_hook(hooks: dict, event: str, group: dict) -> None:
    """Gemini style: ``hooks[event]`` is a list of ``{"matcher"?, "hooks": [...]}``."""
    lst = hooks.get(event)
    if not isinstance(lst, list):
        lst = []
        hooks[event] = lst
    at = _drop_nested(lst)
    lst.insert(len(lst) if at is None else at, group)


def drop_nested_hooks(hooks: dict, event: str, keep_empty: bool = False) -> None:
    lst = hooks.get(event)
    if not isinstance(lst, list):
        return
    _drop_nested(lst)
    if not lst and not keep_empty:
        del hooks[event]


# -- steps and file changes -------------------------------------------------------------

@dataclass
class Step:
    what: str  # skill, plugin, MCP server, hooks, opencode plugin
    target: str  # a path or a command
    status: str  # create, update, unchanged, remove, absent, skip, error
    detail: str = ""
    backup: str = ""


@dataclass
class Outcome:
    harness: str
    title: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def atomic_write(path: str, text: str, mode: int | None = None) -> None:
    """Write a harness file in one rename, keeping its mode (0644 for a new one)."""
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o644
    write_atomic(path, text, mode)


class Files:
    """File changes, or (``dry_run``) only what they would be."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        #: Directories this run created (so uninstall may remove them again).
        self.made: list[str] = []
        #: Directories uninstall may remove when empty (see :meth:`prune_dirs`).
        self.ours: set[str] = set()

    def _note_new_dirs(self, path: str) -> None:
        d = os.path.dirname(os.path.abspath(path))
        while d and not os.path.isdir(d):
            self.made.append(d)
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent

    def write(self, path: str, text: str, mode: int = 0o644) -> str:
        try:
            with open(path, encoding="utf-8", newline="") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        except (OSError, UnicodeDecodeError):
            current = ""
        if current == text:
            try:
                if os.stat(path).st_mode & 0o777 != mode:
                    if not self.dry_run:
                        os.chmod(path, mode)
                    return "update"
            except OSError:
                pass
            return "unchanged"
        if not self.dry_run:
            self._note_new_dirs(path)
            atomic_write(path, text, mode)
        return "create" if current is None else "update"

    def backup(self, path: str) -> str:
        """A one-time copy of a config file before its first change."""
        dest = path + BACKUP_SUFFIX
        if os.path.exists(dest) or not os.path.exists(path):
            return ""
        if not self.dry_run:
            shutil.copy2(path, dest)
        return dest

    def remove(self, path: str) -> str:
        if not os.path.lexists(path):
            return "absent"
        if not self.dry_run:
            os.unlink(path)
        return "remove"

    def prune_dirs(self, start: str, stop: str) -> None:
        """Remove empty directories from ``start`` up to (not including) ``stop``.

        Only awp's own: a directory named ``awp``, or one awp recorded creating
        (``ours``). An empty directory the user had before stays.
        """
        if self.dry_run:
            return
        d = start
        stop = os.path.abspath(stop)
        while os.path.abspath(d).startswith(stop + os.sep):
            if os.path.basename(d) != "awp" and os.path.abspath(d) not in self.ours:
                return
            try:
                os.rmdir(d)
            except OSError:
                return
            d = os.path.dirname(d)

    def edit_json(self, jf: JsonFile, mutate: Callable[[dict], None], *,
                  skeleton: dict | None = None, drop_if: tuple[dict, ...] = ()) -> tuple[str, str]:
        """Apply ``mutate`` to a JSON config; ``(status, backup path)``.

        ``skeleton`` is the object a missing file starts as; after a change
        that leaves the object equal to one of ``drop_if`` (what we created),
        a file we created is removed again.
        """
        if jf.problem:
            return "error", ""
        if not jf.exists:
            data: dict = copy.deepcopy(skeleton) if skeleton is not None else {}
            before = None
        else:
            data = copy.deepcopy(jf.data)
            before = jf.data
        mutate(data)
        if before is not None and data == before:
            return "unchanged", ""
        if before is None and data == (skeleton or {}):
            return "absent", ""
        if before is not None and data in drop_if and not os.path.exists(jf.path + BACKUP_SUFFIX):
            return self.remove(jf.path), ""
        text = dump_json(data, jf.text)
        if jf.exists and jf.text.strip():
            # Only our keys change: the user's comments and layout stay as they are.
            try:
                text = jsonc.edit(jf.text, data)
            except jsonc.EditError as e:
                try:
                    json.loads(jf.text)
                except ValueError:
                    jf.why = f"cannot change it and keep its comments ({e})"
                    return "error", ""
        if jf.exists:
            text = self.as_backup(jf.path, text, data)
        # A file of awp's entries and nothing else (awp made it, and has no backup of
        # it) needs none: taking awp out of it again removes it.
        users = without_ours(jf.data) if jf.exists else None
        mine_only = jf.exists and users != jf.data and users in drop_if
        backup = self.backup(jf.path) if jf.exists and not mine_only else ""
        if not self.dry_run:
            if not jf.exists:
                self._note_new_dirs(jf.path)
            atomic_write(jf.path, text)
            if not backup:
                self.drop_exact_backup(jf.path, text)
        return ("create" if not jf.exists else "update"), backup

    @staticmethod
    def as_backup(path: str, text: str, data: dict) -> str:
        """The backup's own text when ``text`` says the same as it, spaces aside.

        Taking our entries out cannot always tell the line breaks the user had
        around them (``{}`` and ``{\\n}`` both become an object with ours); the
        backup can.  Only whitespace may differ, so a comment the user changed
        since is never undone.
        """
        try:
            with open(path + BACKUP_SUFFIX, encoding="utf-8", newline="") as f:
                before = f.read()
        except (OSError, UnicodeDecodeError):
            return text
        if before == text or "".join(before.split()) != "".join(text.split()):
            return text
        try:
            same = jsonc.loads(before) == data
        except jsonc.EditError:
            return text
        return before if same else text

    def drop_exact_backup(self, path: str, text: str) -> None:
        """Remove our backup of ``path`` once the file is byte for byte what it holds:
        the user's own file is back, so the copy says nothing more."""
        backup = path + BACKUP_SUFFIX
        try:
            with open(backup, "rb") as f:
                same = f.read() == text.encode("utf-8")
        except OSError:
            return
        if same:
            try:
                os.unlink(backup)
            except OSError:
                pass


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
            mcp = any(isinstance(_get(jf.data, ("mcp", "awp")), dict)
                      for jf in self._opencode_files())
            plug = os.path.isfile(os.path.join(self.opencode_dir(), "plugins", "awp.js"))
            return {"skill": skill, "mcp": mcp, "hooks": plug}
        if h == "cursor":
            mcp = isinstance(_get(load_json(self.p(".cursor", "mcp.json")).data,
                                  ("mcpServers", "awp")), dict)
            hooks = _get(load_json(self.p(".cursor", "hooks.json")).data, ("hooks",))
            has = isinstance(hooks, dict) and any(
                isinstance(e, dict) and is_our_hook(e.get("command"))
                for lst in hooks.values() if isinstance(lst, list) for e in lst)
            return {"skill": skill, "mcp": mcp, "hooks": has}
        if h == "gemini":
            data = load_json(self.p(".gemini", "settings.json"), comments_ok=True).data
            mcp = isinstance(_get(data, ("mcpServers", "awp")), dict)
            return {"skill": skill, "mcp": mcp, "hooks": _has_nested_hooks(data)}
        if h == "codex":
            hooks = _has_nested_hooks(load_json(self.codex_hooks_path()).data)
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
                           lambda d: _set(d, ("mcpServers", "awp"), self.mcp_entry("cursor")))

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
                _set(d, ("mcpServers", "awp"), self.mcp_entry("gemini"))
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
                           lambda d: _set(d, ("mcpServers", "awp"), self.copilot_entry()))
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
                              "loads as awp@skills-dir"))

    def _opencode_files(self) -> list[JsonFile]:
        base = self.opencode_dir()
        return [load_json(os.path.join(base, "opencode.json")),
                load_json(os.path.join(base, "opencode.jsonc"))]

    def install_opencode(self, files: Files, out: Outcome) -> None:
        main, alt = self._opencode_files()
        entry = {"type": "local", "command": self.mcp_argv("opencode"), "enabled": True}

        def mutate(d: dict) -> None:
            _set(d, ("mcp", "awp"), entry)

        target: JsonFile | None
        if main.exists and not main.problem:
            holds_alt = not alt.problem and isinstance(_get(alt.data, ("mcp", "awp")), dict)
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
            entry = _get(data, ("mcp_servers", "awp"))
        elif h == "copilot":
            entry = _get(load_json(self.copilot_config()).data, ("mcpServers", "awp"))
        elif h == "grok":
            entry = _get(load_json(self.p(".grok", "user-settings.json")).data,
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
                if jf.problem == "comments" and not _jsonc_has_awp(jf.text):
                    continue  # never written to by us
                if jf.problem:
                    out.steps.append(Step("MCP server", self.show(jf.path), "skip",
                                          f"cannot edit it: {jf.why}; left it alone"))
                    continue
                existed = self.existed(jf.path)
                self.json_step(files, out, "MCP server", jf.path,
                               lambda d, e=existed: _delete(d, ("mcp", "awp"), e),
                               drop_if=({}, {"$schema": "https://opencode.ai/config.json"}))
            plug = os.path.join(self.opencode_dir(), "plugins", "awp.js")
            out.steps.append(Step("plugin", self.show(plug), files.remove(plug)))
            files.prune_dirs(os.path.dirname(plug), self.opencode_dir())
        elif h == "cursor":
            existed = self.existed(self.p(".cursor", "mcp.json"))
            self.json_step(files, out, "MCP server", self.p(".cursor", "mcp.json"),
                           lambda d: _delete(d, ("mcpServers", "awp"), existed))
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
                _delete(d, ("mcpServers", "awp"), had)
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
                           lambda d: _delete(d, ("mcpServers", "awp"), had))
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
            return _never
        jf = load_json(backup, comments_ok=True)
        if jf.problem:
            return lambda p: True
        return lambda p: _get(jf.data, p) is not None

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
