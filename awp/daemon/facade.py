"""The routes' typed door to the node: the store and the engine behind named calls.

Routes (``daemon/api*.py``) run no SQL and hold no writer: a read is a
function of :mod:`awp.store` run on a reader thread, and every write is one
of the calls below, each one transaction on the engine's writer.  The
extensions the daemon loaded (presence, board, mirror) are declared in
:class:`Parts` with their types, so a route reads ``parts.presence`` instead
of probing the engine with ``getattr``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..node.board import Board
from ..node.board_queue import BoardQueue
from ..node.engine import Engine
from ..node.mirror import Mirror
from ..node.presence import Presence
from ..store import board as boardstore
from ..store import grants as grantstore
from ..store import ops

T = TypeVar("T")


@dataclass
class Parts:
    """The extensions this daemon runs; ``None`` for one it did not load."""

    presence: Presence | None = None
    board: Board | None = None
    queue: BoardQueue | None = None
    mirror: Mirror | None = None


class Door:
    """Named reads and writes for the local API's routes."""

    def __init__(self, engine: Engine, parts: Parts) -> None:
        self.engine = engine
        self.parts = parts

    async def read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """Run a store query (a function of :mod:`awp.store`) on a reader thread."""
        return await self.engine.read(query)

    async def set_alias(self, alias: str, key: str) -> None:
        await self.engine.writer.run(lambda c: ops.set_alias(c, alias, key))

    async def mark_read(self, seqs: list[int]) -> None:
        """Mark these log records read (the agent has been shown them)."""
        await self.engine.writer.run(lambda c: ops.mark_read(c, seqs))

    async def mark_seen(self, seqs: list[int], upto: dict[str, int]) -> int:
        """Mark read what a hook printed, in one transaction: log records by seq
        (inbound and notices) and board topics up to a seq; how many rows changed."""
        def job(c: sqlite3.Connection) -> int:
            before = c.total_changes
            ops.mark_seen(c, seqs)
            boardstore.mark_read(c, upto)
            return c.total_changes - before

        return await self.engine.writer.run(job)

    async def mark_posts_read(self, upto: dict[str, int]) -> None:
        """Mark board posts read up to a seq per topic."""
        await self.engine.writer.run(lambda c: boardstore.mark_read(c, upto))

    async def remember(self, key: str, value: str) -> None:
        """Keep a setting (model, harness) across restarts."""
        await self.engine.writer.run(lambda c: ops.set_meta(c, "remember." + key, value))

    async def revoke(self, prefix: str) -> list[str]:
        """Revoke every grant whose hash starts with ``prefix``; the hashes revoked."""
        return await self.engine.writer.run(lambda c: grantstore.revoke(c, prefix))

    async def revoke_all(self, hashes: list[str]) -> None:
        await self.engine.writer.run(lambda c: [grantstore.revoke(c, h) for h in hashes])

    async def queue_snapshot(self, topic: str) -> list[dict] | None:
        """The arbiter's view of a work queue (it may settle expired leases, hence a write)."""
        queue = self.parts.queue
        if queue is None:
            return None
        return await self.engine.writer.run(lambda c: queue.snapshot(c, topic))

    async def queue_view(self, topic: str) -> tuple[list[dict] | None, dict[str, int]]:
        """The arbiter's view of a work queue and the strikes it counts against each
        worker (the market), in one store round trip: ``awp queue`` waits on both."""
        queue = self.parts.queue
        if queue is None:
            return None, {}
        return await self.engine.writer.run(
            lambda c: (queue.snapshot(c, topic), queue.strikes(c, topic)))
