"""What the store remembers about links, so they can be kept after a drop or a restart.

Two facts, both written while a link is up and read when it is down:

* ``peers.last_seen``: when a connection with the peer was last alive (set at
  the handshake, touched every minute while connected and when it closes).
  It says which peers were recently active, and after a ``kill -9`` it still
  says who our neighbours were, give or take a minute.
* ``peer_topics``: which neighbour listed, in its ``board-sub``, a topic we
  subscribe to.  Such a link carries the topic (we relay to it, or it relays
  to us), so losing it cuts everyone behind it off; the daemon redials it.

Pure functions of a SQLite connection; the rules that use them are in
:mod:`awp.node.business`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

# peer_topics rows kept at most (the oldest go first): every row is a
# (neighbour, topic we subscribe to) pair a peer made us write by subscribing.
MAX_ROWS = 16384


def heard(c: sqlite3.Connection, peer: str, topics: Iterable[str], dropped: Iterable[str],
          now: int) -> None:
    """``peer`` listed ``topics`` (ones we subscribe to) and dropped ``dropped``."""
    c.executemany(
        "INSERT INTO peer_topics (peer, topic, heard) VALUES (?, ?, ?)"
        " ON CONFLICT (peer, topic) DO UPDATE SET heard = excluded.heard",
        [(peer, t, now) for t in topics])
    c.executemany("DELETE FROM peer_topics WHERE peer = ? AND topic = ?",
                  [(peer, t) for t in dropped])


def carries(c: sqlite3.Connection, peer: str) -> bool:
    """The link with ``peer`` carries a topic we still subscribe to."""
    return c.execute(
        "SELECT 1 FROM peer_topics p JOIN board_subs s ON s.topic = p.topic"
        " WHERE p.peer = ? LIMIT 1", (peer,)).fetchone() is not None


def carriers(c: sqlite3.Connection) -> set[str]:
    """Every neighbour whose link carries a topic we still subscribe to."""
    return {r[0] for r in c.execute(
        "SELECT DISTINCT p.peer FROM peer_topics p JOIN board_subs s ON s.topic = p.topic")}


def touch(c: sqlite3.Connection, keys: Iterable[str], now: int) -> None:
    """The connections with ``keys`` are alive now."""
    c.executemany("UPDATE peers SET last_seen = ? WHERE key = ? AND last_seen < ?",
                  [(now, k, now) for k in keys])


def recent(c: sqlite3.Connection, since: int, n: int) -> list[str]:
    """The ``n`` peers (not parked) most recently connected, all since ``since``."""
    return [r[0] for r in c.execute(
        "SELECT key FROM peers WHERE parked = 0 AND last_seen >= ?"
        " ORDER BY last_seen DESC, key LIMIT ?", (since, n))]


def prune(c: sqlite3.Connection, since: int) -> int:
    """Forget carriers not connected since ``since`` or of topics we left; cap the rows."""
    n = c.execute(
        "DELETE FROM peer_topics WHERE topic NOT IN (SELECT topic FROM board_subs)"
        " OR peer NOT IN (SELECT key FROM peers WHERE last_seen >= ?)", (since,)).rowcount
    n += c.execute(
        "DELETE FROM peer_topics WHERE rowid IN (SELECT rowid FROM peer_topics"
        " ORDER BY heard DESC LIMIT -1 OFFSET ?)", (MAX_ROWS,)).rowcount
    return n


__all__ = ["MAX_ROWS", "carriers", "carries", "heard", "prune", "recent", "touch"]
