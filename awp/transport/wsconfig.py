"""What the WebSocket binding is configured with: its bounds and the extra CAs.

Kept apart from the binding itself so the daemon can configure it (and the
CLI can name the subprotocol) without importing wsproto or ssl.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["SUBPROTOCOL", "WsLimits", "ca_path", "configure", "current"]

SUBPROTOCOL = "awp.v0"  # Sec-WebSocket-Protocol: what marks an AWP connection
HEALTH_PATH = "/healthz"
CA_FILE = "ws-ca.pem"  # in the home: certificates ``awp connect --ca`` was handed


def ca_path(home: str) -> str:
    """Where the home keeps its extra wss:// CAs."""
    return os.path.join(home, CA_FILE)


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
