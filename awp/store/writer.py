"""Group commit: one thread owns the write connection and batches jobs.

Callers on the trio loop submit small functions that take the connection.
The writer runs every queued job inside one transaction (each in its own
savepoint, so one failing job does not undo the others), commits once, and
only then resolves the callers.  That keeps "stored, then acked" true while
paying one fsync for a whole burst instead of one per line, and keeps the
blocking fsync off the event loop.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import trio

log = logging.getLogger("awp.store")

Job = Callable[[sqlite3.Connection], Any]
_MAX_BATCH = 4000


class Pending:
    """The outcome of one job, awaited on the trio side."""

    __slots__ = ("job", "event", "value", "error", "on_commit")

    def __init__(self, job: Job, on_commit: Callable[[Any], None] | None = None) -> None:
        self.job = job
        self.on_commit = on_commit
        self.event = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.value


class Writer:
    """The single writer thread.  Start it from inside ``trio.run``."""

    def __init__(self, conn: sqlite3.Connection, *, after_commit: Job | None = None) -> None:
        self._conn = conn
        self._q: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._after_commit = after_commit
        self.commits = 0

    def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._run, name="awp-writer", daemon=True)
        self._thread.start()

    def submit_nowait(self, job: Job, on_commit: Callable[[Any], None] | None = None) -> Pending:
        """Queue a job; await ``.wait()`` on the result for the committed value.

        ``on_commit`` runs on the trio thread right after the commit, in commit
        order across all jobs (task wake-up order is not guaranteed to be).
        """
        p = Pending(job, on_commit)
        self._q.put(p)
        return p

    async def run(self, job: Job) -> Any:
        return await self.submit_nowait(job).wait()

    async def run_with_hook(self, job: Job, on_commit: Callable[[Any], None]) -> Any:
        return await self.submit_nowait(job, on_commit).wait()

    async def stop(self) -> None:
        """Finish queued jobs, then end the thread."""
        if self._thread is None:
            return
        self._q.put(None)
        await trio.to_thread.run_sync(self._thread.join)
        self._thread = None

    # -- writer thread ------------------------------------------------------------

    def _run(self) -> None:
        assert self._token is not None
        stopping = False
        while not stopping:
            first = self._q.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            self._commit_batch(batch)

    def _commit_batch(self, batch: list[Pending]) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            self._fail_all(batch, e)
            return
        for p in batch:
            try:
                conn.execute("SAVEPOINT job")
                p.value = p.job(conn)
                conn.execute("RELEASE job")
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                p.error = e
                try:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                except sqlite3.Error:
                    pass
        try:
            if self._after_commit is not None:
                self._after_commit(conn)
            conn.execute("COMMIT")
            self.commits += 1
        except BaseException as e:  # noqa: BLE001
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._fail_all(batch, e)
            return
        self._resolve(batch)

    def _fail_all(self, batch: list[Pending], error: BaseException) -> None:
        log.error("store commit failed: %s", error)
        for p in batch:
            p.error = error
            p.value = None
        self._resolve(batch)

    def _resolve(self, batch: list[Pending]) -> None:
        def wake() -> None:
            for p in batch:
                if p.error is None and p.on_commit is not None:
                    try:
                        p.on_commit(p.value)
                    except Exception:
                        log.exception("post-commit hook failed")
                p.event.set()

        try:
            assert self._token is not None
            self._token.run_sync_soon(wake)
        except trio.RunFinishedError:
            pass
