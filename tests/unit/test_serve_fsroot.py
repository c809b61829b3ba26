"""fs:* confinement: nothing outside the root is ever read or written.

Layout for every test::

    tmp/outside/secret.txt      "SECRET"   (must never be read or changed)
    tmp/root/a.txt              "inside"
    tmp/root/sub/b.txt          "sub b"
"""

from __future__ import annotations

import os
import sys

import pytest

import awp.serve.fsroot as fsroot
from awp.serve.fs import fs_read, fs_write
from awp.serve.fsroot import FsError, components

SECRET = "SECRET"


@pytest.fixture
def tree(tmp_path):
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("inside")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("sub b")
    return root, out


def outside_untouched(out):
    assert sorted(os.listdir(out)) == ["secret.txt"]
    assert (out / "secret.txt").read_text() == SECRET


def assert_refused(res, path):
    assert set(res) == {"error", "path"}, res
    assert res["path"] == path
    assert SECRET not in repr(res)


# ---- lexical rules ---------------------------------------------------------


def test_components_lexical(tmp_path):
    r = str(tmp_path)
    assert components(r, "a/b/c") == ["a", "b", "c"]
    assert components(r, "./a//b/./c/") == ["a", "b", "c"]
    assert components(r, "a/../b") == ["b"]
    assert components(r, "") == []
    assert components(r, ".") == []
    assert components(r, "a/..") == []
    assert components(r, "...") == ["..."]
    assert components(r, r + "/x/y") == ["x", "y"]
    assert components(r, r) == []
    for bad, msg in [
        ("..", "path escapes the root"),
        ("../x", "path escapes the root"),
        ("a/../../x", "path escapes the root"),
        ("a/b/../../..", "path escapes the root"),
        ("/etc/passwd", "absolute path outside the root"),
        (r + "/../outside/secret.txt", "absolute path outside the root"),
        (r + "x/y", "absolute path outside the root"),  # prefix, not a parent
        ("a\x00b", "path contains a NUL byte"),
        (None, "path is required"),
        (7, "path must be a string"),
    ]:
        with pytest.raises(FsError) as ei:
            components(r, bad)
        assert str(ei.value) == msg, bad


def test_absolute_inside_via_real_root(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("x")
    link = tmp_path / "rootlink"
    link.symlink_to(real)
    # the configured root may itself be a symlink; both spellings are inside
    assert components(str(link), str(link) + "/f") == ["f"]
    assert components(str(link), str(real) + "/f") == ["f"]
    assert fs_read(str(link), {"path": str(real / "f")})[0]["content"] == "x"


# ---- escapes by path -------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "..",
        "sub/../..",
        "a.txt\x00",
        "sub/\x00/../../outside/secret.txt",
    ],
)
def test_read_escape_by_path(tree, path):
    root, out = tree
    res, blob = fs_read(str(root), {"path": path})
    assert_refused(res, path)
    assert blob is None


def test_read_absolute_outside(tree):
    root, out = tree
    p = str(out / "secret.txt")
    res, _ = fs_read(str(root), {"path": p})
    assert res == {"error": "absolute path outside the root", "path": p}
    p2 = str(root) + "/../outside/secret.txt"
    assert fs_read(str(root), {"path": p2})[0]["error"] == "absolute path outside the root"


def test_read_absolute_inside_allowed(tree):
    root, _ = tree
    res, _ = fs_read(str(root), {"path": str(root / "sub" / "b.txt")})
    assert res["content"] == "sub b"
    assert fs_read(str(root), {"path": "sub/../a.txt"})[0]["content"] == "inside"


@pytest.mark.parametrize(
    "path",
    ["../outside/new.txt", "a/../../outside/new.txt", "../outside/secret.txt", "x\x00y"],
)
def test_write_escape_by_path(tree, path):
    root, out = tree
    res = fs_write(str(root), {"path": path, "content": "PWNED", "mkdir": True})
    assert_refused(res, path)
    outside_untouched(out)


def test_write_absolute_outside(tree):
    root, out = tree
    p = str(out / "secret.txt")
    res = fs_write(str(root), {"path": p, "content": "PWNED"})
    assert res == {"error": "absolute path outside the root", "path": p}
    outside_untouched(out)


# ---- symlinks --------------------------------------------------------------


def test_symlink_file_pointing_out(tree):
    root, out = tree
    (root / "leak").symlink_to(out / "secret.txt")
    res, _ = fs_read(str(root), {"path": "leak"})
    assert res == {"error": "refusing to follow a symlink: leak", "path": "leak"}
    res = fs_write(str(root), {"path": "leak", "content": "PWNED"})
    assert res == {"error": "refusing to follow a symlink: leak", "path": "leak"}
    res = fs_write(str(root), {"path": "leak", "content": "PWNED", "append": True})
    assert_refused(res, "leak")
    outside_untouched(out)


def test_symlink_relative_pointing_out(tree):
    root, out = tree
    (root / "sub" / "up").symlink_to("../../outside/secret.txt")
    assert_refused(fs_read(str(root), {"path": "sub/up"})[0], "sub/up")
    assert_refused(fs_write(str(root), {"path": "sub/up", "content": "PWNED"}), "sub/up")
    outside_untouched(out)


def test_dangling_symlink_write_does_not_create_outside(tree):
    root, out = tree
    (root / "dang").symlink_to(out / "created.txt")
    res = fs_write(str(root), {"path": "dang", "content": "PWNED"})
    assert res == {"error": "refusing to follow a symlink: dang", "path": "dang"}
    outside_untouched(out)


def test_symlinked_parent_directory_pointing_out(tree):
    root, out = tree
    (root / "ldir").symlink_to(out)
    res, _ = fs_read(str(root), {"path": "ldir/secret.txt"})
    assert res == {"error": "refusing to follow a symlink: ldir", "path": "ldir/secret.txt"}
    res, _ = fs_read(str(root), {"path": "ldir"})  # listing through it
    assert_refused(res, "ldir")
    for data in (
        {"path": "ldir/secret.txt", "content": "PWNED"},
        {"path": "ldir/new.txt", "content": "PWNED"},
        {"path": "ldir/deeper/new.txt", "content": "PWNED", "mkdir": True},
    ):
        res = fs_write(str(root), data)
        assert res == {"error": "refusing to follow a symlink: ldir", "path": data["path"]}
    outside_untouched(out)


def test_symlinked_directory_deeper_in_path(tree):
    root, out = tree
    (root / "sub" / "esc").symlink_to(out)
    assert fs_read(str(root), {"path": "sub/esc/secret.txt"})[0]["error"] == (
        "refusing to follow a symlink: sub/esc"
    )
    res = fs_write(str(root), {"path": "sub/esc/x", "content": "PWNED", "mkdir": True})
    assert res["error"] == "refusing to follow a symlink: sub/esc"
    outside_untouched(out)


def test_symlink_inside_pointing_inside_is_refused(tree):
    """Documented choice (PROFILE.md): no symlink is followed, even one that
    stays inside the root."""
    root, out = tree
    (root / "alias.txt").symlink_to("a.txt")
    (root / "subalias").symlink_to("sub")
    assert fs_read(str(root), {"path": "alias.txt"})[0] == {
        "error": "refusing to follow a symlink: alias.txt",
        "path": "alias.txt",
    }
    assert fs_read(str(root), {"path": "subalias/b.txt"})[0]["error"] == (
        "refusing to follow a symlink: subalias"
    )
    assert fs_write(str(root), {"path": "alias.txt", "content": "new"})["error"] == (
        "refusing to follow a symlink: alias.txt"
    )
    assert (root / "a.txt").read_text() == "inside"


def test_write_through_symlink_never_writes_outside(tree):
    root, out = tree
    (root / "w").symlink_to(out / "secret.txt")
    (root / "wd").symlink_to(out)
    for data in (
        {"path": "w", "content": "PWNED"},
        {"path": "w", "content": "PWNED", "append": True},
        {"path": "w", "content": "UFdORUQ=", "encoding": "base64"},
        {"path": "wd/secret.txt", "content": "PWNED"},
        {"path": "wd/secret.txt", "content": "PWNED", "append": True, "mkdir": True},
        {"path": str(root / "w"), "content": "PWNED"},
    ):
        res = fs_write(str(root), data)
        assert "error" in res and "written" not in res, data
    outside_untouched(out)
    assert os.path.islink(root / "w")  # the link itself is not replaced either


def test_root_dot_dot_symlink_chain(tree):
    """A symlink to '..' inside the root: refused, not followed upward."""
    root, out = tree
    (root / "sub" / "parent").symlink_to("..")
    res, _ = fs_read(str(root), {"path": "sub/parent/a.txt"})
    assert res["error"] == "refusing to follow a symlink: sub/parent"


# ---- races -----------------------------------------------------------------


class OpenRecorder:
    """Wraps os.open and records the calls made from awp.serve.fsroot."""

    def __init__(self, monkeypatch, before=None):
        self.calls: list[tuple[object, int, object]] = []
        self.before = before
        self._real = os.open
        monkeypatch.setattr(os, "open", self)

    def __call__(self, path, flags, mode=0o777, *, dir_fd=None):
        caller = sys._getframe(1).f_globals.get("__name__")
        if caller == fsroot.__name__:
            self.calls.append((path, flags, dir_fd))
            if self.before is not None:
                self.before(path, flags, dir_fd)
        return self._real(path, flags, mode, dir_fd=dir_fd)


def test_every_open_is_dir_fd_relative_and_nofollow(tree, monkeypatch):
    root, _ = tree
    (root / "d1").mkdir()
    rec = OpenRecorder(monkeypatch)
    assert fs_read(str(root), {"path": "sub/b.txt"})[0]["content"] == "sub b"
    assert fs_read(str(root), {"path": "sub"})[0]["dir"] is True
    assert (
        fs_write(str(root), {"path": "d1/x/y/z.txt", "content": "1", "mkdir": True})["written"] == 1
    )
    assert (
        fs_write(str(root), {"path": "sub/b.txt", "content": "2", "append": True})["written"] == 1
    )
    assert rec.calls
    root_opens = [c for c in rec.calls if c[2] is None]
    # the only path opened without a dir_fd is the root itself
    assert root_opens and all(p == str(root) for p, _, _ in root_opens)
    for path, flags, dir_fd in rec.calls:
        if dir_fd is None:
            continue
        assert "/" not in path, path  # one component at a time
        if path != ".":
            assert flags & os.O_NOFOLLOW, (path, flags)


def test_race_dir_swapped_for_symlink_before_walk(tree, monkeypatch):
    """sub is replaced by a symlink to the outside right before it is opened:
    the O_NOFOLLOW|O_DIRECTORY open refuses it."""
    root, out = tree

    def swap(path, flags, dir_fd):
        if path == "sub" and not os.path.islink(root / "sub"):
            os.rename(root / "sub", root / "sub.old")
            os.symlink(out, root / "sub")

    OpenRecorder(monkeypatch, swap)
    (out / "b.txt").write_text(SECRET)
    res, _ = fs_read(str(root), {"path": "sub/b.txt"})
    assert res == {"error": "refusing to follow a symlink: sub", "path": "sub/b.txt"}
    (out / "b.txt").unlink()


def test_race_dir_swapped_after_walk_write(tree, monkeypatch):
    """sub is replaced by a symlink after the walk opened it, right before the
    final open: the write lands in the directory fd already held (the real,
    renamed directory), never outside."""
    root, out = tree

    def swap(path, flags, dir_fd):
        if path == "secret.txt" and not os.path.islink(root / "sub"):
            os.rename(root / "sub", root / "sub.old")
            os.symlink(out, root / "sub")

    OpenRecorder(monkeypatch, swap)
    res = fs_write(str(root), {"path": "sub/secret.txt", "content": "PWNED"})
    assert res == {"path": "sub/secret.txt", "written": 5}
    assert (root / "sub.old" / "secret.txt").read_text() == "PWNED"
    outside_untouched(out)


def test_race_dir_swapped_after_walk_read(tree, monkeypatch):
    root, out = tree
    (root / "sub" / "secret.txt").write_text("inner")

    def swap(path, flags, dir_fd):
        if path == "secret.txt" and not os.path.islink(root / "sub"):
            os.rename(root / "sub", root / "sub.old")
            os.symlink(out, root / "sub")

    OpenRecorder(monkeypatch, swap)
    res, _ = fs_read(str(root), {"path": "sub/secret.txt"})
    assert res["content"] == "inner"  # read through the held fd, never SECRET


def test_race_final_file_swapped_for_symlink(tree, monkeypatch):
    """The file itself becomes a symlink between the lstat check and the open."""
    root, out = tree

    def swap(path, flags, dir_fd):
        if path == "a.txt" and not os.path.islink(root / "a.txt"):
            os.unlink(root / "a.txt")
            os.symlink(out / "secret.txt", root / "a.txt")

    OpenRecorder(monkeypatch, swap)
    res, _ = fs_read(str(root), {"path": "a.txt"})
    assert res == {"error": "refusing to follow a symlink: a.txt", "path": "a.txt"}


def test_race_final_file_swapped_for_symlink_on_write(tree, monkeypatch):
    root, out = tree

    def swap(path, flags, dir_fd):
        if path == "a.txt" and not os.path.islink(root / "a.txt"):
            os.unlink(root / "a.txt")
            os.symlink(out / "secret.txt", root / "a.txt")

    OpenRecorder(monkeypatch, swap)
    res = fs_write(str(root), {"path": "a.txt", "content": "PWNED"})
    assert res == {"error": "refusing to follow a symlink: a.txt", "path": "a.txt"}
    outside_untouched(out)


def test_race_mkdir_component_swapped(tree, monkeypatch):
    """With mkdir, a directory it just created is swapped for a symlink before
    it is opened: refused."""
    root, out = tree
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        if path == "new":
            os.rename(root / "new", root / "new.old")
            os.symlink(out, root / "new")

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    res = fs_write(str(root), {"path": "new/secret.txt", "content": "PWNED", "mkdir": True})
    assert res == {"error": "refusing to follow a symlink: new", "path": "new/secret.txt"}
    outside_untouched(out)
