"""Grants in the store, and which capabilities a peer holds on us.

Kinds: ``issued`` (we signed it), ``held`` (someone granted us), and
``presented`` (a peer showed us a grant about itself, e.g. from an
introduction).  Revoking deletes our copy; the holder may present it again,
which is why short ttls matter.

Anyone can sign a grant with a key it just made up, so what a peer sends us
is bounded when we keep it (:func:`receive`) and again when we show it to
others (:func:`to_present`), and deciding what a peer may do
(:func:`honored`) starts from the keys we honor rather than from whatever
grants the peer sent, so its cost does not grow with them.
"""

from __future__ import annotations

import json
import sqlite3

from ..base.limits import Limits
from ..wire.canonical import canonical_bytes, compact_json
from ..wire.framing import MAX_LINE
from ..wire.grants import check_grant, expires_ms, grant_hash

_RECEIVED = ("held", "presented")


def put(c: sqlite3.Connection, g: dict, kind: str, now: int, via: str = "") -> str:
    h = grant_hash(g)
    c.execute(
        "INSERT OR IGNORE INTO grants (hash, kind, iss, sub, aud, caps, exp, grant, via, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (h, kind, g["iss"], g["sub"], g.get("aud") or "", json.dumps(g["caps"]),
         expires_ms(g), compact_json(g), via, now))
    return h


def _size(g: dict) -> int:
    try:
        return len(canonical_bytes(g))
    except (TypeError, ValueError):
        return -1


def receive(c: sqlite3.Connection, g: object, me: str, peer: str, now: int,
            lim: Limits | None = None) -> str | None:
    """Keep a grant a peer sent us (in auth, a grant line or an introduction).

    Returns its hash, or None when it is not kept: invalid, expired, larger
    than ``grant_bytes``, about neither us nor the sender, or one a key gave
    itself (it can confer nothing that key's own grants do not).  Keeping a
    new grant first drops expired ones and then, over ``grants_per_issuer``
    (per issuer and subject) or ``grants_per_peer`` (per sender), the
    oldest received: a peer can only ever displace grants it sent itself, and
    the newest grant is the issuer's latest word.
    """
    lim = lim or Limits()
    if min(lim.grants_per_issuer, lim.grants_per_peer) <= 0:
        return None  # configured to keep none
    if not isinstance(g, dict) or g.get("iss") == g.get("sub"):
        return None
    if g.get("sub") == me:
        kind = "held"
    elif g.get("sub") == peer:
        kind = "presented"
    else:
        return None
    size = _size(g)  # the cheap refusals first: a signature check costs far more
    if size < 0 or size > lim.grant_bytes or check_grant(g) or expires_ms(g) <= now:
        return None
    h = grant_hash(g)
    if c.execute("SELECT 1 FROM grants WHERE hash = ? AND kind = ?", (h, kind)).fetchone():
        return h
    _make_room(c, kind, g["iss"], g["sub"], peer, now, lim)
    return put(c, g, kind, now, via=peer)


def _make_room(c: sqlite3.Connection, kind: str, iss: str, sub: str, via: str, now: int,
               lim: Limits) -> None:
    """Room for one more grant of ``kind`` from ``iss`` about ``sub``, sent by ``via``."""
    c.execute("DELETE FROM grants WHERE kind = ? AND iss = ? AND sub = ? AND exp <= ?",
              (kind, iss, sub, now))
    c.execute("DELETE FROM grants WHERE via = ? AND kind IN ('held', 'presented') AND exp <= ?",
              (via, now))
    c.execute(
        "DELETE FROM grants WHERE rowid IN (SELECT rowid FROM grants WHERE kind = ? AND iss = ?"
        " AND sub = ? ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?)",
        (kind, iss, sub, max(lim.grants_per_issuer - 1, 0)))
    c.execute(
        "DELETE FROM grants WHERE rowid IN (SELECT rowid FROM grants WHERE via = ?"
        " AND kind IN ('held', 'presented') ORDER BY created DESC, rowid DESC"
        " LIMIT -1 OFFSET ?)", (via, max(lim.grants_per_peer - 1, 0)))


def prune(c: sqlite3.Connection, now: int) -> int:
    """Drop expired grants others gave us or showed us; ours stay listed as expired."""
    return c.execute("DELETE FROM grants WHERE kind IN ('held', 'presented') AND exp <= ?",
                     (now,)).rowcount


def issued_to(c: sqlite3.Connection, peer: str, now: int) -> list[dict]:
    return [json.loads(r[0]) for r in c.execute(
        "SELECT grant FROM grants WHERE kind = 'issued' AND sub = ? AND exp > ?", (peer, now))]


def held_for_audience(c: sqlite3.Connection, aud: str, now: int, limit: int) -> list[dict]:
    """Unexpired grants about us whose audience is ``aud`` (an operator), newest first."""
    return [json.loads(r[0]) for r in c.execute(
        "SELECT grant FROM grants WHERE kind = 'held' AND aud = ? AND exp > ?"
        " ORDER BY created DESC, rowid DESC LIMIT ?", (aud, now, limit))]


def to_present(c: sqlite3.Connection, peer: str, now: int,
               lim: Limits | None = None, trust: frozenset[str] | set[str] = frozenset()
               ) -> list[dict]:
    """Held grants worth showing ``peer`` in our auth, within the presentation budget.

    Only grants that matter to ``peer``: those addressed to it, first; then
    those for anyone whose issuer ``peer`` may honor and we vouch for (a key
    we trust, or one the user dealt with: connected to, aliased, wrote to),
    never one ``peer`` issued (it knows its own), and one per issuer (the
    newest). So grants any peer hands us about itself (up to
    ``present_count`` in an auth line) are never shown to every other peer.
    Unexpired, at most ``grant_bytes`` each, newest first; at most
    ``present_count`` of them and ``present_bytes`` together (never more
    than half the line limit). The budget is applied here, when the auth line
    is built, so that whatever the store holds our auth line stays small and
    one peer's grants can never stop us from shaking hands with another.
    """
    lim = lim or Limits()
    budget = min(lim.present_bytes, MAX_LINE // 2)  # whatever config.json says
    out: list[dict] = []
    issuers: set[str] = set()
    total = 0
    addressed = c.execute(
        "SELECT grant, iss FROM grants WHERE kind = 'held' AND exp > ? AND aud = ?"
        " AND iss != ? AND length(CAST(grant AS BLOB)) <= ?"
        " ORDER BY created DESC, rowid DESC LIMIT ?",
        (now, peer, peer, lim.grant_bytes, lim.present_count * 4)).fetchall()
    anyone = c.execute(
        "SELECT grant, iss FROM grants g WHERE kind = 'held' AND exp > ? AND aud = ''"
        " AND iss != ? AND length(CAST(grant AS BLOB)) <= ?"
        " AND (iss IN (SELECT key FROM aliases)"
        " OR iss IN (SELECT peer FROM addresses WHERE source = 'connect')"
        " OR EXISTS (SELECT 1 FROM log WHERE log.peer = g.iss AND log.dir = 'out')"
        f" OR iss IN ({','.join('?' * len(trust))}))"
        " ORDER BY created DESC, rowid DESC LIMIT ?",
        (now, peer, lim.grant_bytes, *sorted(trust), lim.present_count * 4)).fetchall()
    for text, iss in [*addressed, *anyone]:
        if len(out) >= lim.present_count:
            break
        n = len(text.encode("utf-8"))
        if iss in issuers:
            continue
        if total + n > budget:
            break
        try:
            g = json.loads(text)
        except ValueError:
            continue
        out.append(g)
        issuers.add(iss)
        total += n
    return out


def _for_me(aud: str, me: str, also: frozenset[str] = frozenset()) -> bool:
    """Whether a grant's audience is us: no audience, our key, or an operator
    that certified us (``also``: one grant then covers every device of a team)."""
    return not aud or aud == me or aud in also


def honored(c: sqlite3.Connection, peer: str, me: str, trust: set[str],
            now: int, also: frozenset[str] = frozenset()) -> list[set[str]]:
    """The capability sets of every grant about ``peer`` that we honor.

    Honored: issued by us, or by a key we trust, or by a key that holds an
    ``introduce`` grant from us or a trusted key (one level; it confers at
    most the introducer's own capabilities minus ``introduce``).  A grant with
    ``aud`` counts only when the audience is us.  An honored grant may confer
    nothing (an introduction made with ``introduce`` alone) and still admit.

    Every query starts from a key we honor (us, a trusted key, an introducer
    they named), never from the grants ``peer`` sent, so grants it signed
    itself or with made-up keys are never read: the cost is 2 queries plus
    one per introducer, each on an index.  A grant a key gave itself is
    skipped: through an introducer it confers at most what that key already
    holds directly.
    """
    roots = sorted(set(trust) | {me})
    marks = ",".join("?" * len(roots))
    out: list[set[str]] = []
    for caps, aud in c.execute(
            f"SELECT caps, aud FROM grants WHERE sub = ? AND iss IN ({marks}) AND exp > ?"
            " AND kind IN ('issued', 'presented')", (peer, *roots, now)):
        if _for_me(aud, me, also):
            out.append(set(json.loads(caps)))
    introducers: dict[str, set[str]] = {}
    for sub, caps, aud in c.execute(
            f"SELECT sub, caps, aud FROM grants WHERE iss IN ({marks}) AND exp > ?"
            " AND kind IN ('issued', 'presented') AND caps LIKE '%\"introduce\"%'",
            (*roots, now)):
        held = set(json.loads(caps))
        if "introduce" in held and _for_me(aud, me, also) and sub != peer and sub not in roots:
            introducers.setdefault(sub, set()).update(held)
    for iss, held in introducers.items():
        passable = held - {"introduce"}
        for caps, aud in c.execute(
                "SELECT caps, aud FROM grants WHERE sub = ? AND iss = ? AND exp > ?"
                " AND kind IN ('issued', 'presented')", (peer, iss, now)):
            if _for_me(aud, me, also):
                out.append(set(json.loads(caps)) & passable)
    return out


def honored_caps(c: sqlite3.Connection, peer: str, me: str, trust: set[str],
                 now: int, also: frozenset[str] = frozenset()) -> set[str]:
    caps: set[str] = set()
    for g in honored(c, peer, me, trust, now, also):
        caps |= g
    return caps


def listing(c: sqlite3.Connection, now: int) -> list[dict]:
    out = []
    for r in c.execute("SELECT * FROM grants ORDER BY created DESC"):
        out.append({"hash": r["hash"], "kind": r["kind"], "iss": r["iss"], "sub": r["sub"],
                    "aud": r["aud"], "caps": json.loads(r["caps"]), "exp": r["exp"],
                    "expired": r["exp"] <= now, "via": r["via"]})
    return out


def issued_by(c: sqlite3.Connection, iss: str) -> list[tuple[dict, str]]:
    """``(grant, hash)`` for every grant ``iss`` issued that we keep."""
    return [(json.loads(raw), h) for raw, h in c.execute(
        "SELECT grant, hash FROM grants WHERE kind = 'issued' AND iss = ?", (iss,))]


def revoke(c: sqlite3.Connection, prefix: str) -> list[str]:
    rows = [r[0] for r in c.execute("SELECT DISTINCT hash FROM grants WHERE hash LIKE ?",
                                    (prefix.lower() + "%",))]
    if len(rows) == 1:
        c.execute("DELETE FROM grants WHERE hash = ?", (rows[0],))
    return rows
