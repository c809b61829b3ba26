"""WAL checkpoints on a thread of their own, beside the writer's commits.

SQLite copies the WAL back into the database inside the commit that takes
the WAL past ``wal_autocheckpoint`` pages (1,000: 4 MB).  With peers sending
1 MB lines that was every fourth commit, and it copied and synced 4 MB
before the commit returned, so whatever was queued behind it (an honest
peer's small line) waited for that too.  A passive checkpoint can run on
another connection while the writer goes on committing, so the writer hands
it over: :class:`Checkpointer` is told how much each commit wrote and runs
one once about :data:`EVERY_BYTES` have been written since the last.

The writer's own autocheckpoint stays, at :data:`BACKSTOP_PAGES`, for what
this thread does not see (jobs that carry no weight) or cannot finish (a
passive checkpoint leaves frames a reader still needs): the WAL never grows
past it without a checkpoint, as before, only later.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger("awp.store")

EVERY_BYTES = 4 * 1024 * 1024  # written since the last checkpoint: run one
BACKSTOP_PAGES = 4000  # the writer's wal_autocheckpoint (16 MB of 4 KiB pages)


class Checkpointer:
    """One thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` when told to."""

    def __init__(self, connect: Callable[[], sqlite3.Connection],
                 every: int = EVERY_BYTES) -> None:
        self._connect = connect
        self.every = every
        self._written = 0  # bytes written since the last checkpoint (writer thread)
        self._due = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.failed = ""  # the last failure: a warning is logged when it changes

    def start(self, writer_conn: sqlite3.Connection) -> None:
        """Take checkpoints over from ``writer_conn`` (its backstop stays)."""
        writer_conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
        self._thread = threading.Thread(target=self._run, name="awp-checkpoint", daemon=True)
        self._thread.start()

    def wrote(self, nbytes: int) -> None:
        """Writer thread, after a commit: it wrote about ``nbytes`` to the WAL."""
        self._written += nbytes
        if self._written >= self.every:
            self._written = 0
            self._due.set()

    def stop(self) -> None:
        """End the thread (a checkpoint under way finishes first)."""
        if self._thread is None:
            return
        self._stopping = True
        self._due.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error as e:  # the writer's backstop checkpoints instead
            self.failed = str(e)
            log.warning("no checkpoint thread (%s): the writer checkpoints as it commits", e)
            return
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._stopping:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.runs += 1
                except sqlite3.Error as e:  # tried again when more is written
                    if str(e) != self.failed:
                        log.warning("WAL checkpoint failed: %s", e)
                    self.failed = str(e)
        finally:
            conn.close()
