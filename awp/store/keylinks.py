"""Key links we carry and those peers showed us (awp/wire/keylink.py).

Only whole statements are kept (every listed key signed).  ``mine`` marks
the ones that list our own key: those we carry in our auth.  A key's
identity is every key reachable from it through kept statements.
"""

from __future__ import annotations

import json
import sqlite3

from ..wire import keylink as K
from ..wire.canonical import canonical_json

#: Statements kept that do not list our key: bounded, oldest dropped first.
MAX_FOREIGN = 4096


def keep(c: sqlite3.Connection, link: K.KeyLink, mine: bool, now: int) -> bool:
    """Store ``link``; True when it was new (or newly ours)."""
    row = c.execute("SELECT mine FROM keylinks WHERE id = ?", (link.id,)).fetchone()
    if row is not None:
        if mine and not row[0]:
            c.execute("UPDATE keylinks SET mine = 1 WHERE id = ?", (link.id,))
            return True
        return False
    c.execute("INSERT INTO keylinks (id, keys, ts, raw, mine, created) VALUES (?, ?, ?, ?, ?, ?)",
              (link.id, json.dumps(list(link.keys)), link.ts_ms, canonical_json(link.raw),
               int(mine), now))
    n = c.execute("SELECT count(*) FROM keylinks WHERE mine = 0").fetchone()[0]
    if n > MAX_FOREIGN:
        c.execute("DELETE FROM keylinks WHERE id IN (SELECT id FROM keylinks WHERE mine = 0"
                  " ORDER BY created LIMIT ?)", (n - MAX_FOREIGN,))
    return True


def carried(c: sqlite3.Connection) -> list[dict]:
    """The statements we carry (newest first, at most ``MAX_CARRIED``)."""
    return [json.loads(r[0]) for r in c.execute(
        "SELECT raw FROM keylinks WHERE mine = 1 ORDER BY ts DESC LIMIT ?", (K.MAX_CARRIED,))]


def identity_of(c: sqlite3.Connection, key: str, limit: int = 64) -> list[str]:
    """The other keys linked to ``key``, directly or through other links, sorted."""
    seen, todo = {key}, [key]
    while todo and len(seen) < limit:
        k = todo.pop()
        for (keys,) in c.execute("SELECT keys FROM keylinks WHERE keys LIKE ?",
                                 (f'%"{k}"%',)):
            for other in json.loads(keys):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
    seen.discard(key)
    return sorted(seen)


def listing(c: sqlite3.Connection) -> list[dict]:
    return [{"id": r[0], "keys": json.loads(r[1]), "ts": r[2], "mine": bool(r[3])}
            for r in c.execute("SELECT id, keys, ts, mine FROM keylinks ORDER BY ts")]
