"""Files on disk and their rows: what a chunk or a blob-naming msg does.

Received data is written with ``pwrite`` at the offset the row says and
fsynced before the transaction that advances the row commits, so a crash at
any point either keeps the chunk (row and bytes agree) or replays it (the row
did not move, and the same bytes land at the same offset again).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from ..base.filename import safe_name as _safe_name
from ..wire.b64 import b64decode_any
from ..wire.keys import short_key
from ..wire.numbers import is_count

CHUNK = 256 * 1024


class BlobTooLarge(ValueError):
    """A file over the blob limit: refused before anything is queued."""

    def __init__(self, path: str, size: int, limit: int,
                 setting: str = "AWP_BLOB_LIMIT / blob_limit") -> None:
        super().__init__(f"{path} is {size:,} bytes, over the blob limit of {limit:,} bytes"
                         f" ({setting})")


def copy_private(src: str, dest: str, limit: int) -> int:
    """Stream ``src`` to ``dest`` (0600, fsynced); returns the size copied."""
    os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
    size = 0
    tmp = dest + ".tmp"
    with open(src, "rb") as fi, open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                             0o600), "wb") as fo:
        while True:
            buf = fi.read(1 << 20)
            if not buf:
                break
            size += len(buf)
            if size > limit:
                raise BlobTooLarge(src, size, limit)
            fo.write(buf)
        fo.flush()
        os.fsync(fo.fileno())
    os.replace(tmp, dest)
    return size


def safe_name(name: str) -> str:
    """A file name that is safe on any disk: ``[A-Za-z0-9._-]``, at most 120 bytes.

    The shared sanitiser (:mod:`awp.base.filename`), ASCII only: these names
    are the daemon's own paths.
    """
    return _safe_name(name, fallback="b_", ascii_only=True, max_bytes=120)


def part_path(home_blobs: str, peer: str, ref: str) -> str:
    return os.path.join(home_blobs, safe_name(short_key(peer)), safe_name(ref) + ".part")


def final_path(home_blobs: str, peer: str, ref: str, name: str) -> str:
    return os.path.join(home_blobs, safe_name(short_key(peer)), safe_name(ref) + ".d",
                        safe_name(name))


@dataclass
class Refusal:
    """Answer ``err blob_refused`` for ``ref`` (``re`` = the msg, when it caused it)."""

    ref: str
    detail: str
    re: str | None = None


def _row(c: sqlite3.Connection, peer: str, ref: str) -> sqlite3.Row | None:
    return c.execute("SELECT * FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                     (peer, ref)).fetchone()


def _refuse(c: sqlite3.Connection, blobs_dir: str, peer: str, ref: str, why: str,
            now: int) -> None:
    c.execute(
        "INSERT INTO blobs (peer, dir, ref, status, error, created, updated)"
        " VALUES (?, 'in', ?, 'refused', ?, ?, ?) ON CONFLICT (peer, dir, ref) DO UPDATE SET"
        " status = 'refused', error = excluded.error, updated = excluded.updated",
        (peer, ref, why[:300], now, now))
    try:
        os.unlink(part_path(blobs_dir, peer, ref))
    except OSError:
        pass


def chunk_in(c: sqlite3.Connection, blobs_dir: str, peer: str, line: dict, limit: int,
             now: int) -> tuple[Refusal | None, str | None]:
    """Apply one received chunk.  Returns (a refusal to send, a completed path)."""
    ref, n, data = line.get("ref"), line.get("n"), line.get("data", "")
    if not isinstance(ref, str) or not ref:
        return None, None
    row = _row(c, peer, ref)
    if row is not None and row["status"] in ("refused", "complete", "received"):
        return None, None  # done with this blob already; a replay changes nothing
    if not is_count(n):
        _refuse(c, blobs_dir, peer, ref, "chunk without a valid n", now)
        return Refusal(ref, "chunk without a valid n"), None
    next_n = row["next_n"] if row is not None else 0
    if n < next_n:
        return None, None  # replayed chunk we already hold
    if n > next_n:
        _refuse(c, blobs_dir, peer, ref, f"gap: expected chunk {next_n}, got {n}", now)
        return Refusal(ref, f"gap: expected chunk {next_n}, got {n}"), None
    try:
        raw = b64decode_any(data if isinstance(data, str) else "")
    except ValueError:
        _refuse(c, blobs_dir, peer, ref, "bad base64 in chunk", now)
        return Refusal(ref, "bad base64 in chunk"), None
    received = row["received"] if row is not None else 0
    declared = row["size"] if row is not None else -1
    total = received + len(raw)
    if declared >= 0 and total > declared:
        _refuse(c, blobs_dir, peer, ref, f"more data than the declared {declared} bytes", now)
        return Refusal(ref, f"more data than the declared {declared} bytes"), None
    if total > limit:
        _refuse(c, blobs_dir, peer, ref, f"over the blob limit of {limit} bytes", now)
        return Refusal(ref, f"blob over the limit of {limit} bytes"), None
    path = part_path(blobs_dir, peer, ref)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        if raw:
            os.pwrite(fd, raw, received)
        os.ftruncate(fd, total)
        os.fsync(fd)
    finally:
        os.close(fd)
    th = line.get("th") if isinstance(line.get("th"), str) else ""
    last = line.get("last") is True
    status = "received" if last else "pending"
    c.execute(
        "INSERT INTO blobs (peer, dir, ref, th, status, received, next_n, created, updated)"
        " VALUES (?, 'in', ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (peer, dir, ref) DO UPDATE SET"
        " status = excluded.status, received = excluded.received, next_n = excluded.next_n,"
        " th = CASE WHEN blobs.th = '' THEN excluded.th ELSE blobs.th END,"
        " updated = excluded.updated",
        (peer, ref, th, status, total, n + 1, now, now))
    if last:
        return _finish_if_named(c, blobs_dir, peer, ref, now)
    return None, None


def _finish_if_named(c: sqlite3.Connection, blobs_dir: str, peer: str, ref: str, now: int,
                     re: str | None = None) -> tuple[Refusal | None, str | None]:
    """Move a fully received blob to its final path once its msg is stored too.

    Returns (a refusal, the final path): a blob whose last chunk leaves it
    shorter than its msg declared is refused, never complete.
    """
    row = _row(c, peer, ref)
    if row is None or row["status"] != "received" or not row["msg_id"]:
        return None, None
    if row["size"] >= 0 and row["received"] != row["size"]:
        why = (f"the last chunk ends the blob at {row['received']} bytes;"
               f" its msg declared {row['size']}")
        _refuse(c, blobs_dir, peer, ref, why, now)
        return Refusal(ref, why, re=re), None
    dest = final_path(blobs_dir, peer, ref, row["name"] or ref)
    os.makedirs(os.path.dirname(dest), mode=0o700, exist_ok=True)
    src = part_path(blobs_dir, peer, ref)
    if not os.path.exists(src) and row["received"] == 0:
        open(src, "wb").close()
    os.replace(src, dest)
    c.execute("UPDATE blobs SET status = 'complete', path = ?, updated = ?"
              " WHERE peer = ? AND dir = 'in' AND ref = ?", (dest, now, peer, ref))
    return None, dest


def msg_named_blobs(c: sqlite3.Connection, blobs_dir: str, peer: str, line: dict, limit: int,
                    now: int) -> list[Refusal]:
    """A stored msg names blobs: record them, finish complete ones, refuse oversize."""
    out: list[Refusal] = []
    parts = line.get("parts") if isinstance(line.get("parts"), list) else []
    th = line.get("th") or ""
    for p in parts:
        if not isinstance(p, dict) or p.get("k") != "blob" or not isinstance(p.get("ref"), str):
            continue
        if "bulk" in p:  # fetched on a side connection (awp/node/bulk.py), not chunks
            continue
        ref = p["ref"]
        name = p.get("name") if isinstance(p.get("name"), str) else ""
        mime = p.get("mime") if isinstance(p.get("mime"), str) else ""
        size = p.get("size")
        # No size (or not a number) means "unknown", as older peers may send;
        # an integer we cannot hold (negative, 2**63 or more) is refused below.
        bad_size = type(size) is int and not is_count(size)
        if type(size) is not int or bad_size:
            size = -1
        c.execute(
            "INSERT INTO blobs (peer, dir, ref, th, name, mime, size, status, msg_id, created,"
            " updated) VALUES (?, 'in', ?, ?, ?, ?, ?, 'pending', ?, ?, ?)"
            " ON CONFLICT (peer, dir, ref) DO UPDATE SET name = excluded.name,"
            " mime = excluded.mime, size = excluded.size, msg_id = excluded.msg_id,"
            " th = excluded.th, updated = excluded.updated"
            " WHERE blobs.status != 'complete'",  # a finished file keeps what it was
            (peer, ref, th, name, mime, size, line["id"], now, now))
        row = _row(c, peer, ref)
        if row["status"] in ("refused", "complete"):
            continue
        if bad_size:
            why = f"declared size {p['size']} is not a byte count"
            _refuse(c, blobs_dir, peer, ref, why, now)
            out.append(Refusal(ref, why[:200], re=line["id"]))
        elif size > limit:
            _refuse(c, blobs_dir, peer, ref, f"declared size {size} is over the limit", now)
            out.append(Refusal(ref, f"blob of {size} bytes is over the limit of {limit}",
                               re=line["id"]))
        elif size >= 0 and row["received"] > size:
            _refuse(c, blobs_dir, peer, ref, "more data than the declared size", now)
            out.append(Refusal(ref, "more data than the declared size", re=line["id"]))
        else:
            refusal, _path = _finish_if_named(c, blobs_dir, peer, ref, now, re=line["id"])
            if refusal is not None:
                out.append(refusal)
    return out


def blob_rows(c: sqlite3.Connection, peer: str | None = None) -> list[dict]:
    q = "SELECT * FROM blobs" + (" WHERE peer = ?" if peer else "") + " ORDER BY created"
    return [dict(r) for r in c.execute(q, (peer,) if peer else ())]


def files_of(c: sqlite3.Connection, peer: str, dir_: str, line: dict) -> list[dict]:
    """The blob parts of a msg with their local status and path, for rendering."""
    out = []
    parts = line.get("parts") if isinstance(line.get("parts"), list) else []
    for p in parts:
        if not isinstance(p, dict) or p.get("k") != "blob":
            continue
        row = c.execute("SELECT status, path FROM blobs WHERE peer = ? AND dir = ? AND ref = ?",
                        (peer, "out" if dir_ == "out" else "in", p.get("ref"))).fetchone()
        out.append({"ref": p.get("ref"), "name": p.get("name"), "mime": p.get("mime"),
                    "size": p.get("size"), "status": row[0] if row else "unknown",
                    "path": row[1] if row else ""})
    return out
