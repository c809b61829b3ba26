"""Rows of bulk transfers (cap ``bulk``): which pieces are verified, what crossed.

Each file sent or received the bulk way has its ``blobs`` row (name, status,
path, as for an in-band file) and a ``bulk`` row beside it with the piece
hashes it is checked against and one bit a piece for the pieces verified on
disk.  A piece's bit is set in the commit that follows its check and its
``pwrite``, so after ``kill -9`` the set bits are exactly the pieces to keep
and a restart asks only for the others.

Receiver states (``blobs.status``): ``fetching`` (pieces missing), then
``complete`` or ``refused``.  The sender's row keeps the in-band states
(``queued``, ``sent`` when the msg is acked) and ``bulk.state`` says
``delivered`` once the receiver reported the whole file verified.
"""

from __future__ import annotations

import os
import sqlite3

from ..wire import bulk as wire
from .blobs import Refusal, final_path, part_path


def _bits(count: int) -> bytes:
    return bytes(-(-count // 8))


def has(have: bytes, i: int) -> bool:
    return bool(have[i >> 3] & (1 << (i & 7)))


def missing(have: bytes, count: int) -> list[int]:
    """The pieces whose bit is not set, in order."""
    return [i for i in range(count) if not has(have, i)]


def row(c: sqlite3.Connection, peer: str, dir_: str, ref: str) -> dict | None:
    r = c.execute("SELECT * FROM bulk WHERE peer = ? AND dir = ? AND ref = ?",
                  (peer, dir_, ref)).fetchone()
    return dict(r) if r is not None else None


def description(r: dict) -> wire.Description:
    return wire.Description(r["size"], r["piece"], bytes(r["hashes"]), r["root"])


def held_by(c: sqlite3.Connection, peer: str) -> int:
    """Bytes of ``peer``'s bulk files we hold or have promised room for."""
    n = c.execute("SELECT COALESCE(SUM(b.size), 0) FROM bulk b JOIN blobs f ON f.peer = b.peer"
                  " AND f.dir = b.dir AND f.ref = b.ref WHERE b.peer = ? AND b.dir = 'in'"
                  " AND f.status IN ('fetching', 'complete')", (peer,)).fetchone()[0]
    return int(n)


def offer_in(c: sqlite3.Connection, blobs_dir: str, peer: str, line: dict, part: dict,
             max_bytes: int, quota: int, now: int) -> tuple[Refusal | None, bool]:
    """A stored msg names a bulk blob: record it (returns (refusal, fetch it))."""
    ref = part["ref"]
    existing = c.execute("SELECT status FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                         (peer, ref)).fetchone()
    if existing is not None and existing[0] in ("fetching", "complete", "refused"):
        return None, existing[0] == "fetching"  # a replayed msg changes nothing
    name = part.get("name") if isinstance(part.get("name"), str) else ""
    mime = part.get("mime") if isinstance(part.get("mime"), str) else ""
    th = line.get("th") if isinstance(line.get("th"), str) else ""
    size = part.get("size")
    why = ""
    try:
        desc = wire.parse(size, part.get("bulk"))
    except wire.BulkError as e:
        why, desc = f"bad bulk description: {e}", None
    if desc is not None and desc.size > max_bytes:
        why = f"bulk file of {desc.size} bytes is over the limit of {max_bytes} (bulk_bytes)"
    elif desc is not None and held_by(c, peer) + desc.size > quota:
        why = (f"bulk file of {desc.size} bytes would put this peer over its disk quota of"
               f" {quota} bytes (peer_bulk_bytes)")
    status = "refused" if why else "fetching"
    c.execute(
        "INSERT INTO blobs (peer, dir, ref, th, name, mime, size, status, msg_id, error,"
        " created, updated) VALUES (?, 'in', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (peer, dir, ref) DO UPDATE SET name = excluded.name,"
        " mime = excluded.mime, size = excluded.size, msg_id = excluded.msg_id,"
        " th = excluded.th, status = excluded.status, error = excluded.error,"
        " updated = excluded.updated",
        (peer, ref, th, name, mime, size if wire.is_count(size) else -1, status, line["id"],
         why[:300], now, now))
    if desc is not None:
        # Kept when the whole file is refused too: ``awp fetch --range`` can still
        # take verified parts of it (a refused file holds no disk and no quota).
        c.execute("INSERT OR REPLACE INTO bulk (peer, dir, ref, size, piece, root, hashes, have,"
                  " created, updated) VALUES (?, 'in', ?, ?, ?, ?, ?, ?, ?, ?)",
                  (peer, ref, desc.size, desc.piece, desc.root, desc.hashes, _bits(desc.count),
                   now, now))
    if why:
        return Refusal(ref, why[:200], re=line["id"]), False
    return None, True


def queue_out(c: sqlite3.Connection, peer: str, th: str, blob: dict, now: int) -> None:
    """Our msg names a staged file the bulk way: its ``blobs`` and ``bulk`` rows."""
    desc = wire.parse(blob["size"], blob["bulk"])
    c.execute(
        "INSERT INTO blobs (peer, dir, ref, th, name, mime, size, status, path, created, updated)"
        " VALUES (?, 'out', ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
        (peer, blob["ref"], th, blob["name"], blob["mime"], blob["size"], blob["path"], now, now))
    c.execute("INSERT OR REPLACE INTO bulk (peer, dir, ref, size, piece, root, hashes, have,"
              " created, updated) VALUES (?, 'out', ?, ?, ?, ?, ?, ?, ?, ?)",
              (peer, blob["ref"], desc.size, desc.piece, desc.root, desc.hashes, b"", now, now))


def note_error(c: sqlite3.Connection, peer: str, ref: str, text: str, now: int) -> None:
    """Why a received file is not moving, shown by ``awp blobs`` while it is fetching."""
    c.execute("UPDATE blobs SET error = ?, updated = ? WHERE peer = ? AND dir = 'in'"
              " AND ref = ? AND status = 'fetching'", (text[:300], now, peer, ref))


def mark(c: sqlite3.Connection, peer: str, ref: str, i: int, ok: bool, nbytes: int,
         wire_bytes: int, now: int) -> None:
    """Piece ``i`` was checked: set its bit (``ok``) or count a refetch."""
    r = c.execute("SELECT have FROM bulk WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (peer, ref)).fetchone()
    if r is None:
        return
    have = bytearray(r[0])
    if ok and not has(have, i):
        have[i >> 3] |= 1 << (i & 7)
        c.execute("UPDATE bulk SET have = ?, done = done + ?, wire = wire + ?, updated = ?"
                  " WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (bytes(have), nbytes, wire_bytes, now, peer, ref))
    else:
        c.execute("UPDATE bulk SET refetched = refetched + ?, wire = wire + ?, updated = ?"
                  " WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (0 if ok else 1, wire_bytes, now, peer, ref))


def unmark(c: sqlite3.Connection, peer: str, ref: str, bad: list[int], piece: int,
           size: int, now: int) -> None:
    """Pieces found damaged on disk: their bits go, so they are fetched again."""
    r = c.execute("SELECT have FROM bulk WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (peer, ref)).fetchone()
    if r is None or not bad:
        return
    have = bytearray(r[0])
    lost = 0
    for i in bad:
        if has(have, i):
            have[i >> 3] &= ~(1 << (i & 7)) & 0xFF
            lost += wire.piece_span(size, piece, i)[1]
    c.execute("UPDATE bulk SET have = ?, done = done - ?, state = 'repair', updated = ?"
              " WHERE peer = ? AND dir = 'in' AND ref = ?",
              (bytes(have), lost, now, peer, ref))
    c.execute("UPDATE blobs SET status = 'fetching', updated = ? WHERE peer = ? AND dir = 'in'"
              " AND ref = ? AND status = 'complete'", (now, peer, ref))


def served(c: sqlite3.Connection, peer: str, ref: str, wire_bytes: int, now: int) -> None:
    """We are about to send one piece of ``ref`` (counted before it leaves)."""
    c.execute("UPDATE bulk SET served = served + 1, wire = wire + ?, updated = ?"
              " WHERE peer = ? AND dir = 'out' AND ref = ?", (wire_bytes, now, peer, ref))


def delivered(c: sqlite3.Connection, peer: str, ref: str, wire_bytes: int, now: int) -> None:
    c.execute("UPDATE bulk SET state = 'delivered', wire = wire + ?, updated = ?"
              " WHERE peer = ? AND dir = 'out' AND ref = ?", (wire_bytes, now, peer, ref))


def data_path(c: sqlite3.Connection, blobs_dir: str, peer: str, ref: str) -> str:
    """Where a received bulk file's bytes are: its final path once complete."""
    r = c.execute("SELECT status, path FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (peer, ref)).fetchone()
    if r is not None and r[0] in ("complete", "fetching") and r[1]:
        return r[1]
    return part_path(blobs_dir, peer, ref)


def finish_in(c: sqlite3.Connection, blobs_dir: str, peer: str, ref: str, now: int) -> str:
    """Every piece verified: the file takes its final name, and the user is told."""
    r = c.execute("SELECT name, path, th FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (peer, ref)).fetchone()
    src = data_path(c, blobs_dir, peer, ref)
    dest = r["path"] if r is not None and r["path"] else final_path(
        blobs_dir, peer, ref, (r["name"] if r is not None else "") or ref)
    if src != dest:
        os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
        os.replace(src, dest)
    c.execute("UPDATE blobs SET status = 'complete', path = ?, received = size, error = '',"
              " updated = ?"
              " WHERE peer = ? AND dir = 'in' AND ref = ?", (dest, now, peer, ref))
    c.execute("UPDATE bulk SET state = 'verified', updated = ? WHERE peer = ? AND dir = 'in'"
              " AND ref = ?", (now, peer, ref))
    return dest


def offered(c: sqlite3.Connection, peer: str, name: str) -> dict | None:
    """The bulk file ``peer`` sent us whose ref or root hash is ``name`` (a root
    may be given by a unique prefix of at least 8 hex digits), with its status."""
    name = name.strip()
    r = c.execute("SELECT b.*, f.status, f.name FROM bulk b JOIN blobs f ON f.peer = b.peer"
                  " AND f.dir = b.dir AND f.ref = b.ref WHERE b.peer = ? AND b.dir = 'in'"
                  " AND b.ref = ?", (peer, name)).fetchone()
    if r is None and len(name) >= 8 and all(ch in "0123456789abcdefABCDEF" for ch in name):
        rows = c.execute("SELECT b.*, f.status, f.name FROM bulk b JOIN blobs f"
                         " ON f.peer = b.peer AND f.dir = b.dir AND f.ref = b.ref"
                         " WHERE b.peer = ? AND b.dir = 'in' AND substr(b.root, 1, ?) = ?"
                         " LIMIT 2", (peer, len(name), name.lower())).fetchall()
        r = rows[0] if len(rows) == 1 else None
    return dict(r) if r is not None else None


def fetching(c: sqlite3.Connection, peer: str | None = None) -> list[tuple[str, str]]:
    """(peer, ref) of received bulk files with pieces still to fetch."""
    q = ("SELECT peer, ref FROM blobs WHERE dir = 'in' AND status = 'fetching'"
         " AND ref IN (SELECT ref FROM bulk WHERE bulk.peer = blobs.peer AND dir = 'in')")
    args: tuple = ()
    if peer is not None:
        q += " AND peer = ?"
        args = (peer,)
    return [(r[0], r[1]) for r in c.execute(q, args)]


def progress(c: sqlite3.Connection) -> dict[tuple[str, str, str], dict]:
    """(peer, dir, ref) -> the bulk figures ``awp blobs`` shows."""
    out = {}
    for r in c.execute("SELECT peer, dir, ref, size, piece, root, done, served, refetched,"
                       " wire, state FROM bulk"):
        count = wire.piece_count(r["size"], r["piece"])
        out[(r["peer"], r["dir"], r["ref"])] = {
            "root": r["root"], "piece": r["piece"], "pieces": count, "done": r["done"],
            "served": r["served"], "refetched": r["refetched"], "wire": r["wire"],
            "state": r["state"]}
    return out


def verifiable(c: sqlite3.Connection, peer: str | None = None) -> list[tuple[str, str]]:
    """(peer, ref) of received bulk files with pieces on disk to recheck."""
    q = ("SELECT b.peer, b.ref FROM bulk b JOIN blobs f ON f.peer = b.peer AND f.dir = b.dir"
         " AND f.ref = b.ref WHERE b.dir = 'in' AND f.status IN ('fetching', 'complete')")
    args: tuple = ()
    if peer is not None:
        q += " AND b.peer = ?"
        args = (peer,)
    return [(r[0], r[1]) for r in c.execute(q + " ORDER BY b.created", args)]
