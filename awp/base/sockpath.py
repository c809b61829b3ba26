"""Where the daemon's local API socket lives for a given home directory.

AF_UNIX socket paths are limited to about 108 bytes by the kernel (less on
some systems), and homes inside deep temp or project directories easily go
past that. So the socket normally sits at ``<home>/awp.sock``, but when that
path would be longer than 100 bytes it moves to a short private directory and
``<home>/awp.sock.path`` records where it went, so every client finds it with
one small file read.

This module is imported by the hook fast path, so it uses only ``os`` at
import time; ``hashlib`` (a few ms to load because of OpenSSL) is imported only
when the fallback is actually needed.
"""

from __future__ import annotations

import os
import stat

from .files import write_private

SOCKET_NAME = "awp.sock"
POINTER_NAME = "awp.sock.path"

#: Longest ``<home>/awp.sock`` we use in place; beyond it we fall back.
MAX_DIRECT_PATH = 100

#: Parent of the per-user fallback directory; a module attribute so tests can
#: point it somewhere harmless.
_TMP_ROOT = "/tmp"


def socket_path_for_home(home: str, *, create: bool = True) -> str:
    """Return the path the daemon for ``home`` binds its socket to.

    With ``create`` (the daemon's view) the private ``/tmp/awp-<uid>``
    fallback directory is created if missing. Clients pass ``create=False``:
    they must not leave directories behind just by looking for a daemon.
    Either way an existing fallback directory that we do not own, that is a
    symlink or that is not a directory is refused with ``OSError``, because
    a socket there could be someone else's.
    """
    direct = os.path.join(home, SOCKET_NAME)
    if len(direct.encode()) <= MAX_DIRECT_PATH:
        return direct
    import hashlib  # only here: it is slow to import and rarely needed

    digest = hashlib.sha256(home.encode()).hexdigest()[:16]
    name = f"awp-{digest}.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        # The runtime dir is per-user and 0700 by its specification.
        return os.path.join(runtime, name)
    private = os.path.join(_TMP_ROOT, f"awp-{os.getuid()}")
    _check_private_dir(private, create=create)
    return os.path.join(private, name)


def _check_private_dir(path: str, *, create: bool) -> None:
    """Make sure ``path`` is a real directory owned by us and closed to others.

    ``/tmp`` is shared, so another user could have created the directory
    first to capture our socket; ``lstat`` (not ``stat``) so a symlink planted
    there is caught instead of followed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return  # nothing there yet: the daemon is simply not running
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # a concurrent starter made it; verify it like any other
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(f"refusing to use {path} for the awp socket: it is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"refusing to use {path} for the awp socket: it is not a directory")
    if st.st_uid != os.getuid():
        raise OSError(
            f"refusing to use {path} for the awp socket: it belongs to uid {st.st_uid},"
            f" not to us (uid {os.getuid()})"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        # Ours, so tightening it is safe (mkdir is subject to the umask too).
        os.chmod(path, 0o700)


def find_socket(home: str) -> str:
    """Return the socket path a client should connect to for ``home``.

    The pointer file wins because the daemon may have been started with a
    different ``XDG_RUNTIME_DIR`` than the client sees (for example from a
    systemd unit versus an editor's terminal).
    """
    try:
        with open(os.path.join(home, POINTER_NAME), encoding="utf-8") as f:
            pointed = f.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        pointed = ""
    if pointed:
        return pointed
    return socket_path_for_home(home, create=False)


def write_socket_pointer(home: str, path: str) -> None:
    """Record in ``<home>/awp.sock.path`` (mode 0600) where the socket is.

    Written to a temp file and renamed so a client never reads half a path.
    """
    write_private(os.path.join(home, POINTER_NAME), path + "\n")


def remove_socket_pointer(home: str) -> None:
    """Remove the pointer file; a missing one is fine (idempotent shutdown)."""
    _unlink_quietly(os.path.join(home, POINTER_NAME))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
