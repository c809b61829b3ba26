"""Group commit: one thread owns the write connection and batches jobs.

Callers on the trio loop submit small functions that take the connection.
The writer runs every queued job inside one transaction (each in its own
savepoint, so one failing job does not undo the others), commits once, and
only then resolves the callers.  That keeps "stored, then acked" true while
paying one fsync for a whole burst instead of one per line, and keeps the
blocking fsync off the event loop.

Two refinements matter for latency at low load, where a message is alone
(and a commit that owes its fsync, below, needs only the first two
conditions of the first):

* **Inline runs.**  Handing a job to the thread and its result back costs two
  cross-thread wake-ups, which on a small VM are as slow as the fsync.  When
  the writer is quiet (nothing queued, nothing unresolved, no commit for a few
  milliseconds, and commits are fast on this disk) a job may run on the
  calling trio thread instead.  Under load everything goes through the
  thread again and group commit takes over.
* **Early hooks.**  A job may carry an ``early`` hook: when every hooked job of
  a batch has one and the durability policy allows it (see
  :mod:`awp.store.idfloor`), those hooks run as soon as the batch's statements
  have succeeded, while the commit's fsync is still under way, so a queued
  line can already be on the wire.  Otherwise they run just before
  ``on_commit``.  Callers still learn the outcome only after the commit.

Hooks always run on the trio thread in commit order, across inline and
threaded batches alike; connections rely on that to send in outbox order.

**Relaxed runs.**  What no one waits on for durability (a board record a
peer relayed: every subscriber holds it, and anti-entropy brings it back)
may be committed without the fsync (:meth:`Writer.run_relaxed`): inline on
the trio thread, with ``synchronous = NORMAL`` (left set while relaxed runs
follow one another; a durable transaction sets ``FULL`` before it begins).  A
killed process loses nothing (the WAL is written); a power loss may lose the
last of them, until the next durable commit or checkpoint syncs the WAL.  It
saves a relay the fsync and both thread hand-overs for every record.

**Commits that owe their fsync** (``relaxed`` in :meth:`Writer.run_held`
and :meth:`Writer.run_now`): a line of ours written to a peer before its
commit, and a line made durable by the intake journal, are committed
without the fsync, which is owed and paid later (:mod:`awp.store.owed`).
Measured on one host: the sender's WAL write and fsync, issued while the
peer's daemon synced the line, made the peer's sync ~0.25 ms slower; the
journaled line's commit blocked the event loop for its fsync.

**Urgent jobs go first.**  A job may be marked urgent (a peer's line when
nothing else of that connection is waiting for the store) and given a weight
(its bytes).  Queued urgent jobs make a batch of their own ahead of the
others, and other batches stop at about ``_BATCH_BYTES`` of weight, so a
quiet peer's line waits for at most one modest transaction of a flooding
peer's, not for everything the flooder has queued.  An urgent job queued
while such a batch is being staged joins it: it is staged after the job in
progress, the batch's jobs not yet staged go back to the head of the queue,
and the quiet line shares the commit under way instead of waiting for the
rest of the batch and a commit of its own.  Jobs that are not urgent keep
their order, and hooks still run in commit order.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import trio

from .checkpoint import Checkpointer
from .owed import OwedSync

log = logging.getLogger("awp.store")

Job = Callable[[sqlite3.Connection], Any]
Hook = Callable[[Any], None]
_MAX_BATCH = 4000
_BATCH_BYTES = 512 * 1024  # a batch of weighted jobs stops once it holds this much
# What a stored line weighs besides its bytes, so that a batch holds at most
# about 250 rows: weighed by bytes alone, a flood of tiny lines made
# transactions of thousands of rows (over a second of staging on a loaded
# machine) that every other peer's line waited behind.  A run of msgs is
# staged with a few statements for the run (awp/store/inbound.py), about
# 15-25 us a row, so 250 rows take less than the 64 of 66 us each that the
# bound was set for; a backlog replayed alone pays one commit per ~200
# lines of 1 KiB (it paid one per 64, a quarter of its CPU).
LINE_WEIGHT = 2048


def lines_weight(nbytes: int, lines: int) -> int:
    """The weight of a job storing ``lines`` lines of ``nbytes`` bytes in all."""
    return nbytes + LINE_WEIGHT * lines

_QUIET_S = 0.002  # no commit for this long: a new job is probably alone
_FAST_COMMIT_S = 0.0015  # inline only while commits take less than this


class CommitPolicy(Protocol):
    """What the writer asks around each commit (implemented by ``IdFloor``)."""

    def before_commit(self, conn: sqlite3.Connection) -> None: ...
    def committed(self) -> None: ...
    def failed(self) -> None: ...
    def early_ok(self) -> bool: ...
    def store_ok(self) -> bool: ...


class Pending:
    """The outcome of one job, awaited on the trio side."""

    __slots__ = ("job", "event", "value", "error", "on_commit", "early", "committed_ns",
                 "weight")

    def __init__(self, job: Job, on_commit: Hook | None = None,
                 early: Hook | None = None) -> None:
        self.job = job
        self.on_commit = on_commit
        self.early = early
        self.event = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.committed_ns = 0  # when its commit finished (CLOCK_MONOTONIC)
        self.weight = 0  # bytes it stores, for sizing batches

    async def wait(self) -> Any:
        await self.event.wait()
        return self.result()

    def result(self) -> Any:
        """The committed value (or the error) of a job that is done."""
        if self.error is not None:
            raise self.error
        return self.value


class Writer:
    """The single writer thread.  Start it from inside ``trio.run``."""

    def __init__(self, conn: sqlite3.Connection, *, policy: CommitPolicy | None = None,
                 checkpointer: Checkpointer | None = None) -> None:
        self._conn = conn
        self._checkpointer = checkpointer  # WAL checkpoints off the commit path
        # ``synchronous = NORMAL`` was left by a relaxed run: the next durable
        # transaction sets FULL again before it begins (two statements a
        # relaxed run cost a relay as much as its BEGIN and COMMIT together).
        self._sync_normal = False
        self._q: deque[Pending] = deque()
        self._urgent: deque[Pending] = deque()
        self._stopping = False
        self._ready = threading.Condition(threading.Lock())
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._policy = policy
        # Held while a batch runs, by the thread or by an inline run.
        self._lock = threading.Lock()
        self._outstanding = 0  # queued jobs not yet resolved (trio thread only)
        self._last_commit = 0.0
        self._commit_s = 0.0  # moving average of the COMMIT itself
        self.commits = 0
        self.early_batches = 0
        self.inline_batches = 0
        self.relaxed_batches = 0
        self.urgent_joins = 0  # batches an urgent job joined while they were staged
        self.owed = OwedSync(conn, self._lock)  # the fsync relaxed commits owe

    def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        if self._checkpointer is not None:
            self._checkpointer.start(self._conn)
        self._thread = threading.Thread(target=self._run, name="awp-writer", daemon=True)
        self._thread.start()

    def submit_nowait(self, job: Job, on_commit: Hook | None = None, *,
                      early: Hook | None = None, weight: int = 0,
                      urgent: bool = False) -> Pending:
        """Queue a job; await ``.wait()`` on the result for the committed value.

        ``on_commit`` runs on the trio thread right after the commit, in commit
        order across all jobs (task wake-up order is not guaranteed to be).
        ``early`` runs in the same order, either before the commit once the
        job's statements succeeded (see the module docstring) or just before
        ``on_commit``.
        """
        p = Pending(job, on_commit, early)
        p.weight = weight
        self._outstanding += 1
        with self._ready:
            (self._urgent if urgent else self._q).append(p)
            self._ready.notify()
        return p

    def submit(self, job: Job, on_commit: Hook | None = None, *, weight: int = 0,
               urgent: bool = False) -> Pending:
        """Like :meth:`submit_nowait`, but run it right here if the writer is quiet.

        An inline run blocks the event loop for the commit (well under
        ``_FAST_COMMIT_S``), and saves two thread hand-overs; the returned
        ``Pending`` is then already resolved.
        """
        if self._enter_inline():
            return self.run_now(job, on_commit)
        return self.submit_nowait(job, on_commit, weight=weight, urgent=urgent)

    def run_now(self, job: Job, on_commit: Hook | None = None, *,
                relaxed: bool = False) -> Pending:
        """Run a job on this thread with the store taken by :meth:`hold`, commit
        it, and give the store back; the returned ``Pending`` is resolved.

        ``relaxed`` (what is durable elsewhere already: a journaled line):
        no fsync on the event loop; it is owed (:mod:`awp.store.owed`) and
        paid from a worker thread at once.
        """
        p = Pending(job, on_commit)
        self._inline(p, relaxed=relaxed, prompt=True)
        return p

    async def run(self, job: Job) -> Any:
        return await self.submit_nowait(job).wait()

    async def run_relaxed(self, job: Job) -> Any:
        """Run a job whose commit need not be durable at once (see the module docstring).

        Inline and without the fsync when the writer has nothing queued or
        unresolved (so it keeps its place in commit order); otherwise queued
        like any job, and committed durably with its batch.  Keep the job
        small: it runs on the event loop.
        """
        if self._thread is None or self._outstanding or not self._lock.acquire(blocking=False):
            return await self.run(job)
        p = Pending(job)
        self._inline(p, relaxed=True, prompt=None)
        self.relaxed_batches += 1
        return p.result()

    async def run_with_hook(self, job: Job, on_commit: Hook, *,
                            early: Hook | None = None) -> Any:
        """Run a job that queues lines: inline when quiet (see :meth:`run_held`)."""
        if not self.hold():
            return await self.submit_nowait(job, on_commit, early=early).wait()
        return await self.run_held(job, on_commit, early=early)

    def hold(self, *, relaxed: bool = False) -> bool:
        """Take the store for an inline run, if the writer is quiet.

        While held, nothing else can queue a line, so a caller may draw an id
        and act on it before its job runs.  Follow with :meth:`run_held` or
        :meth:`run_now`, which release it.  ``relaxed``: the commit will owe
        its fsync (a line that leaves first), so only an empty queue and a
        free store matter; should it not be relaxed after all, the caller
        asks :meth:`quiet` before committing inline.
        """
        return self._enter_inline(relaxed=relaxed)

    def release(self) -> None:
        """Give back a store taken with :meth:`hold` without running a job."""
        self._lock.release()

    async def run_held(self, job: Job, on_commit: Hook | None = None, *,
                       early: Hook | None = None, relaxed: bool = False) -> Any:
        """Run a job and its commit on this thread while holding the store.

        The early hooks run before the commit; the store is released only
        after every hook ran, which keeps hooks in commit order.  The commit
        blocks the event loop for one fsync: the store is only held when
        commits are fast (see :meth:`hold`), and handing the commit to a
        worker thread cost about as much CPU as it saved, on the CPU a
        receiving daemon on the same host may be waiting for.  ``relaxed``
        (a line that already left): no fsync now, it is owed (see
        :mod:`awp.store.owed`).  It awaits nothing: a caller
        holding the store relies on finishing with no checkpoint.
        """
        p = Pending(job, on_commit, early)
        self._inline(p, relaxed=relaxed, prompt=False)
        return p.result()

    def _inline(self, p: Pending, *, relaxed: bool, prompt: bool | None) -> None:
        """Stage and commit one job on this thread, the store held, then give it back.

        The job's early hooks (if any, and if the policy allows) run between
        its statements and its commit.  ``relaxed``: committed without the
        fsync, which is then owed (:mod:`awp.store.owed`) and paid at once
        (``prompt``) or within ``SYNC_WITHIN_S``; with ``prompt`` None it is
        owed to no one (a relayed record: its neighbours hold it).
        """
        try:
            if relaxed:
                self._relax()
            staged = self._stage([p], relaxed=relaxed)
            sent = 0
            if staged and p.early is not None and self._early_allowed([p]):
                sent = _call(p.early, p.value)
                p.early = None
                self.early_batches += 1
            ok = staged and self._commit([p], sent, relaxed=relaxed)
            if ok and relaxed and prompt is not None:
                self.owed.owe(prompt=prompt)
            self._finish(p, staged, ok)
        finally:
            self._lock.release()

    def _relax(self) -> None:
        if not self._sync_normal:  # kept while relaxed runs follow one another
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._sync_normal = True

    def sync_owed(self) -> bool:
        """Whether a relaxed commit still waits for its fsync."""
        return self.owed.owed()

    async def synced(self) -> None:
        """Return once every relaxed commit so far is durable."""
        await self.owed.synced()

    async def keep_synced(self) -> None:
        """Pay owed syncs in time (see :mod:`awp.store.owed`); run it in a nursery."""
        await self.owed.keep()

    def healthy(self) -> bool:
        """No commit is failing and the disk has room (per the policy, if any)."""
        return self._policy is None or self._policy.store_ok()

    def may_send_early(self) -> bool:
        """Whether a line whose id was just drawn may leave before its commit."""
        return self._policy is not None and self._policy.early_ok()

    async def stop(self) -> None:
        """Finish queued jobs, then end the thread."""
        if self._thread is None:
            return
        with self._ready:
            self._stopping = True
            self._ready.notify()
        await trio.to_thread.run_sync(self._thread.join)
        self._thread = None
        if self._checkpointer is not None:
            await trio.to_thread.run_sync(self._checkpointer.stop)
        await self.owed.synced()
        self.owed.close()

    # -- shared steps -------------------------------------------------------------

    def _enter_inline(self, *, relaxed: bool = False) -> bool:
        """On the trio thread: take the connection if nothing else needs it
        (and, unless the commit will be ``relaxed``, if it is quiet and fast)."""
        if (self._thread is None or self._outstanding
                or not relaxed and not self.quiet()
                or not self._lock.acquire(blocking=False)):
            return False
        self.inline_batches += 1
        return True

    def quiet(self) -> bool:
        """No commit for ``_QUIET_S`` and commits fast: an inline durable commit
        is probably alone and blocks the event loop only briefly."""
        return (time.monotonic() - self._last_commit >= _QUIET_S
                and self._commit_s <= _FAST_COMMIT_S)

    def _stage(self, batch: list[Pending], *, let_urgent_in: bool = False,
               relaxed: bool = False) -> bool:
        """BEGIN and run every job in its savepoint; False if nothing is left to commit.

        A job alone in its batch needs no savepoint: if it fails, the
        transaction is rolled back and there is nothing to commit.  With
        ``let_urgent_in``, urgent jobs queued meanwhile take the place of
        the jobs not yet run, which go back to the head of the queue (see
        :meth:`_let_urgent_in`).
        """
        conn = self._conn
        try:
            if self._sync_normal and not relaxed:  # a durable commit is fsynced again
                conn.execute("PRAGMA synchronous = FULL")
                self._sync_normal = False
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            self._fail_all(batch, e)
            return False
        i = 0
        if len(batch) == 1:  # alone: its failure undoes the whole transaction
            p = batch[0]
            try:
                p.value = p.job(conn)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                p.error = e
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if threading.current_thread() is self._thread:
                    self._resolve(batch)
                return False
            i = 1
        while True:
            if let_urgent_in and self._urgent:  # a racy peek; taken under the lock
                self._let_urgent_in(batch, i)
                let_urgent_in = False
            if i >= len(batch):
                return True
            p = batch[i]
            i += 1
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

    def _let_urgent_in(self, batch: list[Pending], staged: int) -> None:
        """Urgent jobs queued while a batch of others is being staged join it.

        The jobs not yet staged go back to the head of the queue (their order
        kept) and the urgent ones are staged in their place, so a quiet
        peer's line waits for one job of a flooder's and shares its commit,
        instead of waiting for the rest of the batch and a commit of its own.
        Hooks still run in commit order: the whole batch resolves at once,
        in list order.
        """
        with self._ready:
            self._q.extendleft(reversed(batch[staged:]))
            del batch[staged:]
            batch.extend(self._urgent)
            self._urgent.clear()
        self.urgent_joins += 1

    def _commit(self, batch: list[Pending], sent_early: int, *, relaxed: bool = False) -> bool:
        """The policy's bookkeeping, then COMMIT; on failure every job fails.

        A ``relaxed`` commit (no fsync) leaves the policy alone: what it
        reserves must be durable, so it waits for the next durable commit,
        as it does while the daemon commits nothing; and it is not counted
        in the commit time that decides inline runs.
        """
        conn, policy = self._conn, None if relaxed else self._policy
        try:
            if policy is not None:
                policy.before_commit(conn)
            started = time.monotonic()
            conn.execute("COMMIT")
            done_ns = time.perf_counter_ns()
            self._last_commit = time.monotonic()
            if not relaxed:
                self._commit_s = 0.8 * self._commit_s + 0.2 * (self._last_commit - started)
                self.owed.paid()  # its fsync covers every earlier frame
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
            return False
        for p in batch:
            p.committed_ns = done_ns
        if policy is not None:
            policy.committed()
        if self._checkpointer is not None:
            self._checkpointer.wrote(sum(p.weight for p in batch))
        return True

    def _early_allowed(self, batch: list[Pending]) -> bool:
        live = [p for p in batch if p.error is None]
        return (any(p.early for p in live)
                and not any(p.on_commit is not None and p.early is None for p in live)
                and self._policy is not None and self._policy.early_ok())

    @staticmethod
    def _finish(p: Pending, staged: bool, ok: bool) -> None:
        """On the trio thread, after an inline commit: hooks, then wake the caller."""
        if staged and ok and p.error is None:
            _call(p.early, p.value)
            _call(p.on_commit, p.value)
        p.event.set()

    # -- writer thread ------------------------------------------------------------

    def _run(self) -> None:
        assert self._token is not None
        while True:
            batch, urgent = self._next_batch()
            if not batch:
                break
            with self._lock:
                if self._stage(batch, let_urgent_in=not urgent):
                    sent = self._run_early_hooks(batch)
                    if self._commit(batch, sent):
                        self._resolve(batch)

    def _next_batch(self) -> tuple[list[Pending], bool]:
        """Wait for jobs: the urgent ones if any, else the others in order,
        up to ``_MAX_BATCH`` jobs and about ``_BATCH_BYTES`` of weight; and
        whether they are the urgent ones.  Empty once stopping with nothing
        left."""
        with self._ready:
            while not self._q and not self._urgent:
                if self._stopping:
                    return [], False
                self._ready.wait()
            urgent = bool(self._urgent)
            src = self._urgent if urgent else self._q
            batch = [src.popleft()]
            weight = batch[0].weight
            while src and len(batch) < _MAX_BATCH and weight < _BATCH_BYTES:
                p = src.popleft()
                weight += p.weight
                batch.append(p)
            return batch, urgent

    def _run_early_hooks(self, batch: list[Pending]) -> int:
        """Hand the batch's early hooks to the trio thread now, if allowed."""
        if not self._early_allowed(batch):
            return 0
        hooks = [(p.early, p.value) for p in batch if p.error is None and p.early is not None]
        for p in batch:
            p.early = None  # ran already; not again after the commit

        def run_hooks() -> None:
            for hook, value in hooks:
                _call(hook, value)

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
        if threading.current_thread() is self._thread:
            self._resolve(batch)

    def _resolve(self, batch: list[Pending]) -> None:
        """From the writer thread: run the hooks and wake the callers on trio."""
        def wake() -> None:
            self._outstanding -= len(batch)
            for p in batch:
                if p.error is None:
                    _call(p.early, p.value)
                    _call(p.on_commit, p.value)
                p.event.set()

        try:
            assert self._token is not None
            self._token.run_sync_soon(wake)
        except trio.RunFinishedError:
            pass


def _call(hook: Hook | None, value: Any) -> int:
    if hook is None:
        return 0
    try:
        hook(value)
    except Exception:
        log.exception("store hook failed")
    return 1
