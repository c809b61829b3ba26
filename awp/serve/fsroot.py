"""Confinement of ``fs:read`` / ``fs:write`` paths to a root directory.

Rules (PROFILE.md, "Confinement"):

* A request path is relative to the root. An absolute path is accepted only if
  it lies inside the root (compared lexically against the root as configured
  and against its real path); it is then made relative.
* ``.`` and empty components are dropped. ``..`` is resolved lexically and may
  never climb above the root (``a/../b`` is ``b``; ``a/../../b`` is refused).
* A NUL byte anywhere is refused.
* No symlink is ever followed, anywhere below the root, whether it points out
  of the root or inside it. The root itself may be a symlink (that is the
  operator's choice, resolved once when the root is opened).

How it is enforced, so that a directory swapped for a symlink between a check
and an open cannot escape: the root is opened once as a directory fd, and every
further component is opened with ``os.open(name, ...|O_NOFOLLOW, dir_fd=parent)``
relative to the already-open parent directory fd (``openat`` semantics).
Intermediate directories are opened ``O_PATH|O_NOFOLLOW|O_DIRECTORY``, so a
symlink in their place fails with ``ENOTDIR``; the final component is opened with
``O_NOFOLLOW``, so a symlink there fails with ``ELOOP``. Nothing is ever resolved
by path string from the root again after the walk starts. ``mkdir`` creates
missing parents one component at a time with ``mkdir(name, dir_fd=parent)``
followed by the same ``O_NOFOLLOW|O_DIRECTORY`` open.

Linux-specific (``O_PATH``); where ``O_PATH`` is missing, ``O_RDONLY`` is used.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = os.O_NOFOLLOW
_O_DIRECTORY = os.O_DIRECTORY
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

#: flags for walking through an intermediate directory
DIR_FLAGS = _O_PATH | _O_NOFOLLOW | _O_DIRECTORY | _O_CLOEXEC
#: flags for opening a file (or directory) to read
READ_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
#: flags for opening a file to write (O_APPEND added for append)
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC


class FsError(Exception):
    """A request path that cannot be served; ``str(e)`` is the result's error."""


def components(root: str, path: object) -> list[str]:
    """The components of ``path`` relative to ``root`` (``[]`` is the root).

    Raises :class:`FsError` for a missing or non-string path, a NUL byte, an
    absolute path outside the root, or ``..`` climbing above the root.
    """
    if path is None:
        raise FsError("path is required")
    if not isinstance(path, str):
        raise FsError("path must be a string")
    if "\x00" in path:
        raise FsError("path contains a NUL byte")
    rel = path
    if os.path.isabs(path):
        rel = _inside_root(root, path)
    out: list[str] = []
    for c in rel.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if not out:
                raise FsError("path escapes the root")
            out.pop()
            continue
        out.append(c)
    return out


def _inside_root(root: str, path: str) -> str:
    p = os.path.normpath(path)
    for base in _root_forms(root):
        if p == base:
            return ""
        prefix = base if base.endswith("/") else base + "/"
        if p.startswith(prefix):
            return p[len(prefix) :]
    raise FsError("absolute path outside the root")


def _root_forms(root: str) -> list[str]:
    forms = [os.path.normpath(os.path.abspath(root))]
    try:
        real = os.path.realpath(root)
    except (OSError, ValueError):
        real = None
    if real and real not in forms:
        forms.append(real)
    return forms


def display(comps: list[str], n: int | None = None) -> str:
    """The first ``n`` components joined, for error messages (``.`` for none)."""
    sel = comps if n is None else comps[:n]
    return "/".join(sel) or "."


def open_root(root: str) -> int:
    """An ``O_PATH`` directory fd for the root (the root itself may be a symlink)."""
    if not isinstance(root, str) or not root or "\x00" in root:
        raise FsError("no root configured")
    try:
        return os.open(root, _O_PATH | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as e:
        raise FsError(f"root {root!r} cannot be opened: {e.strerror}") from None


def _explain(parent: int, name: str, shown: str, err: OSError, *, want_dir: bool) -> FsError:
    """Turn a failed open of ``name`` under ``parent`` into a clear FsError."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        return FsError(f"refusing to follow a symlink: {shown}")
    if err.errno == errno.ENOENT:
        return FsError(f"no such file or directory: {shown}")
    if err.errno == errno.ELOOP:
        return FsError(f"refusing to follow a symlink: {shown}")
    if err.errno == errno.ENOTDIR or (want_dir and st is not None and not stat.S_ISDIR(st.st_mode)):
        return FsError(f"not a directory: {shown}")
    return FsError(f"{shown}: {err.strerror or err}")


def _open_dir(parent: int, name: str, shown: str, *, mkdir: bool) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError as e:
        if not mkdir:
            raise _explain(parent, name, shown, e, want_dir=True) from None
    except OSError as e:
        raise _explain(parent, name, shown, e, want_dir=True) from None
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # created meanwhile (or a symlink / file appeared): the open decides
    except OSError as e:
        raise FsError(f"cannot create directory {shown}: {e.strerror or e}") from None
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        raise _explain(parent, name, shown, e, want_dir=True) from None


def walk(rootfd: int, comps: list[str], *, mkdir: bool = False) -> int:
    """Open the directory ``comps`` below ``rootfd``, one component at a time.

    Returns a new ``O_PATH`` directory fd the caller must close. Each step is
    ``openat(parent, name, O_PATH|O_NOFOLLOW|O_DIRECTORY)``, so a symlink at any
    step fails instead of being followed. With ``mkdir``, missing directories are
    created one at a time.
    """
    cur = os.dup(rootfd)
    try:
        for i, name in enumerate(comps):
            nxt = _open_dir(cur, name, display(comps, i + 1), mkdir=mkdir)
            os.close(cur)
            cur = nxt
    except BaseException:
        os.close(cur)
        raise
    return cur


@contextmanager
def _rooted(root: str) -> Iterator[int]:
    fd = open_root(root)
    try:
        yield fd
    finally:
        os.close(fd)


def open_for_read(root: str, path: object) -> tuple[int, os.stat_result, list[str]]:
    """Open ``path`` below ``root`` for reading, never following a symlink.

    Returns ``(fd, stat, components)``; ``fd`` is ``O_RDONLY`` (a directory fd
    for a directory) and the caller closes it. Only regular files and
    directories are opened.
    """
    comps = components(root, path)
    with _rooted(root) as rootfd:
        if not comps:
            fd = os.open(".", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC, dir_fd=rootfd)
            return fd, os.fstat(fd), comps
        parent = walk(rootfd, comps[:-1])
    try:
        name, shown = comps[-1], display(comps)
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            raise _explain(parent, name, shown, e, want_dir=False) from None
        if stat.S_ISLNK(st.st_mode):
            raise FsError(f"refusing to follow a symlink: {shown}")
        is_dir = stat.S_ISDIR(st.st_mode)
        if not (is_dir or stat.S_ISREG(st.st_mode)):
            raise FsError(f"not a regular file or directory: {shown}")
        flags = READ_FLAGS | (_O_DIRECTORY if is_dir else 0)
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except OSError as e:
            raise _explain(parent, name, shown, e, want_dir=is_dir) from None
        st2 = os.fstat(fd)
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise FsError(f"{shown} changed while being opened")
        return fd, st2, comps
    finally:
        os.close(parent)


def open_for_write(
    root: str, path: object, *, append: bool = False, mkdir: bool = False
) -> tuple[int, list[str]]:
    """Open (creating) a regular file below ``root`` to write, never following a symlink.

    The file is truncated unless ``append``. ``mkdir`` creates missing parent
    directories. Returns ``(fd, components)``; the caller closes ``fd``.
    """
    comps = components(root, path)
    if not comps:
        raise FsError("cannot write to the root directory")
    if isinstance(path, str) and path.endswith("/"):
        raise FsError(f"is a directory: {display(comps)}")
    with _rooted(root) as rootfd:
        parent = walk(rootfd, comps[:-1], mkdir=mkdir)
    try:
        name, shown = comps[-1], display(comps)
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise _explain(parent, name, shown, e, want_dir=False) from None
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                raise FsError(f"refusing to follow a symlink: {shown}")
            if stat.S_ISDIR(st.st_mode):
                raise FsError(f"is a directory: {shown}")
            if not stat.S_ISREG(st.st_mode):
                raise FsError(f"not a regular file: {shown}")
        flags = WRITE_FLAGS | (os.O_APPEND if append else 0)
        try:
            fd = os.open(name, flags, 0o666, dir_fd=parent)
        except OSError as e:
            raise _explain(parent, name, shown, e, want_dir=False) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FsError(f"not a regular file: {shown}")
            if not append:
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd, comps
    finally:
        os.close(parent)
