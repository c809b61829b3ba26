"""The harnesses' config files, changed without touching the user's part.

``awp bootstrap`` (:mod:`awp.harness.bootstrap`) decides what each harness
gets; this module is how a file gets it: JSON configs read with or without
comments (a config that does not parse is left alone and reported), awp's
own entries put in or taken out of a config's hook lists (recognised by the
command they run, ``awp hook ...``), and file changes made atomically with a
one-time ``<file>.awp-backup`` of what the user had, or (``dry_run``) only
described.  JSON is edited in place (:mod:`awp.harness.jsonc`), so the
user's comments, layout and key order stay.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base.files import write_atomic
from . import jsonc

BACKUP_SUFFIX = ".awp-backup"

# "... awp hook inbox ...", also for a binary named like awp-dev or awp2.
_OURS = re.compile(r"""[^\s/'"]*awp[^\s/'"]*['"]?\s+hook\s+(session-start|inbox|stop)\b""")


def is_our_hook(command: object) -> bool:
    """Whether a hook command is one of ours (``... awp hook inbox ...``)."""
    return isinstance(command, str) and bool(_OURS.search(command))


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


def jsonc_has_awp(text: str) -> bool:
    try:
        data = json.loads(strip_jsonc(text))
    except ValueError:
        return True  # cannot tell: say so rather than stay silent
    return isinstance(get_at(data, ("mcp", "awp")), dict)


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


def set_at(obj: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            obj[key] = nxt
        obj = nxt
    obj[path[-1]] = value


def get_at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def never_existed(path: tuple[str, ...]) -> bool:
    return False


Existed = Callable[[tuple[str, ...]], bool]


def delete_at(obj: dict, path: tuple[str, ...], existed: Existed = never_existed) -> None:
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


def has_nested_hooks(data: object) -> bool:
    """Whether a Gemini- or Codex-style config holds one of our hooks."""
    hooks = get_at(data, ("hooks",))
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
        if not before.strip():
            # the user's file was empty or blank, which reads as {}: give those bytes back
            return before if data == {} else text
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
