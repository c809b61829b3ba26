"""What ``awp --version`` prints: our version, the protocol's, and the commit.

The commit is read from the checkout the package runs from (an editable
install, or ``python -m awp`` in a clone) without running git: ``.git``'s
``HEAD`` and the ref it names, loose or packed, in a worktree too.  A built
wheel carries it in ``awp/COMMIT`` when the release script wrote one.
Nothing here is imported on any other path.
"""

from __future__ import annotations

import os

from .. import PROTOCOL_VERSION, __version__

MAX_GIT_FILE = 1 << 20  # packed-refs of a large repository stays far below this


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_GIT_FILE)
    except OSError:
        return ""


def _git_dir(root: str) -> str:
    dot = os.path.join(root, ".git")
    if os.path.isdir(dot):
        return dot
    text = _read(dot).strip()  # a worktree: "gitdir: /path/.git/worktrees/name"
    if text.startswith("gitdir:"):
        d = text[7:].strip()
        return d if os.path.isabs(d) else os.path.join(root, d)
    return ""


def _is_hash(s: str) -> bool:
    return len(s) == 40 and all(c in "0123456789abcdef" for c in s)


def git_commit(root: str) -> str:
    """The full hash HEAD names in the checkout at ``root``, or ""."""
    gd = _git_dir(root)
    if not gd:
        return ""
    head = _read(os.path.join(gd, "HEAD")).strip()
    if _is_hash(head):
        return head  # a detached HEAD
    if not head.startswith("ref:"):
        return ""
    ref = head[4:].strip()
    common = _read(os.path.join(gd, "commondir")).strip()  # a worktree shares the refs
    base = os.path.normpath(os.path.join(gd, common)) if common else gd
    for d in (gd, base):
        loose = _read(os.path.join(d, ref)).strip()
        if _is_hash(loose):
            return loose
    for line in _read(os.path.join(base, "packed-refs")).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _is_hash(parts[0]):
            return parts[0]
    return ""


def commit() -> str:
    """The commit this code came from: the checkout's, else the one a build recorded."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = git_commit(os.path.dirname(pkg))
    if found:
        return found
    built = _read(os.path.join(pkg, "COMMIT")).strip()
    return built if _is_hash(built) else ""


def version_line() -> str:
    c = commit()
    return (f"awp {__version__} (protocol draft 1, v {PROTOCOL_VERSION}"
            + (f"; commit {c[:12]}" if c else "") + ")")
