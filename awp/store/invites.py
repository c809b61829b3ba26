"""The invites we issued: create, list, revoke, and spend one in the admitting transaction.

An invite row keeps the BLAKE2b verifier of its secret (awp/wire/invite.py),
never the secret, so neither the file nor a backup of it hands out a
redeemable invite text.  Spending is :func:`redeem`, run on the writer inside
the transaction that also records the redeemer and issues what the invite
carries: a use is either spent with all of that or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Redeemed", "TooManyInvites", "create", "listing", "live_count", "prune",
           "redeem", "revoke"]

# Invites dead (spent, expired, revoked) this long are dropped from the list.
KEEP_DEAD_MS = 7 * 86400 * 1000


class TooManyInvites(ValueError):
    """``limits.invites`` live invites exist already."""


@dataclass
class Redeemed:
    """What :func:`redeem` decided: ``refusal`` is "" when the peer is admitted."""

    refusal: str = ""
    first: bool = False  # this redemption spent a use (not a second link of the same key)
    caps: list[str] = field(default_factory=list)
    topics: list[dict] = field(default_factory=list)
    grant_ttl_ms: int = 0


def live_count(c: sqlite3.Connection, now: int) -> int:
    return c.execute("SELECT COUNT(*) FROM invites WHERE revoked = 0 AND expires > ?"
                     " AND uses_left > 0", (now,)).fetchone()[0]


def create(c: sqlite3.Connection, ident: str, verifier: bytes, *, uses: int, expires: int,
           caps: list[str], topics: list[dict], grant_ttl_ms: int, now: int,
           max_live: int) -> None:
    """Store a new invite; :class:`TooManyInvites` at ``max_live`` live ones."""
    live = live_count(c, now)
    if live >= max_live:
        raise TooManyInvites(f"{live} live invites already (limits.invites is {max_live}):"
                             " revoke some first (awp invite --list, awp invite --revoke ID)")
    c.execute("INSERT INTO invites (id, verifier, uses, uses_left, expires, caps, topics,"
              " grant_ttl, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
              (ident, verifier.hex(), uses, uses, expires, json.dumps(caps),
               json.dumps(topics), grant_ttl_ms, now))


def _state(row: sqlite3.Row, now: int) -> str:
    if row["revoked"]:
        return "revoked"
    if row["uses_left"] <= 0:
        return "used"
    if row["expires"] <= now:
        return "expired"
    return "live"


def listing(c: sqlite3.Connection, now: int) -> list[dict]:
    """Every kept invite, newest first: what it grants and its state; never a verifier."""
    rows = c.execute("SELECT * FROM invites ORDER BY created DESC, id").fetchall()
    out = []
    for r in rows:
        used_by = [u[0] for u in c.execute(
            "SELECT peer FROM invite_uses WHERE invite = ? ORDER BY at", (r["id"],))]
        out.append({"id": r["id"], "state": _state(r, now), "uses": r["uses"],
                    "uses_left": r["uses_left"], "expires": r["expires"],
                    "caps": json.loads(r["caps"]), "topics": json.loads(r["topics"]),
                    "grant_ttl_ms": r["grant_ttl"], "created": r["created"],
                    "used_by": used_by})
    return out


def revoke(c: sqlite3.Connection, ident: str) -> bool:
    """Revoke an invite by id; False when there is none."""
    return c.execute("UPDATE invites SET revoked = 1 WHERE id = ?", (ident,)).rowcount > 0


def prune(c: sqlite3.Connection, now: int) -> int:
    """Drop invites dead for :data:`KEEP_DEAD_MS` (their uses with them)."""
    cutoff = now - KEEP_DEAD_MS
    ids = [r[0] for r in c.execute(
        "SELECT id FROM invites WHERE (revoked = 1 OR uses_left <= 0) AND created < ?"
        " OR expires < ?", (cutoff, cutoff))]
    for i in ids:
        c.execute("DELETE FROM invite_uses WHERE invite = ?", (i,))
        c.execute("DELETE FROM invites WHERE id = ?", (i,))
    return len(ids)


def redeem(c: sqlite3.Connection, ident: str, proves: Callable[[bytes], bool], peer: str,
           now: int) -> Redeemed:
    """Check and spend invite ``ident`` for ``peer``, in the caller's transaction.

    ``proves(verifier)`` checks the peer's MAC.  A MAC that does not verify
    spends nothing and says so before anything about the invite's state, so
    only a holder of the secret learns whether it is spent.  A key that
    redeemed this invite before is admitted again without spending another
    use (a second link, or the other endpoint of a race that lost).
    """
    row = c.execute("SELECT * FROM invites WHERE id = ?", (ident,)).fetchone()
    if row is None:
        return Redeemed("unknown invite")
    if not proves(bytes.fromhex(row["verifier"])):
        return Redeemed("invite proof does not verify (a wrong secret, or another"
                        " connection's proof)")
    state = _state(row, now)
    again = c.execute("SELECT 1 FROM invite_uses WHERE invite = ? AND peer = ?",
                      (ident, peer)).fetchone()
    if state in ("revoked", "expired"):
        return Redeemed(f"invite {state}")
    if again:
        return Redeemed()
    if state == "used":
        return Redeemed("invite already used")
    if c.execute("UPDATE invites SET uses_left = uses_left - 1 WHERE id = ? AND uses_left > 0",
                 (ident,)).rowcount != 1:
        return Redeemed("invite already used")
    c.execute("INSERT INTO invite_uses (invite, peer, at) VALUES (?, ?, ?)", (ident, peer, now))
    return Redeemed("", True, json.loads(row["caps"]), json.loads(row["topics"]),
                    row["grant_ttl"])
