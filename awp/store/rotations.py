"""Key rotation in the store: the records we took, and one peer under its new key.

A peer that rotates stays ONE peer here: :func:`take` stores its record and,
in the same transaction, moves every row keyed by the old key (its name and
aliases, addresses, threads and their read marks, the log and its dedup ids,
what we queued for it, its files, budgets counters) to the new key.  Lines
queued for the old key are then sent to the new one like any other queued
line, and the peer's own dedup (by our id) makes them arrive exactly once.

Grants are re-issued, not mapped: a grant we issued to the old key is signed
again for the new key (same caps, expiry and audience) and the old one
deleted, so that a leaked old key never carries a grant.  The caller passes
the signer: the store holds no keys.

A record that conflicts with one we hold (the same old key rotated to two
keys) is kept with it as evidence in ``rotation_conflicts``, at most
:data:`MAX_CONFLICTS` pairs per key.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from ..wire import rotation as R

MAX_CONFLICTS = 16  # pairs kept per old key (limits.rotation_conflicts): one proves the point

# Rows keyed by a peer's key that move with it: (table, column).
_MOVES = (
    ("aliases", "key"), ("addresses", "peer"), ("outbox", "peer"), ("log", "peer"),
    ("seen", "peer"), ("threads", "peer"), ("blobs", "peer"), ("served", "peer"),
    ("usage", "peer"), ("mirrors", "sharer"), ("mirrors", "of"), ("peer_topics", "peer"),
    ("invite_uses", "peer"), ("rotation_owed", "peer"),
)

Reissue = Callable[[dict], dict]  # an old grant -> the same grant signed again for the new key


def _rot(text: str) -> R.Rotation | None:
    try:
        return R.check(json.loads(text))
    except (ValueError, R.RotationError):
        return None


def known(c: sqlite3.Connection, rot: R.Rotation) -> R.Known:
    """What we hold that a new record is judged against (:func:`awp.wire.rotation.judge`)."""
    same = c.execute("SELECT rec FROM rotations WHERE old = ?", (rot.old,)).fetchone()
    before = c.execute("SELECT rec FROM rotations WHERE new = ? ORDER BY seq DESC LIMIT 1",
                       (rot.old,)).fetchone()
    committed = c.execute("SELECT next_commit FROM peers WHERE key = ?", (rot.old,)).fetchone()
    retired = c.execute("SELECT 1 FROM rotations WHERE old = ?", (rot.new,)).fetchone()
    return R.Known(same_old=_rot(same[0]) if same else None,
                   before=_rot(before[0]) if before else None,
                   committed=committed[0] if committed else "", retired=retired is not None)


def take(c: sqlite3.Connection, rot: R.Rotation, now: int, reissue: Reissue | None) -> str:
    """Judge and apply one verified record; returns ``new``, ``duplicate``, or raises.

    Raises :class:`~awp.wire.rotation.RotationError`; a ``conflict`` has its
    evidence written first, so the caller must commit even on that error
    (it is raised only after the write; see :func:`take_chain`).
    """
    verdict = R.judge(rot, known(c, rot))
    if verdict == R.DUPLICATE:
        return verdict
    c.execute("INSERT INTO rotations (old, new, seq, next, rec, received) VALUES (?, ?, ?, ?, ?, ?)",
              (rot.old, rot.new, rot.seq, rot.next, rot.text, now))
    rekey(c, rot.old, rot.new, now, reissue)
    return verdict


def take_chain(c: sqlite3.Connection, chain: list[R.Rotation], now: int,
               reissue: Reissue | None, max_conflicts: int = MAX_CONFLICTS
               ) -> tuple[list[R.Rotation], str]:
    """Take records oldest first; returns (those applied, the first refusal or "").

    A conflict's evidence is kept; the records before a refusal stay taken
    (each is valid on its own), none after it is looked at.
    """
    applied: list[R.Rotation] = []
    for rot in chain:
        try:
            if take(c, rot, now, reissue) == R.NEW:
                applied.append(rot)
        except R.RotationError as e:
            if e.kind == "conflict":
                note_conflict(c, rot, now, max_conflicts)
            return applied, f"rotation record refused ({e.kind}): {e.detail}"
    return applied, ""


def note_conflict(c: sqlite3.Connection, rot: R.Rotation, now: int,
                  max_conflicts: int = MAX_CONFLICTS) -> bool:
    held = c.execute("SELECT rec FROM rotations WHERE old = ?", (rot.old,)).fetchone()
    if held is None:
        return False
    n = c.execute("SELECT count(*) FROM rotation_conflicts WHERE old = ?", (rot.old,)).fetchone()[0]
    if n >= max_conflicts:
        return False
    return c.execute("INSERT OR IGNORE INTO rotation_conflicts (old, a, b, found)"
                     " VALUES (?, ?, ?, ?)", (rot.old, held[0], rot.text, now)).rowcount > 0


def conflicts(c: sqlite3.Connection) -> dict[str, dict]:
    """Per current key of an identity that signed two rotations of one key: the evidence."""
    out: dict[str, dict] = {}
    for old, a, b, found in c.execute("SELECT old, a, b, found FROM rotation_conflicts"):
        cur = current(c, old)
        entry = out.setdefault(cur, {"n": 0, "first": found, "pairs": []})
        entry["n"] += 1
        entry["first"] = min(entry["first"], found)
        entry["pairs"].append({"old": old, "a": json.loads(a), "b": json.loads(b)})
    return out


def rekey(c: sqlite3.Connection, old: str, new: str, now: int, reissue: Reissue | None) -> None:
    """Every row of ``old`` becomes ``new``'s: one peer, carried over."""
    row = c.execute("SELECT first_seen FROM peers WHERE key = ?", (old,)).fetchone()
    have = c.execute("SELECT first_seen FROM peers WHERE key = ?", (new,)).fetchone()
    if row is not None and (have is None or row[0] < have[0]):
        # The older record is the peer's history: a row the new key made before its
        # record arrived gives way to it, and so does nothing else of the new key's.
        c.execute("DELETE FROM peers WHERE key = ?", (new,))
        c.execute("UPDATE peers SET key = ?, rotated_from = ?, next_commit = '' WHERE key = ?",
                  (new, old, old))
    elif row is not None:  # a row the old key got after it moved (a send that raced the record)
        c.execute("DELETE FROM peers WHERE key = ?", (old,))
    for table, col in _MOVES:
        c.execute(f"UPDATE OR IGNORE {table} SET {col} = ? WHERE {col} = ?", (new, old))
        c.execute(f"DELETE FROM {table} WHERE {col} = ?", (old,))  # what merged into a row
    _regrant(c, old, new, now, reissue)


def _regrant(c: sqlite3.Connection, old: str, new: str, now: int, reissue: Reissue | None) -> None:
    """Grants we issued to (or for) ``old``, signed again for ``new``."""
    from . import grants as grantstore

    rows = c.execute("SELECT hash, grant FROM grants WHERE kind = 'issued' AND (sub = ? OR aud = ?)",
                     (old, old)).fetchall()
    for h, text in rows:
        c.execute("DELETE FROM grants WHERE hash = ? AND kind = 'issued'", (h,))
        if reissue is None:
            continue
        g = json.loads(text)
        if g.get("sub") == old:
            g["sub"] = new
        if g.get("aud") == old:
            g["aud"] = new
        grantstore.put(c, reissue(g), "issued", now)


def current(c: sqlite3.Connection, key: str, hops: int = 64) -> str:
    """The key ``key`` rotated to, followed to the end of its chain (itself if never)."""
    seen = {key}
    for _ in range(hops):
        row = c.execute("SELECT new FROM rotations WHERE old = ?", (key,)).fetchone()
        if row is None or row[0] in seen:
            break
        key = row[0]
        seen.add(key)
    return key


def history(c: sqlite3.Connection, key: str, hops: int = 64) -> list[str]:
    """The keys ``key`` rotated from, newest first."""
    out: list[str] = []
    for _ in range(hops):
        row = c.execute("SELECT old FROM rotations WHERE new = ? ORDER BY seq DESC LIMIT 1",
                        (key,)).fetchone()
        if row is None or row[0] in out:
            break
        key = row[0]
        out.append(key)
    return out


def sweep(c: sqlite3.Connection, now: int, reissue: Reissue | None) -> int:
    """Rows a key rotated away got after its record was taken (a line queued by a call
    that resolved the old key just before), moved on to its current key."""
    moved = 0
    for (old,) in c.execute("SELECT old FROM rotations").fetchall():
        if any(c.execute(f"SELECT 1 FROM {t} WHERE {col} = ? LIMIT 1", (old,)).fetchone()
               for t, col in (("peers", "key"), *_MOVES)):
            rekey(c, old, current(c, old), now, reissue)
            moved += 1
    return moved


def successors(c: sqlite3.Connection) -> dict[str, str]:
    """Every old key we know of and the key it moved to."""
    return dict(c.execute("SELECT old, new FROM rotations").fetchall())


def note_commitment(c: sqlite3.Connection, key: str, nxt: str) -> None:
    """The first commitment a key announces is the one its first rotation must meet."""
    c.execute("UPDATE peers SET next_commit = ? WHERE key = ? AND next_commit = ''", (nxt, key))


# -- our own records ---------------------------------------------------------------

def owe(c: sqlite3.Connection, seq: int, me: str) -> int:
    """Our record ``seq`` is owed to every peer we know (once per seq: meta marks it)."""
    from . import ops

    done = int(ops.get_meta(c, "rotation.owed_seq") or 0)
    if seq <= done:
        return 0
    n = c.execute("INSERT OR REPLACE INTO rotation_owed (peer, seq) SELECT key, ? FROM peers"
                  " WHERE key != ?", (seq, me)).rowcount
    ops.set_meta(c, "rotation.owed_seq", str(seq))
    return n


def owed(c: sqlite3.Connection) -> set[str]:
    return {r[0] for r in c.execute("SELECT peer FROM rotation_owed")}


def paid(c: sqlite3.Connection, peer: str, seq: int) -> None:
    c.execute("DELETE FROM rotation_owed WHERE peer = ? AND seq <= ?", (peer, seq))


def reissue_own(c: sqlite3.Connection, old_keys: set[str], sign: Reissue, now: int) -> int:
    """Grants we issued under a key we rotated away from, signed again under the new key."""
    from . import grants as grantstore

    if not old_keys:
        return 0
    marks = ",".join("?" * len(old_keys))
    rows = c.execute(f"SELECT hash, grant FROM grants WHERE kind = 'issued' AND iss IN ({marks})",
                     tuple(sorted(old_keys))).fetchall()
    for h, text in rows:
        c.execute("DELETE FROM grants WHERE hash = ? AND kind = 'issued'", (h,))
        grantstore.put(c, sign(json.loads(text)), "issued", now)
    return len(rows)


def mark_verified(c: sqlite3.Connection, key: str, now: int) -> bool:
    return c.execute("UPDATE peers SET verified = ?, verified_at = ? WHERE key = ?",
                     (key, now, key)).rowcount > 0
