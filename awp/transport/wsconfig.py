"""What the WebSocket binding is configured with: its bounds and the extra CAs.

Kept apart from the binding itself so the daemon and the CLI can read and
set it without importing wsproto or ssl (the names on the wire are in
:mod:`awp.wire.wsnames`).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

__all__ = ["WsLimits", "ca_path", "configure", "current", "read_ca_file"]

CA_FILE = "ws-ca.pem"  # in the home: certificates ``awp connect --ca`` was handed
MAX_CA_BYTES = 256 * 1024  # what one awp connect --ca may hand in
MAX_CA_FILE_BYTES = 1024 * 1024  # the whole file, however many --ca went into it


def ca_path(home: str) -> str:
    """Where the home keeps its extra wss:// CAs."""
    return os.path.join(home, CA_FILE)


def read_ca_file(path: str) -> str:
    """The home's CA file as text ("" when there is none), read without following a link.

    The file sits in the home, so it is input like any other: a symlink, a
    device or an oversized file is refused in words rather than trusted.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return ""
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link; it must be a regular file") from None
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = f.read(MAX_CA_FILE_BYTES + 1)
    if len(data) > MAX_CA_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_CA_FILE_BYTES // 1024} KiB")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not PEM text (a byte outside ASCII)") from None


@dataclass(frozen=True)
class WsLimits:
    """Bounds on one WebSocket connection and on a listener's pending upgrades."""

    handshake_timeout: float = 10.0  # TCP accept (or dial) to the upgrade answered
    frame_bytes: int = 2 * 1024 * 1024  # one data frame's payload
    message_bytes: int = 4 * 1024 * 1024  # one message (its frames together)
    upgrades_per_ip: int = 16  # connections from one source address still upgrading
    request_bytes: int = 16 * 1024  # the HTTP request (or response) line and headers
    send_chunk: int = 256 * 1024  # the largest message we send


@dataclass(frozen=True)
class WsConfig:
    limits: WsLimits = WsLimits()
    ca_file: str = ""  # PEM certificates trusted for wss:// beside the system store (if it exists)


_current = WsConfig()


def configure(limits: WsLimits | None = None, ca_file: str | None = None) -> WsConfig:
    """Set the binding's bounds and extra CA file for this process (the daemon, at start)."""
    global _current
    _current = WsConfig(limits=limits or _current.limits,
                        ca_file=_current.ca_file if ca_file is None else ca_file)
    return _current


def current() -> WsConfig:
    return _current
