"""The dashboard's secret: one token per home, kept in ``<home>/web.token``.

``awp web`` listens on a TCP port that every local user (and, off loopback,
anyone who can reach it) can connect to, while the daemon's socket is
owner-only.  So the dashboard asks for a secret only the home's owner can
read: 32 random bytes, base64url, in a 0600 file.  ``awp web`` prints a URL
carrying it; the page trades it for a cookie (see :mod:`awp.web.server`).

The token outlives ``awp web`` restarts, so a browser's cookie keeps working;
deleting the file makes a new one (and logs every browser out).
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat

TOKEN_NAME = "web.token"
_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


def token_path(home: str) -> str:
    return os.path.join(home, TOKEN_NAME)


def _read(path: str) -> str | None:
    """The token in ``path`` if the file is ours, private and well formed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                or stat.S_IMODE(st.st_mode) & 0o077):
            return None  # someone else's, or readable by others: it may have leaked
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    return text if _SHAPE.fullmatch(text) else None


def load_or_create(home: str) -> str:
    """The home's dashboard token, made (0600) on first use or when unusable.

    Two ``awp web`` starting at once agree on one token: the new file is
    linked into place only if none is there yet.
    """
    path = token_path(home)
    for _ in range(3):
        try:
            found = _read(path)
        except OSError:
            found = None
        if found is not None:
            return found
        token = secrets.token_urlsafe(32)
        tmp = f"{path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (token + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            if os.path.lexists(path):
                os.replace(tmp, path)  # unusable: replace it
                return token
            try:
                os.link(tmp, path)
                return token
            except FileExistsError:
                continue  # another awp web made one just now: use theirs
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
    raise OSError(f"cannot settle on a dashboard token in {path}")


def same(given: str, token: str) -> bool:
    """Constant-time comparison (the time taken tells nothing about the token)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())
