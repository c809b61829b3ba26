"""Opening the store: pragmas that make commits durable, and migrations."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from .schema import MIGRATIONS

T = TypeVar("T")


class StoreError(Exception):
    """The store cannot be opened or written (read-only or full disk, corruption)."""


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN/COMMIT ourselves).

    WAL lets readers (the CLI's queries, the API) run beside the writer, and
    ``synchronous=FULL`` fsyncs the WAL at every commit, which is what makes
    an ack a promise.
    """
    if readonly:
        uri = f"file:{path}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                               timeout=10)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def in_one_snapshot(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(conn)`` with all its statements reading one snapshot of the store.

    In autocommit mode each statement reads the store as it is when it
    starts, so a read of several statements (rows, then their maximum) can
    see a commit land between two of them. A deferred transaction holds the
    first statement's snapshot to the end; readers never block the writer
    in WAL mode.
    """
    conn.execute("BEGIN")
    try:
        return fn(conn)
    finally:
        if conn.in_transaction:  # an error may have ended it already
            conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations; returns the schema version reached."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"awp.db has schema version {version}, newer than this awp knows "
            f"({len(MIGRATIONS)}); upgrade awp"
        )
    for i in range(version, len(MIGRATIONS)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _split(MIGRATIONS[i]):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {i + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)


def _split(script: str) -> list[str]:
    """The statements of a migration, one by one.

    A piece ends a statement only when SQLite says the statement is complete,
    so a trigger's body (``BEGIN ...; ...; END``) stays in one piece.
    """
    out, buf = [], ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n\t;"):
                out.append(buf.strip())
            buf = ""
    if buf.strip(" \n\t;"):
        out.append(buf.strip())
    return out


def open_store(path: str) -> sqlite3.Connection:
    """Open (creating if needed) and migrate; files are private to the user."""
    existed = os.path.exists(path)
    old = os.umask(0o077)
    try:
        conn = connect(path)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {path}: {e}") from None
    finally:
        os.umask(old)
    try:
        migrate(conn)
    except sqlite3.Error as e:
        raise StoreError(f"cannot prepare {path}: {e}") from None
    if not existed:
        try:
            os.chmod(path, 0o600)
        except OSError:
            pass
    return conn
