"""Storing a run of a peer's msgs with a few statements, not a few per line.

A peer replaying a backlog sends thousands of msgs, most of them in one
thread, and the connection hands them to the writer in runs of a few dozen.
Stored one by one (:func:`awp.store.ops.store_inbound`), each paid an insert,
an upsert of the thread's resume point and one of the thread itself, plus a
look-up of whether it opened a thread: about 40 us of CPU a line on a small
VM, more than the insert.  Here a run pays one look-up of its duplicates and
of the threads it opens, one ``executemany`` of its rows, one read of their
seqs, and one resume point and one thread upsert per thread of the run.

The result is the same rows as the lines stored one at a time in order:

* a duplicate (same peer, same id, stored before or earlier in the run)
  changes nothing;
* ``seen.last_id`` is the highest id stored in the thread (the upsert keeps
  the larger of the stored and the new one, so the run's highest suffices);
* a thread takes the first non-empty subject of the run's msgs in it when
  it has none, and its ``updated`` moves as one upsert would move it.

Only ``msg`` lines take this way; a run holding anything else is stored one
line at a time by the caller, in order, as before.
"""

from __future__ import annotations

import sqlite3

from ..wire.messages import default_subject
from .ops import _IN_LIST, _ensure_thread, line_ts, note_seen


def _rows_in(conn: sqlite3.Connection, sql: str, peer: str, values: list[str]) -> list:
    """``sql`` (``peer = ?`` first, then ``IN ({marks})``) for ``values``, a bounded
    list at a time."""
    out: list = []
    for start in range(0, len(values), _IN_LIST):
        part = values[start:start + _IN_LIST]
        out += conn.execute(sql.format(marks=",".join("?" * len(part))), (peer, *part))
    return out


def stored_ids(conn: sqlite3.Connection, peer: str, ids: list[str]) -> set[str]:
    """Those of ``ids`` already in the log as lines from ``peer``."""
    return {r[0] for r in _rows_in(
        conn, "SELECT id FROM log WHERE peer = ? AND dir = 'in' AND id IN ({marks})", peer, ids)}


def seen_threads(conn: sqlite3.Connection, peer: str, ths: list[str]) -> set[str]:
    """Those of ``ths`` that ``peer`` has a resume point in (it opened them before)."""
    return {r[0] for r in _rows_in(
        conn, "SELECT th FROM seen WHERE peer = ? AND th IN ({marks})", peer, ths)}


def _subject(line: dict) -> str:
    subject = line.get("subject")
    if isinstance(subject, str) and subject:
        return subject
    parts = line.get("parts")
    return default_subject(parts if isinstance(parts, list) else [])


_INSERT = ("INSERT OR IGNORE INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
           " VALUES ")  # OR IGNORE: a duplicate is the caller's bug, not a failed job
_ROW = "(?, 'in', 'msg', ?, ?, ?, ?, ?, ?, 0, 1)"
_ROWS_AT_ONCE = 32  # 224 parameters a statement


def _insert_rows(conn: sqlite3.Connection, rows: list[tuple]) -> int:
    """Insert ``rows`` in order, many to a statement; how many went in.

    One ``INSERT ... VALUES (...), (...)`` steps once for all its rows:
    ``executemany`` stepped once a row, and released and took back the GIL
    each time, which the event loop's thread, wanting it meanwhile, turned
    into a thread switch a row.  Statements hold 32 rows, then 16, 8 ... 1
    for the rest, so a handful of shapes stay in the statement cache.
    """
    done = i = 0
    while i < len(rows):
        left = len(rows) - i
        k = _ROWS_AT_ONCE if left >= _ROWS_AT_ONCE else 1 << (left.bit_length() - 1)
        done += conn.execute(_INSERT + ",".join([_ROW] * k),
                             [v for row in rows[i:i + k] for v in row]).rowcount
        i += k
    return done


def store_msgs(conn: sqlite3.Connection, peer: str, lines: list[tuple[dict, str]],
               now: int) -> list[int]:
    """Store msgs from ``peer`` none of which is in the log yet, nor twice in
    ``lines``; returns the log seq of each, in order."""
    if not lines:
        return []
    rows = []
    top: dict[str, str] = {}  # thread -> highest id stored in it
    subjects: dict[str, str] = {}  # thread -> first non-empty subject of the run
    for line, text in lines:
        ident = line["id"]
        th = line.get("th") or ""
        rows.append((peer, ident, th, line.get("re") or "", line_ts(line, now), now, text))
        if th:
            if ident > top.get(th, ""):
                top[th] = ident
            if not subjects.get(th):
                subjects[th] = _subject(line)
    inserted = _insert_rows(conn, rows)
    ids = [r[1] for r in rows]
    if inserted == len(rows):
        # Every row went in: AUTOINCREMENT gave them the numbers after the
        # largest ever used, one by one, so the last one tells them all.
        last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        seqs = dict(zip(ids, range(last - len(ids) + 1, last + 1), strict=True))
    else:
        seqs = dict(_rows_in(conn, "SELECT id, seq FROM log WHERE peer = ? AND dir = 'in'"
                             " AND id IN ({marks})", peer, ids))
    for th, ident in top.items():
        note_seen(conn, peer, th, ident, now)
        _ensure_thread(conn, peer, th, subjects[th], now)
    return [seqs.get(i, 0) for i in ids]
