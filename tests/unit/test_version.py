"""``awp --version``: our version, the protocol's, and the commit read from .git by hand."""

from __future__ import annotations

import os
import subprocess
import sys

from awp import PROTOCOL_VERSION, __version__
from awp.base.version import git_commit

A = "a" * 40
B = "b" * 40


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_loose_packed_detached_and_worktree_heads(tmp_path):
    root = str(tmp_path / "repo")
    g = os.path.join(root, ".git")
    _write(os.path.join(g, "HEAD"), "ref: refs/heads/main\n")
    _write(os.path.join(g, "refs/heads/main"), A + "\n")
    assert git_commit(root) == A
    os.remove(os.path.join(g, "refs/heads/main"))
    _write(os.path.join(g, "packed-refs"), f"# pack-refs\n{B} refs/heads/main\n")
    assert git_commit(root) == B
    _write(os.path.join(g, "HEAD"), A + "\n")
    assert git_commit(root) == A
    # a worktree: .git is a file naming its own dir, whose commondir holds the refs
    wt = str(tmp_path / "wt")
    wd = os.path.join(g, "worktrees", "wt")
    _write(os.path.join(wt, ".git"), f"gitdir: {wd}\n")
    _write(os.path.join(wd, "HEAD"), "ref: refs/heads/side\n")
    _write(os.path.join(wd, "commondir"), "../..\n")
    _write(os.path.join(g, "refs/heads/side"), B + "\n")
    assert git_commit(wt) == B
    # no checkout, or a HEAD that is not a hash or a ref: no commit, no error
    assert git_commit(str(tmp_path / "none")) == ""
    _write(os.path.join(g, "HEAD"), "garbage")
    assert git_commit(root) == ""


def test_awp_version_prints_ours_the_protocols_and_this_commit():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "awp", "--version"], capture_output=True,
                       text=True, timeout=30, cwd=root)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith(f"awp {__version__} (protocol draft 1, v {PROTOCOL_VERSION}")
    head = git_commit(root)
    if head:  # run from a clone
        assert f"commit {head[:12]}" in line
        assert head == subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                      text=True, cwd=root).stdout.strip()
