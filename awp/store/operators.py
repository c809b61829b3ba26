"""Operator keys in the store: the operators we trust and the revocations we hold.

Trust is the user's word (``awp trust``), so it is kept here and survives
restarts.  Revocations are the operators' word: we keep the newest one of
each (operator, device) pair whether or not we trust the operator, because
a host in the middle of a path must pass a revocation on for the hosts
behind it that do.  Untrusted operators' revocations are bounded
(``limits.op_revocations``); a trusted operator's are always kept, since
forgetting one would let a revoked device back in.
"""

from __future__ import annotations

import sqlite3

from ..wire import operator as O


def trusted(c: sqlite3.Connection) -> dict[str, str]:
    """Trusted operator keys and the names the user gave them."""
    return {k: n for k, n in c.execute("SELECT key, name FROM operators ORDER BY added")}


def trust(c: sqlite3.Connection, key: str, name: str, now: int) -> bool:
    """Trust ``key``; False when it was trusted already (its name is updated)."""
    cur = c.execute("UPDATE operators SET name = ? WHERE key = ?", (name, key))
    if cur.rowcount:
        return False
    c.execute("INSERT INTO operators (key, name, added) VALUES (?, ?, ?)", (key, name, now))
    return True


def untrust(c: sqlite3.Connection, key: str) -> bool:
    return c.execute("DELETE FROM operators WHERE key = ?", (key,)).rowcount > 0


NEW, HELD, FULL = "new", "held", "full"


def take_revocation(c: sqlite3.Connection, rev: O.Revocation, now: int, bound: int) -> str:
    """Keep ``rev`` if it is newer than what we hold: ``NEW``, ``HELD`` or ``FULL``.

    ``FULL``: the revocation is by an operator we do not trust and we already
    hold ``bound`` revocations of untrusted operators.
    """
    row = c.execute("SELECT ts FROM op_revocations WHERE op = ? AND device = ?",
                    (rev.op, rev.device)).fetchone()
    if row is not None and row[0] >= rev.ts_ms:
        return HELD
    if row is None and not c.execute("SELECT 1 FROM operators WHERE key = ?",
                                     (rev.op,)).fetchone():
        (held,) = c.execute("SELECT count(*) FROM op_revocations WHERE op NOT IN"
                            " (SELECT key FROM operators)").fetchone()
        if held >= bound:
            return FULL
    c.execute("INSERT INTO op_revocations (op, device, ts, rec, received) VALUES (?, ?, ?, ?, ?)"
              " ON CONFLICT (op, device) DO UPDATE SET ts = excluded.ts, rec = excluded.rec,"
              " received = excluded.received", (rev.op, rev.device, rev.ts_ms, rev.text, now))
    return NEW


def revocations(c: sqlite3.Connection, limit: int = 1000) -> list[str]:
    """The newest revocations we hold (canonical JSON), trusted operators' first."""
    rows = c.execute(
        "SELECT rec FROM op_revocations ORDER BY op IN (SELECT key FROM operators) DESC,"
        " received DESC LIMIT ?", (limit,)).fetchall()
    return [r[0] for r in rows]


def revoked(c: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """(operator, device) -> the time of its newest revocation."""
    return {(op, d): ts for op, d, ts in c.execute("SELECT op, device, ts FROM op_revocations")}


def set_peer_cert(c: sqlite3.Connection, key: str, text: str) -> None:
    c.execute("UPDATE peers SET opcert = ? WHERE key = ?", (text, key))
