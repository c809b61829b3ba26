"""The board's business with peers, declared to :mod:`awp.node.business`.

A board topic reaches a host over a path of subscribers, so a host has
business with more than the topic's owner:

* ``subscription``: the owner of a topic we subscribe to (its records start
  there; its queue is arbitrated there);
* ``relay``: a neighbour that listed, in its ``board-sub``, a topic we
  subscribe to.  The link carries the topic one way or the other, and if it
  stays down everyone behind it misses the posts.  Made by the link, so it is
  a kept link (``limits.kept_peers``), and remembered in ``peer_topics`` so a
  daemon that restarts after ``kill -9`` redials its former neighbours;
* ``queue``: an owner we keep a ``complete``, ``fail`` or ``release`` for
  (``board_pending``), or whose lease we hold now.

:func:`register` declares the three; :func:`heard` is called as board-subs
arrive.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..store import links
from ..wire.board import MAX_LEASE_S, current_owner, former_keys
from ..wire.timefmt import now_ms, parse_ts

if TYPE_CHECKING:
    from .engine import Engine


def _owned_by(peer: str) -> tuple[str, str]:
    """Bounds of the topics ``peer`` owns ("<owner key>/<name>"; "0" follows "/")."""
    return peer + "/", peer + "0"


class Subscribed:
    """The owner of a topic we subscribe to."""

    kind, kept = "subscription", False

    def __init__(self, me: str) -> None:
        self.me = me

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        # its topics may be named by a key it rotated from
        return any(c.execute("SELECT 1 FROM board_subs WHERE topic > ? AND topic < ? LIMIT 1",
                             _owned_by(key)).fetchone() is not None
                   for key in (peer, *former_keys(peer)))

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        owners = {current_owner(r[0].split("/", 1)[0])
                  for r in c.execute("SELECT topic FROM board_subs")}
        owners.discard(self.me)
        return owners


class Carried:
    """A neighbour whose link carries a topic we subscribe to."""

    kind, kept = "relay", True

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        return links.carries(c, peer)

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        return links.carriers(c)


class QueueWork:
    """An owner we keep a queue operation for, or whose lease we hold."""

    kind, kept = "queue", False

    def __init__(self, me: str) -> None:
        self.me = me

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        lo, hi = _owned_by(peer)
        if c.execute("SELECT 1 FROM board_pending WHERE topic > ? AND topic < ? AND until > ?"
                     " LIMIT 1", (lo, hi, now)).fetchone():
            return True
        return bool(self._held(c, now, lo, hi))

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        owners = {r[0].split("/", 1)[0] for r in c.execute(
            "SELECT topic FROM board_pending WHERE until > ?", (now,))}
        owners |= {t.split("/", 1)[0] for t in self._held(c, now, "", "\U0010ffff")}
        return {current_owner(o) for o in owners}

    def _held(self, c: sqlite3.Connection, now: int, lo: str, hi: str) -> set[str]:
        """Topics (between ``lo`` and ``hi``) where our lease on some item is current.

        Only lease records of the last day can matter (a lease lasts at most
        ``MAX_LEASE_S``), and of those each item's newest says who holds it.
        """
        newest: dict[tuple[str, str], dict] = {}
        for topic, raw in c.execute(
                "SELECT topic, raw FROM board_records WHERE topic > ? AND topic < ?"
                " AND kind = 'lease' AND ts >= ? ORDER BY ts, hash",
                (lo, hi, now - MAX_LEASE_S * 1000)):
            doc = json.loads(raw)
            newest[(topic, str(doc.get("of")))] = doc
        return {topic for (topic, _item), d in newest.items()
                if d.get("holder") == self.me and d.get("state") in ("claimed", "renewed")
                and parse_ts(str(d.get("until"))) > now}


def register(engine: Engine) -> None:
    """Declare the board's business with peers."""
    me = engine.identity.key
    for source in (Subscribed(me), Carried(), QueueWork(me)):
        engine.business.add(source)


async def heard(engine: Engine, peer: str, topics: Iterable[str],
                dropped: Iterable[str]) -> None:
    """``peer`` listed ``topics`` (ones we subscribe to) and dropped ``dropped``."""
    topics, dropped = list(topics), list(dropped)
    if topics or dropped:
        await engine.writer.run(lambda c: links.heard(c, peer, topics, dropped, now_ms()))


__all__ = ["Carried", "QueueWork", "Subscribed", "heard", "register"]
