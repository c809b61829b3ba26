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

import json
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field

from ..base.files import write_private
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
    """Rename the store's files to ``<db>.damaged-<stamp>[-wal|-shm]``.

    The WAL and shared-memory files go first and the database last, so that
    the database's new name existing means every file of it has moved.
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{db_path}.damaged-{stamp}"
    for suffix in ("-wal", "-shm", ""):
        src = db_path + suffix
        if os.path.exists(src):
            os.rename(src, base + suffix)
    _sync_dir(db_path)
    return [base + s for s in ("", "-wal", "-shm") if os.path.exists(base + s)]


def state_path(db_path: str) -> str:
    """The record of a repair under way: present from before the first file
    moves until the new store is in place."""
    return db_path + ".repairing"


def interrupted(db_path: str) -> str:
    """'' unless a repair was stopped before it finished; else where it kept
    the damaged files (what the refusal to start names)."""
    try:
        with open(state_path(db_path)) as f:
            return str(json.load(f).get("aside", "")) or "?"
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, AttributeError):
        return "?"  # a record cut short by the kill itself: still a repair under way


def repair(db_path: str) -> Salvage:
    """Move the store aside and copy its readable rows into a new one.

    The caller holds the home's lock (no daemon may open the store meanwhile).
    Safe to kill at any point: the repair is recorded (:func:`state_path`)
    before anything moves, the new store is built under another name and
    renamed into place only when complete, and the record is removed last.
    While it exists the daemon refuses to start; running this again picks
    up from where the last run stopped (see :func:`_resume`).
    """
    state = state_path(db_path)
    base = _resume(db_path)
    if base is None:
        result = Salvage(wal=check.check_wal(db_path))
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        base = f"{db_path}.damaged-{stamp}"
        if not os.path.exists(db_path):
            return result
        write_private(state, json.dumps({"aside": base}) + "\n")
        _sync_dir(db_path)
    else:
        result = Salvage(wal=check.check_wal(base) if os.path.exists(base) else None)
        if not os.path.exists(state):  # it was damaged: written again, whole
            write_private(state, json.dumps({"aside": base}) + "\n")
    if not os.path.exists(base):
        move_aside(db_path, base[len(db_path) + len(".damaged-"):])
    result.moved = [base + s for s in ("", "-wal", "-shm") if os.path.exists(base + s)]
    if not os.path.exists(db_path):
        _rebuild(db_path, base, result)
    os.unlink(state)
    _sync_dir(db_path)
    return result


def _resume(db_path: str) -> str | None:
    """The damaged files' base name of a repair that was stopped, or None.

    A stopped repair left its record and one of: the files not (all) moved
    yet (the database keeps its name until its WAL has moved), moved with
    no new store in place (the copy was cut short: it is thrown away and
    made again), or the new store in place (only the record was left).
    """
    try:
        with open(state_path(db_path)) as f:
            base = json.load(f)["aside"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        # The record is written whole or not at all (a rename), so this is
        # damage to it.  With the store still in place, repair from the start;
        # without, the newest files moved aside are the ones to copy from.
        os.unlink(state_path(db_path))
        if os.path.exists(db_path):
            return None
        folder, name = os.path.split(db_path)
        kept = sorted(n for n in os.listdir(folder or ".") if n.startswith(name + ".damaged-")
                      and not n.endswith(("-wal", "-shm")))
        return os.path.join(folder, kept[-1]) if kept else None
    if not isinstance(base, str) or not base.startswith(db_path + ".damaged-"):
        raise OSError(f"{state_path(db_path)} names {base!r}, not a file beside {db_path}")
    return base


def _rebuild(db_path: str, base: str, result: Salvage) -> None:
    """Copy what reads from the files at ``base`` into a new store at ``db_path``."""
    new_path = db_path + ".repair-new"
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(new_path + suffix):
            os.unlink(new_path + suffix)  # a copy a killed run left half made
    scratch = tempfile.mkdtemp(prefix="awp-repair-", dir=os.path.dirname(db_path))
    try:
        copy = os.path.join(scratch, "old.db")
        for suffix in ("", "-wal"):
            if os.path.exists(base + suffix):
                shutil.copyfile(base + suffix, copy + suffix)
        new = open_store(new_path)
        try:
            _copy_rows(copy, new, result)
            new.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            new.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with open(new_path, "rb") as f:
        os.fsync(f.fileno())
    os.rename(new_path, db_path)
    _sync_dir(db_path)


def _sync_dir(db_path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(db_path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        _keep_sequences(old, new)
    finally:
        old.close()


def _keep_sequences(old: sqlite3.Connection, new: sqlite3.Connection) -> None:
    """Carry over each AUTOINCREMENT counter that is past the rows kept (rows
    deleted at the end of a table): a counter that went back would hand out
    a sequence number again."""
    try:
        seqs = old.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
    except sqlite3.Error:
        return
    new.execute("BEGIN IMMEDIATE")
    for name, seq in seqs:
        if not isinstance(name, str) or not isinstance(seq, int):
            continue
        if new.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ? AND seq < ?",
                       (seq, name, seq)).rowcount == 0 and not new.execute(
                "SELECT 1 FROM sqlite_sequence WHERE name = ?", (name,)).fetchone():
            new.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
    new.execute("COMMIT")


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
        ahead = _ahead(rows, after)
        for row in ahead:
            kept += new.execute(insert, tuple(row)).rowcount
        if len(ahead) < len(rows):
            # A damaged interior page can send a seek past ``after`` back to
            # lower rowids: followed, the copy went round in circles for good
            # (issue 34: a truncated 23 MB store, 15 minutes and counting).
            # What is out of order counts as an unreadable stretch.
            bad += 1
            nxt = _next_readable(old, select, ahead[-1][0] if ahead else after)
            if nxt is None:
                break
            after = nxt
            continue
        after = rows[-1][0]
    return kept, bad


def _ahead(rows: list, after: int) -> list:
    """The leading rows whose rowids climb past ``after``, as a sound B-tree gives them."""
    out = []
    for row in rows:
        if row[0] <= after:
            break
        out.append(row)
        after = row[0]
    return out


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
            got = old.execute(select, (start, 1)).fetchall()
        except sqlite3.DatabaseError:
            return False
        return not got or got[0][0] > start  # a row behind the seek is damage too

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
