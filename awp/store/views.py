"""The dashboard's reads: whole queries that return plain dicts.

The web routes (:mod:`awp.daemon.api_web`) shape answers from these and run
no SQL of their own; every statement against the mirror, presence, log and
blob tables that the dashboard needs lives here.
"""

from __future__ import annotations

import json
import sqlite3

from ..wire.names import clean_name
from . import queries


def mirror_summary(c: sqlite3.Connection) -> list[dict]:
    """Shared threads: one row per (sharer, th) with both sides' last states."""
    out: dict[tuple[str, str], dict] = {}
    for r in c.execute(
        "SELECT sharer, th, max(of) AS of, max(of_name) AS of_name, max(subject) AS subject,"
        " count(*) AS n, min(at) AS first_at, max(at) AS last_at FROM mirrors"
        " GROUP BY sharer, th"
    ):
        out[(r["sharer"], r["th"])] = {
            "sharer": r["sharer"], "th": r["th"], "of": r["of"], "of_name": r["of_name"],
            "subject": r["subject"], "lines": r["n"], "first_at": r["first_at"],
            "last_at": r["last_at"], "sharer_state": "", "of_state": "",
        }
    # The last state line of each side, in arrival order.
    for r in c.execute(
        "SELECT sharer, th, dir, line FROM mirrors WHERE json_valid(line)"
        " AND json_extract(line, '$.t') = 'state' ORDER BY at, rowid"
    ):
        m = out.get((r["sharer"], r["th"]))
        try:
            line = json.loads(r["line"])
        except ValueError:
            continue
        if m is None or not isinstance(line, dict) or line.get("t") != "state":
            continue
        word = line.get("state")
        if isinstance(word, str):
            m["sharer_state" if r["dir"] == "out" else "of_state"] = word[:40]
    return list(out.values())


def subjects(c: sqlite3.Connection, pairs: set[tuple[str, str]]) -> dict[str, str]:
    subjects = {}
    for peer, th in pairs:
        row = c.execute("SELECT subject FROM threads WHERE peer = ? AND th = ?",
                        (peer, th)).fetchone()
        if row is not None:
            subjects[f"{peer} {th}"] = row[0]
    return subjects


def _mirror_rows(c: sqlite3.Connection, where: str, args: tuple, limit: int,
                 newest: bool = False) -> list[dict]:
    order = "DESC" if newest else ""
    rows = c.execute(
        f"SELECT rowid AS seq, sharer, id, th, of, of_name, subject, dir, line, at FROM mirrors"
        f" WHERE {where} ORDER BY rowid {order} LIMIT ?", (*args, limit)).fetchall()
    out = []
    for r in rows:
        try:
            line = json.loads(r["line"])
        except ValueError:
            line = {}
        out.append({"seq": r["seq"], "sharer": r["sharer"], "id": r["id"], "th": r["th"],
                    "of": r["of"], "of_name": r["of_name"], "subject": r["subject"],
                    "dir": r["dir"], "line": line if isinstance(line, dict) else {},
                    "at": r["at"]})
    if newest:
        out.reverse()
    return out


def mirror_rows_newest(c: sqlite3.Connection, limit: int) -> list[dict]:
    return _mirror_rows(c, "1", (), limit, newest=True)


def mirror_rows_after(c: sqlite3.Connection, after: int, limit: int) -> list[dict]:
    return _mirror_rows(c, "rowid > ?", (after,), limit)


def mirror_rows_of(c: sqlite3.Connection, sharer: str, th: str, limit: int) -> list[dict]:
    """The newest ``limit`` mirrored lines of one shared thread, oldest first."""
    return _mirror_rows(c, "sharer = ? AND th = ?", (sharer, th), limit, newest=True)


def mirror_max(c: sqlite3.Connection) -> int:
    return c.execute("SELECT coalesce(max(rowid), 0) FROM mirrors").fetchone()[0]


def presence_docs(c: sqlite3.Connection, cutoff: int) -> list[dict]:
    """Presence documents dated ``cutoff`` or later, signature dropped, by origin."""
    out = []
    for r in c.execute(
        "SELECT origin, name, seq, doc, doc_ts, received, via, hops FROM presence"
        " WHERE doc_ts >= ? ORDER BY origin", (cutoff,)
    ):
        try:
            doc = json.loads(r["doc"])
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        doc.pop("sig", None)
        out.append({"origin": r["origin"], "name": clean_name(r["name"]), "seq": r["seq"],
                    "doc": doc, "doc_ts": r["doc_ts"], "received": r["received"],
                    "via": r["via"], "hops": r["hops"]})
    return out


def log_records(c: sqlite3.Connection, *, after: int | None, limit: int) -> list[dict]:
    """Log records after seq ``after`` (oldest first), or the newest ``limit`` if ``None``."""
    labels = queries.Labels(c)
    if after is None:
        rows = c.execute("SELECT * FROM log ORDER BY seq DESC LIMIT ?",
                         (limit,)).fetchall() if limit else []
        rows.reverse()
    else:
        rows = c.execute("SELECT * FROM log WHERE seq > ? ORDER BY seq LIMIT ?",
                         (after, limit)).fetchall()
    return [queries.record(c, r, labels) for r in rows]


def local_thread(c: sqlite3.Connection, peer: str, th: str, limit: int) -> dict | None:
    """One of our own threads with its newest ``limit`` records, or ``None``."""
    row = c.execute("SELECT * FROM threads WHERE peer = ? AND th = ?", (peer, th)).fetchone()
    if row is None:
        return None
    rows = c.execute("SELECT * FROM log WHERE peer = ? AND th = ? ORDER BY seq DESC LIMIT ?",
                     (peer, th, limit)).fetchall()
    labels = queries.Labels(c)
    return {"subject": row["subject"], "mine": row["mine"], "my_note": row["my_note"],
            "theirs": row["theirs"], "their_note": row["their_note"],
            "updated": row["updated"], "private": bool(row["private"]),
            "records": [queries.record(c, r, labels) for r in reversed(rows)]}


def blob_row(c: sqlite3.Connection, peer: str, direction: str, ref: str) -> sqlite3.Row | None:
    return c.execute("SELECT name, mime, size, status, path FROM blobs WHERE peer = ? AND dir = ?"
                     " AND ref = ?", (peer, direction, ref)).fetchone()
