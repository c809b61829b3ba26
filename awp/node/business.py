"""Why the daemon keeps a link to a peer: one declared notion of "business".

A link is kept, and redialled with backoff whenever it is down, while there is
business with the peer (SPEC.md section 8, "Keeping links").  Business comes
from several parts of the daemon: lines queued in the outbox and open threads
(the core), topics we subscribe to and the neighbours that carry them, leases
held and queue operations kept for an owner (the board).  Each part declares
its business as a :class:`Source`, and reports new business with
:meth:`Business.begun`, which is also what un-parks a peer after ``bye``.

Two kinds of business are told apart, because only one of them can be made
for us by others:

* business we made ourselves (a line we queued, a topic we subscribed to, a
  lease we hold) is bounded by what we did, and always counts;
* business the link itself makes (the peer was recently active, or it carries
  one of our topics) counts only for the ``limits.kept_peers`` most recently
  connected peers: a crowd of fresh keys that connect once cannot make us
  dial a crowd of addresses.

A parked peer (``bye``) has no business until something new is begun with it
or the user connects to it again.

Sources run on a reader thread (:meth:`Engine.read`) and must only read.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Protocol

import trio

from ..store import links, ops
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("awp.node")

TOUCH_S = 60.0  # how often live links are marked alive in the store


class Source(Protocol):
    """One kind of business with peers, as the part of the daemon that has it sees it."""

    kind: str  # a short label, shown in logs and ``awp peers --json`` ("outbox", ...)
    kept: bool  # True: the link itself makes it (counted for limits.kept_peers peers only)

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        """Whether this business is open with ``peer`` now."""
        ...

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        """Every peer this business is open with now (read at start)."""
        ...


class Queued:
    """Lines in the outbox for the peer."""

    kind, kept = "outbox", False

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        return c.execute("SELECT 1 FROM outbox WHERE peer = ? LIMIT 1", (peer,)).fetchone() \
            is not None

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        return {r[0] for r in c.execute("SELECT DISTINCT peer FROM outbox")}


class OpenThreads:
    """A thread neither side has finished, active within the outbox retention."""

    kind, kept = "thread", False
    _OPEN = " AND mine NOT IN ('done', 'failed', 'closed')" \
            " AND theirs NOT IN ('done', 'failed', 'closed')"

    def __init__(self, retention_s: float) -> None:
        self.retention_ms = int(retention_s * 1000)

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        return c.execute("SELECT 1 FROM threads WHERE peer = ? AND updated >= ?" + self._OPEN
                         + " LIMIT 1", (peer, now - self.retention_ms)).fetchone() is not None

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        return {r[0] for r in c.execute("SELECT DISTINCT peer FROM threads WHERE updated >= ?"
                                        + self._OPEN, (now - self.retention_ms,))}


class Warm:
    """A peer connected within ``limits.warm_for``: reconnect it, so the next
    message or post goes over a warm link instead of waiting for a dial."""

    kind, kept = "warm", True

    def __init__(self, warm_s: float) -> None:
        self.warm_ms = int(warm_s * 1000)

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        return c.execute("SELECT 1 FROM peers WHERE key = ? AND last_seen >= ?",
                         (peer, now - self.warm_ms)).fetchone() is not None

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        return {r[0] for r in c.execute("SELECT key FROM peers WHERE last_seen >= ?",
                                        (now - self.warm_ms,))}


class Business:
    """Every source of business, the parking rule and the cap on kept links."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        cfg = engine.config
        self.sources: list[Source] = [Queued(), OpenThreads(cfg.outbox_ttl)]
        self.warm = Warm(cfg.limits.warm_for)  # asked last: the weakest reason

    def add(self, source: Source) -> None:
        """Declare another kind of business (the board does, at start)."""
        self.sources.append(source)

    def _ordered(self) -> list[Source]:
        """Our own business first, then what links make, warmth last (the kind named)."""
        return [s for s in self.sources if not s.kept] + \
            [s for s in self.sources if s.kept] + [self.warm]

    def _kept_peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        """The peers whose links may be kept for their own sake (limits.kept_peers)."""
        since = now - int(self.engine.config.outbox_ttl * 1000)
        return set(links.recent(c, since, self.engine.config.limits.kept_peers))

    def reason(self, c: sqlite3.Connection, peer: str, now: int) -> str:
        """The first open business with ``peer`` (its kind), or "" for none or parked."""
        row = c.execute("SELECT parked FROM peers WHERE key = ?", (peer,)).fetchone()
        if row is None or row[0]:
            return ""
        kept: set[str] | None = None
        for s in self._ordered():
            if s.kept:
                if kept is None:
                    kept = self._kept_peers(c, now)
                if peer not in kept:
                    continue
            if s.with_peer(c, peer, now):
                return s.kind
        return ""

    def peers(self, c: sqlite3.Connection, now: int) -> dict[str, str]:
        """Every peer with open business (not parked), with its first kind."""
        free = {r[0] for r in c.execute("SELECT key FROM peers WHERE parked = 0")}
        kept = self._kept_peers(c, now)
        out: dict[str, str] = {}
        for s in self._ordered():
            for key in s.peers(c, now):
                if key in free and key not in out and (key in kept or not s.kept):
                    out[key] = s.kind
        return out

    async def begun(self, peer: str) -> None:
        """New business with ``peer``: un-park it and dial now (backoff reset)."""
        await self.unpark(peer)
        self.engine.peers.kick(peer)

    async def unpark(self, peer: str) -> None:
        """End a park (``bye``): the user connects again, or business begins."""
        await self.engine.writer.run(lambda c: ops.set_parked(c, peer, False))

    async def run(self) -> None:
        """Mark live links alive in the store every minute, and forget stale carriers."""
        eng = self.engine
        while True:
            await trio.sleep(TOUCH_S)
            live = eng.peers.live_keys()
            now = now_ms()
            since = now - int(eng.config.outbox_ttl * 1000)
            try:
                await eng.writer.run(lambda c, ks=live, t=now, s=since: (
                    links.touch(c, ks, t), links.prune(c, s)))
            except Exception as e:  # the store failed us: try again next minute
                log.error("marking live links failed: %s", e)


__all__ = ["Business", "OpenThreads", "Queued", "Source", "Warm"]
