"""The one interface through which extensions plug into the engine.

Presence, the board, mirroring and serving each add line types or act on
stored lines; the engine calls every loaded extension at the same few points
of a connection's life.  They subclass :class:`Extension` and override only
the hooks they need: the defaults do nothing, so the engine calls each hook
directly instead of probing for it by name.

Where each hook runs matters:

* ``stored_inbound`` runs on the writer thread inside the transaction that
  stores the line, so a decision and the line it concerns commit together;
  it returns reply lines (dicts) or work to start after the commit.
* ``stored_hello`` runs on the writer thread inside the transaction that
  records a peer's hello, so a decision made by comparing the hello with
  what we knew before commits with the new record: a connection dropped
  right after its handshake cannot leave the record changed and the
  decision unmade.
* ``on_line`` gets the line types the session core does not know, on the
  event loop, in arrival order; True when the extension took the line.
* ``serve_side`` takes over a connection whose hello named one of the
  extension's ``sides``, after admission and instead of a resume.
* The others run on the event loop and must not block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import sqlite3

    from .connection import Connection


class Extension(Protocol):
    """Hooks an engine extension may override (all optional)."""

    async def on_start(self) -> None:
        """The engine runs: start background work (runs in its own task)."""

    async def admits(self, conn: Connection) -> bool:
        """True to admit a peer the allowlist would refuse."""
        return False

    async def on_established(self, conn: Connection, prev: dict) -> None:
        """A connection passed its handshake; ``prev`` is what we knew of the peer."""

    def stored_hello(self, c: sqlite3.Connection, conn: Connection, prev: dict,
                     now: int) -> list[dict]:
        """Writer thread, in the transaction recording the hello: changes to publish."""
        return []

    def stored_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, seq: int,
                       now: int) -> list[Any]:
        """Writer thread, in the storing transaction: replies and work to start."""
        return []

    def on_err(self, conn: Connection, line: dict) -> None:
        """The peer sent an err."""

    def on_grants(self, conn: Connection) -> None:
        """A grant line from this peer was stored."""

    async def on_invited(self, key: str, topics: list[dict]) -> None:
        """An invite admitted ``key`` just now; ``topics`` are the topic rights it
        carries: ``{"topic": OWNER/NAME, "can": "read"|"post", "until_ms": ...}``."""

    async def on_line(self, conn: Connection, line: dict, raw: bytes) -> bool:
        """A line type the core does not handle; True when this extension took it."""
        return False

    #: ``hello.side`` names this extension serves (a side connection is one
    #: authenticated like a link but carrying its own bytes, never a resume).
    sides: tuple[str, ...] = ()

    async def serve_side(self, conn: Connection, rest: bytes) -> None:
        """A peer's side connection named in ``sides``; ``rest`` is what was read
        past its handshake.  Returning (or raising) ends the connection."""
