"""Settings the protocol engine runs with (the daemon fills them in)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.limits import Limits

DEFAULT_CAPS = ["chat", "blob", "grant", "introduce", "presence", "mirror", "presence-batch",
                "board", "rotate", "operator", "bulk", "keys", "pair"]
MiB = 1024 * 1024


@dataclass
class NodeConfig:
    name: str
    about: str = ""
    caps: list[str] = field(default_factory=lambda: list(DEFAULT_CAPS))
    # Address sent in hello for dial-back: None means "pick from our listeners",
    # "" or "none" means send none.
    advertise: str | None = None
    # or "allowlist", "invite-only" (awp/node/invites.py), "operator" (node/operators.py)
    accept: str = "any"
    # Sealed links (wire/seal.py): "off", "prefer" (when the peer offers it too),
    # "require-remote" (refuse a plain link unless it is local), "require".
    seal: str = "prefer"
    allow: set[str] = field(default_factory=set)
    trust: set[str] = field(default_factory=set)
    ping_interval: float = 30.0
    outbox_ttl: float = 7 * 24 * 3600.0
    blob_limit: int = 50 * MiB
    trace: bool = False
    allow_plaintext: bool = False
    handshake_timeout: float = 30.0
    resume_wait: float = 15.0
    dialback_grace: float = 15.0
    dial_timeout: float = 30.0
    simultaneous_window: float = 5.0
    bye_linger: float = 5.0
    backoff_start: float = 1.0
    backoff_cap: float = 60.0
    serve: set[str] = field(default_factory=set)  # capabilities fulfilled automatically
    root: str = ""  # directory fs:* are confined to and exec runs in
    stable_after: float = 10.0  # a connection this old resets the redial backoff
    pause_gap: float = 5.0  # clocks this far ahead of a 1 s tick: we slept (pausewatch)
    limits: Limits = field(default_factory=Limits)  # bounds on what others make us hold
