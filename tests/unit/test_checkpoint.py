"""WAL checkpoints on their own thread (awp/store/checkpoint.py)."""

from __future__ import annotations

import os
import sqlite3

import trio

from awp.store.checkpoint import BACKSTOP_PAGES, Checkpointer
from awp.store.db import connect, open_store
from awp.store.writer import Writer


def test_the_checkpoint_thread_copies_the_wal_back_not_the_writers_commit(tmp_path):
    """Large writes reach the database file through the checkpoint thread,
    the writer's own autocheckpoint waits for its backstop, and both end
    cleanly with the writer."""
    path = str(tmp_path / "awp.db")
    conn = open_store(path)
    conn.execute("CREATE TABLE t (v TEXT)")
    ckpt = Checkpointer(lambda: connect(path), every=256 * 1024)
    blob = "x" * 100_000

    def put(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t (v) VALUES (?)", (blob,))

    async def main() -> None:
        w = Writer(conn, checkpointer=ckpt)
        w.start()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
        size = os.path.getsize(path)
        for _ in range(8):  # 800 KB: far under the backstop's 16 MB
            await w.submit_nowait(put, weight=len(blob)).wait()
        # Told at 300 and 600 KB (the two may come as one run): the pages of
        # at least 600 KB reach the database file.
        with trio.fail_after(30):
            while os.path.getsize(path) < size + 500_000 or ckpt.runs < 1:
                await trio.sleep(0.01)
        assert ckpt.failed == ""
        await w.stop()

    trio.run(main)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 8
