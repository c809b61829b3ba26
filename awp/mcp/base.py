"""What every MCP tool module shares: the tool record, its context, its error.

Kept apart from :mod:`awp.mcp.tools` so that tool modules (the board's, in
:mod:`awp.mcp.board`) can use them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..localapi.client import LocalClient

#: Longest block allowed for a tool's wait_seconds (awp_read, awp_get).
MAX_WAIT = 600.0
#: A long wait is asked of the daemon in slices this long, so a cancelled
#: call stops holding the daemon soon after.
WAIT_SLICE = 10.0


class Reply(str):
    """A tool's text, with the seqs of the records it shows and what undoes it.

    The server marks those records read (``POST /v1/seen``) only after it
    has written the result to its client: a tool never marks what the model
    may not get. ``undo`` gives back what the call obtained (a lease) when
    the client cancelled it: no one will act on a result nobody receives.
    """

    seen: tuple[int, ...]
    undo: Callable[[], object] | None

    def __new__(cls, text: str, seen: list[int] | tuple[int, ...] = (),
                undo: Callable[[], object] | None = None) -> Reply:
        obj = super().__new__(cls, text)
        obj.seen = tuple(seen)
        obj.undo = undo
        return obj


class ToolError(Exception):
    """A tool call that cannot be carried out; the message is for the model."""


@dataclass
class Context:
    """What a tool needs from the server."""

    client: Callable[[float | None], LocalClient]  # daemon started on demand
    cancelled: Callable[[], bool]


@dataclass
class Tool:
    name: str
    title: str
    description: str
    schema: dict
    handler: Callable[[dict, Context], str]
    read_only: bool = False

    def listing(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.schema,
            "annotations": {"title": self.title, "readOnlyHint": self.read_only,
                            "openWorldHint": True},
        }


def text_arg(args: dict, key: str) -> str:
    """A string argument, stripped; ``""`` when absent or not a string."""
    v = args.get(key)
    return v.strip() if isinstance(v, str) else ""
