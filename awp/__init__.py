"""awp: a peer daemon and CLI for the Agent Wire Protocol (draft 1, v 0)."""

__version__ = "0.5.0"
PROTOCOL_VERSION = 0
