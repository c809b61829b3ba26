"""Group commit: one thread owns the write connection and batches jobs.

Callers on the trio loop submit small functions that take the connection.
The writer runs every queued job inside one transaction (each in its own
savepoint, so one failing job does not undo the others), commits once, and
only then resolves the callers.  That keeps "stored, then acked" true while
paying one fsync for a whole burst instead of one per line, and keeps the
blocking fsync off the event loop.

A job may also carry an ``early`` hook: when every hooked job of a batch has
one and the durability policy allows it (see :mod:`awp.store.idfloor`), those
hooks run as soon as the batch's statements have succeeded, while the commit's
fsync is still under way, so a queued line can already be on the wire.
Otherwise they run just before ``on_commit``.  Callers still learn the outcome
only after the commit.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Protocol

import trio

log = logging.getLogger("awp.store")

Job = Callable[[sqlite3.Connection], Any]
_MAX_BATCH = 4000


class CommitPolicy(Protocol):
    """What the writer asks around each commit (implemented by ``IdFloor``)."""

    def before_commit(self, conn: sqlite3.Connection) -> None: ...
    def committed(self) -> None: ...
    def failed(self) -> None: ...
    def early_ok(self) -> bool: ...


class Pending:
    """The outcome of one job, awaited on the trio side."""

    __slots__ = ("job", "event", "value", "error", "on_commit", "early")

    def __init__(self, job: Job, on_commit: Callable[[Any], None] | None = None,
                 early: Callable[[Any], None] | None = None) -> None:
        self.job = job
        self.on_commit = on_commit
        self.early = early
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

    def __init__(self, conn: sqlite3.Connection, *, policy: CommitPolicy | None = None) -> None:
        self._conn = conn
        self._q: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._policy = policy
        self.commits = 0
        self.early_batches = 0

    def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._run, name="awp-writer", daemon=True)
        self._thread.start()

    def submit_nowait(self, job: Job, on_commit: Callable[[Any], None] | None = None,
                      *, early: Callable[[Any], None] | None = None) -> Pending:
        """Queue a job; await ``.wait()`` on the result for the committed value.

        ``on_commit`` runs on the trio thread right after the commit, in commit
        order across all jobs (task wake-up order is not guaranteed to be).
        ``early`` runs in the same order, either before the commit once the
        job's statements succeeded (see the module docstring) or just before
        ``on_commit``.
        """
        p = Pending(job, on_commit, early)
        self._q.put(p)
        return p

    async def run(self, job: Job) -> Any:
        return await self.submit_nowait(job).wait()

    async def run_with_hook(self, job: Job, on_commit: Callable[[Any], None], *,
                            early: Callable[[Any], None] | None = None) -> Any:
        return await self.submit_nowait(job, on_commit, early=early).wait()

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
        policy = self._policy
        sent_early = 0
        try:
            if policy is not None:
                policy.before_commit(conn)
                sent_early = self._run_early_hooks(batch, policy)
            conn.execute("COMMIT")
            self.commits += 1
        except BaseException as e:  # noqa: BLE001
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if policy is not None:
                policy.failed()
            if sent_early:
                log.error("%d lines had already been sent when this commit failed", sent_early)
            self._fail_all(batch, e)
            return
        if policy is not None:
            policy.committed()
        self._resolve(batch)

    def _run_early_hooks(self, batch: list[Pending], policy: CommitPolicy) -> int:
        """Hand the batch's hooks to the trio thread now, if all may go early."""
        live = [p for p in batch if p.error is None]
        if (not any(p.early for p in live)
                or any(p.on_commit is not None and p.early is None for p in live)
                or not policy.early_ok()):
            return 0
        hooks = [(p.early, p.value) for p in live if p.early is not None]
        for p in live:
            p.early = None  # ran already; not again after the commit

        def run_hooks() -> None:
            for hook, value in hooks:
                try:
                    hook(value)  # type: ignore[misc]
                except Exception:
                    log.exception("early hook failed")

        assert self._token is not None
        try:
            self._token.run_sync_soon(run_hooks)
        except trio.RunFinishedError:
            return 0
        self.early_batches += 1
        return len(hooks)

    def _fail_all(self, batch: list[Pending], error: BaseException) -> None:
        log.error("store commit failed: %s", error)
        for p in batch:
            p.error = error
            p.value = None
        self._resolve(batch)

    def _resolve(self, batch: list[Pending]) -> None:
        def wake() -> None:
            for p in batch:
                if p.error is None:
                    for hook in (p.early, p.on_commit):
                        if hook is not None:
                            try:
                                hook(p.value)
                            except Exception:
                                log.exception("post-commit hook failed")
                p.event.set()

        try:
            assert self._token is not None
            self._token.run_sync_soon(wake)
        except trio.RunFinishedError:
            pass
