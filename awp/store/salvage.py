"""``awp repair``: move a damaged store aside and keep what can still be read.

Nothing is deleted.  The damaged files are renamed (``awp.db`` to
``awp.db.damaged-<UTC time>``, its ``-wal`` and ``-shm`` with it) so they
stay available for a closer look; the rows are then read from a scratch copy
(reading replays and, at close, removes a WAL, which must not happen to the
kept files) into a new store with the current schema.

Reading a damaged B-tree fails at the first bad page.  Each table is read
in rowid order a batch at a time; when a read fails, rowids further on are
probed (1, 2, 4, ... past the last good one, then halving back) to find the
first row that can be reached again, so one bad page costs the rows on it,
not the rest of the table.  The identity lives in its own file and is not
touched.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field

from . import check
from .db import open_store

_BATCH = 500
_MAX_ROWID = (1 << 63) - 1


@dataclass
class Salvage:
    moved: list[str] = field(default_factory=list)  # where the damaged files went
    kept: dict[str, int] = field(default_factory=dict)  # rows copied per table
    unreadable: dict[str, int] = field(default_factory=dict)  # bad stretches per table
    lost_tables: list[str] = field(default_factory=list)  # tables that could not be read
    wal: check.WalReport | None = None


def move_aside(db_path: str, stamp: str | None = None) -> list[str]:
    """Rename the store's files to ``<db>.damaged-<stamp>[-wal|-shm]``."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{db_path}.damaged-{stamp}"
    moved = []
    for suffix in ("", "-wal", "-shm"):
        src = db_path + suffix
        if os.path.exists(src):
            os.rename(src, base + suffix)
            moved.append(base + suffix)
    return moved


def repair(db_path: str) -> Salvage:
    """Move the store aside and copy its readable rows into a new one.

    The caller holds the home's lock (no daemon may open the store meanwhile).
    """
    result = Salvage(wal=check.check_wal(db_path))
    result.moved = move_aside(db_path)
    if not result.moved:
        return result
    scratch = tempfile.mkdtemp(prefix="awp-repair-", dir=os.path.dirname(db_path))
    try:
        copy = os.path.join(scratch, "old.db")
        for src in result.moved:
            suffix = src[len(result.moved[0]):]
            if suffix in ("", "-wal"):
                shutil.copyfile(src, copy + suffix)
        new = open_store(db_path)
        try:
            _copy_rows(copy, new, result)
        finally:
            new.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def _copy_rows(old_path: str, new: sqlite3.Connection, result: Salvage) -> None:
    try:
        old = sqlite3.connect(old_path, isolation_level=None)
        # Lets SQLite read a file shorter than its header says (a truncated
        # store), instead of refusing it as a whole; we only read.
        old.execute("PRAGMA writable_schema = ON")
    except sqlite3.Error:
        result.lost_tables.append("*")
        return
    try:
        tables = [r[0] for r in new.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        for table in tables:
            try:
                have = {r[1] for r in old.execute(f'PRAGMA table_info("{table}")')}
            except sqlite3.Error:
                have = set()
            want = [r[1] for r in new.execute(f'PRAGMA table_info("{table}")')]
            cols = [c for c in want if c in have]
            if not cols:
                result.lost_tables.append(table)
                continue
            new.execute("BEGIN IMMEDIATE")
            try:
                kept, bad = _copy_table(old, new, table, cols)
                new.execute("COMMIT")
            except BaseException:
                new.execute("ROLLBACK")
                raise
            result.kept[table] = kept
            if bad:
                result.unreadable[table] = bad
    finally:
        old.close()


def _copy_table(old: sqlite3.Connection, new: sqlite3.Connection, table: str,
                cols: list[str]) -> tuple[int, int]:
    """Copy the readable rows of one table; (rows kept, bad stretches skipped)."""
    names = ", ".join(f'"{c}"' for c in cols)
    select = f'SELECT rowid, {names} FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT ?'
    insert = (f'INSERT OR IGNORE INTO "{table}" (rowid, {names})'
              f' VALUES (?, {", ".join("?" * len(cols))})')
    after, kept, bad = -_MAX_ROWID - 1, 0, 0
    while True:
        try:
            rows = old.execute(select, (after, _BATCH)).fetchall()
        except sqlite3.DatabaseError:
            rows = _read_one_by_one(old, select, after)
            if not rows:
                bad += 1
                after = _next_readable(old, select, after)
                if after is None:
                    break
                continue
        if not rows:
            break
        for row in rows:
            kept += new.execute(insert, tuple(row)).rowcount
        after = rows[-1][0]
    return kept, bad


def _read_one_by_one(old: sqlite3.Connection, select: str, after: int) -> list:
    """The rows after ``after`` up to the first unreadable one."""
    rows: list = []
    while len(rows) < _BATCH:
        try:
            got = old.execute(select, (rows[-1][0] if rows else after, 1)).fetchall()
        except sqlite3.DatabaseError:
            break
        if not got:
            break
        rows.extend(got)
    return rows


def _next_readable(old: sqlite3.Connection, select: str, after: int) -> int | None:
    """A rowid from which the table reads again (the rows between are lost),
    or None when nothing beyond ``after`` can be read."""
    def reads(start: int) -> bool:
        try:
            old.execute(select, (start, 1)).fetchall()
            return True
        except sqlite3.DatabaseError:
            return False

    step = 1
    while after + step < _MAX_ROWID and not reads(after + step):
        step *= 2
    if after + step >= _MAX_ROWID:
        return None
    lo, hi = step // 2, step  # reads(after + hi); not reads(after + lo) (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reads(after + mid):
            hi = mid
        else:
            lo = mid
    return after + hi
