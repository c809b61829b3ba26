"""The awp home: where one identity lives, and the files around it.

Everything here is stdlib-only and cheap to import: the CLI and the hooks
need the home's paths without loading the daemon.
"""

from __future__ import annotations

import errno
import fcntl
import os

DEFAULT_HOME = "~/.awp"


class HomeError(Exception):
    """The home cannot be used (permissions, read-only disk, corrupt files)."""


def resolve_home(flag: str | None = None) -> str:
    """``--home`` beats ``$AWP_HOME`` beats ``~/.awp``; always absolute."""
    raw = flag or os.environ.get("AWP_HOME") or DEFAULT_HOME
    return os.path.abspath(os.path.expanduser(raw))


def ensure_home(home: str) -> None:
    """Create the home (0700) if needed; refuse one we cannot write."""
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
    except OSError as e:
        raise HomeError(f"cannot create home {home}: {e.strerror}") from None
    if not os.path.isdir(home):
        raise HomeError(f"home {home} is not a directory")
    try:
        st = os.stat(home)
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.chmod(home, 0o700)
    except OSError:
        pass
    if not os.access(home, os.W_OK):
        raise HomeError(f"home {home} is not writable")


def path(home: str, name: str) -> str:
    return os.path.join(home, name)


IDENTITY_NAME = "identity.json"


def has_identity(home: str) -> bool:
    """Whether this home already holds an identity (``awp up`` or a daemon made one).

    Commands other than ``awp up``, ``awp daemon`` and ``awp mcp`` refuse to
    start a daemon in a home without one: a mistyped ``AWP_HOME`` would
    otherwise make a new identity and a daemon nobody meant to run.
    """
    return os.path.lexists(path(home, IDENTITY_NAME))


def no_identity_reason(home: str) -> str:
    """The one line that says why nothing was started, and the way out."""
    given = os.environ.get("AWP_HOME")
    where = f" (AWP_HOME={given})" if given else ""
    return (f"no awp identity in {home}{where}: nothing was started. "
            "Check the home, or run `awp up` to create an identity there")


DOWN_NAME = "daemon.down"  # written by ``awp down``, removed by the next daemon's start


def mark_down(home: str) -> None:
    """Say the user stopped this home's daemon: long-running clients (``awp work``) must
    not start it again on their own; an explicit start clears it (:func:`clear_down`)."""
    try:
        fd = os.open(path(home, DOWN_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
    except OSError:
        pass  # a missing home has no daemon and no worker to tell


def is_down(home: str) -> bool:
    return os.path.exists(path(home, DOWN_NAME))


def clear_down(home: str) -> None:
    try:
        os.unlink(path(home, DOWN_NAME))
    except OSError:
        pass


class HomeLock:
    """``daemon.lock``: an flock held for the daemon's lifetime."""

    def __init__(self, home: str) -> None:
        self.file = path(home, "daemon.lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                pid = read_pid(os.path.dirname(self.file))
                who = f" (pid {pid})" if pid else ""
                raise HomeError(f"another awp daemon is running for this home{who}") from None
            raise
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None


def is_locked(home: str) -> bool:
    """Whether a daemon holds this home's lock right now."""
    try:
        fd = os.open(path(home, "daemon.lock"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_pid(home: str) -> int | None:
    try:
        with open(path(home, "daemon.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def default_name() -> str:
    import socket

    return f"awp@{socket.gethostname().split('.')[0] or 'localhost'}"
