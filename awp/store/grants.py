"""Grants in the store, and which capabilities a peer holds on us.

Kinds: ``issued`` (we signed it), ``held`` (someone granted us), and
``presented`` (a peer showed us a grant about itself, e.g. from an
introduction).  Revoking deletes our copy; the holder may present it again,
which is why short ttls matter.
"""

from __future__ import annotations

import json
import sqlite3

from ..wire.canonical import compact_json
from ..wire.grants import check_grant, expires_ms, grant_hash


def put(c: sqlite3.Connection, g: dict, kind: str, now: int, via: str = "") -> str:
    h = grant_hash(g)
    c.execute(
        "INSERT OR IGNORE INTO grants (hash, kind, iss, sub, aud, caps, exp, grant, via, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (h, kind, g["iss"], g["sub"], g.get("aud") or "", json.dumps(g["caps"]),
         expires_ms(g), compact_json(g), via, now))
    return h


def receive(c: sqlite3.Connection, g: object, me: str, peer: str, now: int) -> str | None:
    """Store a grant a peer sent us (in auth or a grant line); invalid ones are ignored."""
    if check_grant(g) or not isinstance(g, dict):
        return None
    if expires_ms(g) <= now:
        return None
    if g["sub"] == me:
        return put(c, g, "held", now, via=peer)
    if g["sub"] == peer:
        return put(c, g, "presented", now, via=peer)
    return None


def issued_to(c: sqlite3.Connection, peer: str, now: int) -> list[dict]:
    return [json.loads(r[0]) for r in c.execute(
        "SELECT grant FROM grants WHERE kind = 'issued' AND sub = ? AND exp > ?", (peer, now))]


def to_present(c: sqlite3.Connection, peer: str, now: int) -> list[dict]:
    """Held grants worth showing ``peer`` in auth: unexpired, and meant for it or anyone."""
    return [json.loads(r[0]) for r in c.execute(
        "SELECT grant FROM grants WHERE kind = 'held' AND exp > ? AND (aud = '' OR aud = ?)"
        " AND iss != ?", (now, peer, peer))]


def honored(c: sqlite3.Connection, peer: str, me: str, trust: set[str],
            now: int) -> list[set[str]]:
    """The capability sets of every grant about ``peer`` that we honor.

    Honored: issued by us, or by a key we trust, or by a key that holds an
    ``introduce`` grant from us or a trusted key (one level; it confers at
    most the introducer's own capabilities minus ``introduce``).  A grant with
    ``aud`` counts only when the audience is us.  An honored grant may confer
    nothing (an introduction made with ``introduce`` alone) and still admit.
    """
    roots = set(trust) | {me}
    out: list[set[str]] = []
    rows = c.execute(
        "SELECT iss, caps, aud FROM grants WHERE sub = ? AND exp > ?"
        " AND kind IN ('issued', 'presented')", (peer, now)).fetchall()
    for iss, caps_json, aud in rows:
        if aud and aud != me:
            continue
        granted = set(json.loads(caps_json))
        if iss in roots:
            out.append(granted)
            continue
        introducer: set[str] = set()
        for r_iss, r_caps, r_aud in c.execute(
                "SELECT iss, caps, aud FROM grants WHERE sub = ? AND exp > ?"
                " AND kind IN ('issued', 'presented')", (iss, now)):
            held = set(json.loads(r_caps))
            if r_iss in roots and "introduce" in held and (not r_aud or r_aud == me):
                introducer |= held
        if introducer:
            out.append(granted & (introducer - {"introduce"}))
    return out


def honored_caps(c: sqlite3.Connection, peer: str, me: str, trust: set[str],
                 now: int) -> set[str]:
    caps: set[str] = set()
    for g in honored(c, peer, me, trust, now):
        caps |= g
    return caps


def listing(c: sqlite3.Connection, now: int) -> list[dict]:
    out = []
    for r in c.execute("SELECT * FROM grants ORDER BY created DESC"):
        out.append({"hash": r["hash"], "kind": r["kind"], "iss": r["iss"], "sub": r["sub"],
                    "aud": r["aud"], "caps": json.loads(r["caps"]), "exp": r["exp"],
                    "expired": r["exp"] <= now, "via": r["via"]})
    return out


def revoke(c: sqlite3.Connection, prefix: str) -> list[str]:
    rows = [r[0] for r in c.execute("SELECT DISTINCT hash FROM grants WHERE hash LIKE ?",
                                    (prefix.lower() + "%",))]
    if len(rows) == 1:
        c.execute("DELETE FROM grants WHERE hash = ?", (rows[0],))
    return rows
