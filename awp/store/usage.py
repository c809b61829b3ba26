"""Bytes each peer has made us keep on disk, kept in the ``usage`` table.

Counting them again from the log at every start would read the whole inbound
log; instead every job that stores a peer's bytes adds them here inside its
own transaction, so the figure commits (or rolls back) with the bytes it
counts and survives a restart.  A blob row costs its received bytes while its
data is on disk, plus a fixed amount for the row itself, so even a flood of
empty or refused blobs is paid for.

A stored line costs more than its bytes: its log row holds the peer's key,
ids and times besides the line, and three indexes repeat some of them.  With
tiny lines that is most of the cost (a 130-byte msg took 474 bytes of
awp.db, 974 when each opened a thread), so a budget counted in line bytes
alone let 8 MiB become 30 MB on disk.  Each line is therefore charged
:data:`LOG_ROW` more, and :data:`THREAD_ROW` more again when it opens a
thread (its ``threads`` and ``seen`` rows), figures measured on real stores
and rounded up (``tests/integration/test_budgets.py`` checks the file).
"""

from __future__ import annotations

import os
import sqlite3

from . import blobs as blobstore

BLOB_ROW = 256  # what a blob row costs a peer besides its data
LOG_ROW = 384  # what a stored line's row and index entries cost besides the line (343 measured)
THREAD_ROW = 512  # what a line opening a thread costs more (492 measured)
_ROW_COSTS = f"{LOG_ROW}/{THREAD_ROW}"  # in meta, so a store counted otherwise is settled
_LIVE = ("pending", "received", "complete")


def line_cost(nbytes: int, new_thread: bool = False) -> int:
    """What storing a line of ``nbytes`` costs its peer's budget."""
    return nbytes + LOG_ROW + (THREAD_ROW if new_thread else 0)


def settle(c: sqlite3.Connection) -> None:
    """At start: bring a store counted with other row costs (or none, as
    before they were counted) to the current ones, in one transaction.

    Rows already stored are charged the difference: each inbound log and
    mirror row :data:`LOG_ROW`, each thread a peer opened :data:`THREAD_ROW`.
    """
    row = c.execute("SELECT v FROM meta WHERE k = 'usage_row_costs'").fetchone()
    if row is not None and row[0] == _ROW_COSTS:
        return
    old_log, old_thread = (int(x) for x in row[0].split("/")) if row is not None else (0, 0)
    c.execute("BEGIN IMMEDIATE")
    try:
        c.execute("""
            INSERT INTO usage (peer, log_bytes)
            SELECT peer, SUM(n) FROM (
                SELECT peer, ? AS n FROM log WHERE dir = 'in'
                UNION ALL SELECT sharer, ? FROM mirrors
                UNION ALL SELECT peer, ? FROM seen
            ) GROUP BY peer
            ON CONFLICT (peer) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes""",
                  (LOG_ROW - old_log, LOG_ROW - old_log, THREAD_ROW - old_thread))
        c.execute("INSERT INTO meta (k, v) VALUES ('usage_row_costs', ?)"
                  " ON CONFLICT (k) DO UPDATE SET v = excluded.v", (_ROW_COSTS,))
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise


def load(c: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """Every peer's ``(log_bytes, blob_bytes)``."""
    return {r[0]: (r[1], r[2]) for r in c.execute(
        "SELECT peer, log_bytes, blob_bytes FROM usage")}


def add(c: sqlite3.Connection, peer: str, log: int = 0, blob: int = 0) -> None:
    c.execute("INSERT INTO usage (peer, log_bytes, blob_bytes) VALUES (?, ?, ?)"
              " ON CONFLICT (peer) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes,"
              " blob_bytes = blob_bytes + excluded.blob_bytes", (peer, log, blob))


def blob_cost(row: sqlite3.Row | dict | None) -> int:
    """What one inbound blob row costs its peer: the row, and its data while kept."""
    if row is None:
        return 0
    return BLOB_ROW + (row["received"] if row["status"] in _LIVE else 0)


def unclaimed(c: sqlite3.Connection, peer: str) -> int:
    """Bytes of ``peer``'s blobs that no stored msg names yet."""
    return c.execute(
        "SELECT COALESCE(SUM(received), 0) FROM blobs WHERE peer = ? AND msg_id = ''"
        " AND dir = 'in' AND status IN ('pending', 'received')", (peer,)).fetchone()[0]


def expire_unclaimed(c: sqlite3.Connection, blobs_dir: str,
                     cutoff: int) -> list[tuple[str, int]]:
    """Drop inbound blobs no msg named, untouched since ``cutoff`` (Unix ms).

    Their partial files are removed and their cost given back; returns
    ``(peer, bytes freed)`` per blob.  A msg naming one later finds no data
    and shows the file as pending, as it would if the chunks never came.
    """
    rows = c.execute(
        "SELECT peer, ref, status, received FROM blobs WHERE dir = 'in' AND msg_id = ''"
        " AND status IN ('pending', 'received', 'refused') AND updated < ?",
        (cutoff,)).fetchall()
    freed = []
    for r in rows:
        try:
            os.unlink(blobstore.part_path(blobs_dir, r["peer"], r["ref"]))
        except OSError:
            pass
        c.execute("DELETE FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (r["peer"], r["ref"]))
        cost = blob_cost(r)
        add(c, r["peer"], blob=-cost)
        freed.append((r["peer"], cost))
    return freed
