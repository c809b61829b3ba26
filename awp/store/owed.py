"""The fsync a relaxed commit owes, and paying it.

Some commits need not be durable the moment they end, because what they
store is durable elsewhere already: a line of ours that left before its
commit is held by the peer (and its id by the id floor), and a journaled
inbound line by the intake journal.  The writer commits those with
``synchronous = NORMAL``: the WAL is written (a killed process loses
nothing) but not synced.  The sync is then *owed* until one of these pays
it: the next durable commit (its fsync covers every frame before it), or
:meth:`OwedSync.synced`, which fdatasyncs the WAL file from a worker thread,
as a ``synchronous = FULL`` commit would at its end.  :meth:`OwedSync.keep`
pays it at once for a journaled line (the journal keeps the line's record
until then) and within ``SYNC_WITHIN_S`` for an early line of ours, whose
sync the commit applying the peer's ack usually pays first.

The counters change under the writer's lock; they differ while a sync is owed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading

import trio

log = logging.getLogger("awp.store")

_fdatasync = getattr(os, "fdatasync", os.fsync)
SYNC_WITHIN_S = 0.02  # an early line's owed sync is paid by then


class OwedSync:
    """The owed fsync of one writer connection (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock) -> None:
        self._conn = conn
        self._lock = lock  # the writer's: held around every commit
        self._owed_n = 0  # relaxed commits that owe a sync
        self._synced_n = 0  # of those, how many a sync covered
        self._due = trio.Event()  # set when a sync becomes owed (keep waits on it)
        self._prompt = False  # pay at once (a journaled line's)
        self._fd = -1  # the WAL file, opened at the first sync

    def owe(self, *, prompt: bool) -> None:
        """A relaxed commit just ended (the writer's lock held)."""
        self._owed_n += 1
        self._prompt = self._prompt or prompt
        self._due.set()

    def paid(self) -> None:
        """A durable commit just ended (the lock held): its fsync covered them all."""
        self._synced_n = self._owed_n

    def owed(self) -> bool:
        return self._owed_n != self._synced_n

    async def synced(self) -> None:
        """Return once every relaxed commit so far is durable."""
        if self.owed():
            await trio.to_thread.run_sync(self._sync)

    async def keep(self) -> None:
        """Pay each owed sync in time, for as long as the caller's nursery runs."""
        while True:
            await self._due.wait()
            self._due = trio.Event()
            if not self._prompt:
                await trio.sleep(SYNC_WITHIN_S)
            self._prompt = False
            await self.synced()

    def _sync(self) -> None:
        """Worker thread: fdatasync the WAL, which holds every frame committed so
        far; should the file not open, a passive checkpoint syncs it instead.

        The sync runs without the writer's lock, so the event loop may take
        the store meanwhile: it covers the commits counted before it began
        (a WAL restarts only after a checkpoint, which syncs it first).
        """
        owed = self._owed_n
        if owed == self._synced_n:
            return
        try:
            if self._fd < 0:
                with self._lock:
                    path = self._conn.execute("PRAGMA database_list").fetchone()[2] + "-wal"
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            _fdatasync(self._fd)
        except OSError as e:
            log.warning("cannot sync the WAL directly (%s): checkpointing instead", e)
            with self._lock:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        with self._lock:
            self._synced_n = max(self._synced_n, owed)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
