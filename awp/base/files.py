"""The one atomic write of a small file: temp file beside it, fsync, rename.

A reader (another awp process, a client reading the socket pointer, a
harness reading its config) sees the old file or the new one, never half of
one; a crash leaves at most a temp file, never a truncated target.  The temp
file is created with the final mode and ``O_NOFOLLOW``/``O_EXCL`` so a link
planted at its name is not followed and its content is never readable by
others, even for a moment.  Every awp file that holds a secret or that
another process reads whole is written here (home files, the socket pointer,
tailcat's state, harness configs, the systemd unit).

Stdlib only and cheap to import: the CLI and the hooks use it.
"""

from __future__ import annotations

import os


def write_atomic(file: str, data: str | bytes, mode: int = 0o600) -> None:
    """Replace ``file`` with ``data`` (text is UTF-8) in one rename, with ``mode``.

    Raises ``OSError`` (the temp file removed) when the directory cannot be
    written; the old file is then untouched.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    parent, base = os.path.split(file)
    tmp = os.path.join(parent, f".{base}.awp-tmp-{os.getpid()}")
    try:
        os.unlink(tmp)  # a leftover of an earlier crash of this pid number
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode & 0o600)
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_private(file: str, data: str | bytes) -> None:
    """Replace ``file`` atomically with mode 0600 (secrets, pids, pointers)."""
    write_atomic(file, data, 0o600)
