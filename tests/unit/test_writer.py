"""The group-commit writer: inline runs, early hooks, commit order."""

from __future__ import annotations

import os
import sqlite3
import threading

import trio

from awp.store import owed as owed_mod
from awp.store import writer as writer_mod
from awp.store.db import open_store
from awp.store.writer import Writer


class Policy:
    """Allows early hooks; records what the writer asked."""

    def __init__(self, early: bool = True) -> None:
        self.early = early
        self.events: list[str] = []

    def before_commit(self, conn: sqlite3.Connection) -> None:
        self.events.append("before")

    def committed(self) -> None:
        self.events.append("committed")

    def failed(self) -> None:
        self.events.append("failed")

    def early_ok(self) -> bool:
        return self.early


def _store(tmp_path) -> sqlite3.Connection:
    conn = open_store(str(tmp_path / "awp.db"))
    conn.execute("CREATE TABLE t (n INTEGER)")
    return conn


def _insert(n: int):
    def job(c: sqlite3.Connection) -> int:
        c.execute("INSERT INTO t (n) VALUES (?)", (n,))
        return n
    return job


def test_quiet_writer_runs_inline_and_hooks_see_the_commit(tmp_path, monkeypatch):
    conn = _store(tmp_path)
    seen: list = []

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        monkeypatch.setattr(writer_mod, "_QUIET_S", 0.0)
        p = w.submit(_insert(1), lambda v: seen.append(("hook", v)))
        assert p.event.is_set()  # resolved before submit returned: ran inline
        assert await p.wait() == 1
        assert w.inline_batches == 1
        await w.stop()

    trio.run(main)
    assert seen == [("hook", 1)]
    assert conn.execute("SELECT n FROM t").fetchall()[0][0] == 1


def test_early_hook_runs_before_the_commit_and_hooks_keep_job_order(tmp_path, monkeypatch):
    conn = _store(tmp_path)
    order: list = []
    monkeypatch.setattr(writer_mod, "_QUIET_S", 3600.0)  # never inline: threaded batches

    async def main() -> None:
        policy = Policy()
        w = Writer(conn, policy=policy)
        w.start()

        def early(v: int) -> None:
            order.append(("early", v, "committed" in policy.events[-1:]))

        pending = [w.submit_nowait(_insert(i), lambda v: order.append(("commit", v)),
                                   early=early) for i in range(50)]
        for p in pending:
            await p.wait()
        await w.stop()

    trio.run(main)
    early_seen = [o[1] for o in order if o[0] == "early"]
    commit_seen = [o[1] for o in order if o[0] == "commit"]
    assert early_seen == list(range(50)) and commit_seen == list(range(50))
    # Each job's early hook ran before that job's commit hook.
    assert all(order.index(("commit", i)) > [k for k, o in enumerate(order)
                                             if o[:2] == ("early", i)][0] for i in range(50))


def test_a_batch_with_a_commit_only_hook_runs_no_hook_early(tmp_path):
    conn = _store(tmp_path)
    ran: list = []

    async def main() -> Writer:
        w = Writer(conn, policy=Policy())
        # Queued before the thread starts, so both land in one batch.
        a = w.submit_nowait(_insert(1), lambda v: ran.append("c1"),
                            early=lambda v: ran.append("e1"))
        b = w.submit_nowait(_insert(2), lambda v: ran.append("c2"))
        w.start()
        await a.wait()
        await b.wait()
        await w.stop()
        return w

    w = trio.run(main)
    assert (w.commits, w.early_batches) == (1, 0)
    assert ran == ["e1", "c1", "c2"]


def test_failed_commit_fails_the_job_and_tells_the_policy(tmp_path, monkeypatch):
    conn = _store(tmp_path)
    policy = Policy()
    monkeypatch.setattr(writer_mod, "_QUIET_S", 0.0)

    def boom(c: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    hooked: list = []

    async def main() -> None:
        w = Writer(conn, policy=policy)
        w.start()
        policy.before_commit = boom  # the commit step itself fails
        try:
            await w.run_with_hook(_insert(5), hooked.append, early=hooked.append)
        except sqlite3.OperationalError as e:
            assert "full" in str(e)
        else:
            raise AssertionError("the failure must reach the caller")
        await w.stop()

    trio.run(main)
    assert "failed" in policy.events
    assert hooked == [5]  # the early hook ran (the line left), the commit hook did not
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_a_failing_job_alone_fails_only_itself_threaded_and_inline(tmp_path, monkeypatch):
    conn = _store(tmp_path)

    def bad(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t (n) VALUES (99)")
        raise ValueError("no")

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        for quiet in (3600.0, 0.0):  # first through the thread, then inline
            monkeypatch.setattr(writer_mod, "_QUIET_S", quiet)
            p = w.submit(bad)
            try:
                await p.wait()
            except ValueError:
                pass
            else:
                raise AssertionError("the job's error must reach its caller")
            assert await w.submit(_insert(int(quiet))).wait() == int(quiet)
        await w.stop()

    trio.run(main)
    assert sorted(r[0] for r in conn.execute("SELECT n FROM t")) == [0, 3600]


def _sync_then(n: int):
    """A job that inserts ``n`` and says what ``synchronous`` its transaction commits with."""
    def job(c: sqlite3.Connection) -> int:
        c.execute("INSERT INTO t (n) VALUES (?)", (n,))
        return c.execute("PRAGMA synchronous").fetchone()[0]
    return job


def test_a_relaxed_run_commits_inline_without_the_policy_and_durable_ones_sync_again(tmp_path):
    conn = _store(tmp_path)
    policy = Policy()

    async def main() -> None:
        w = Writer(conn, policy=policy)
        w.start()
        said: list[str] = []
        conn.set_trace_callback(lambda sql: said.append(sql) if "synchronous =" in sql else None)
        assert await w.run_relaxed(_sync_then(7)) == 1  # NORMAL: no fsync
        assert w.relaxed_batches == 1 and policy.events == []  # the reservation waits
        assert await w.run_relaxed(_sync_then(6)) == 1  # still NORMAL, not set again
        assert said == ["PRAGMA synchronous = NORMAL"]
        assert await w.run(_sync_then(5)) == 2  # a durable transaction: FULL again
        conn.execute("DELETE FROM t WHERE n != 7")
        other = sqlite3.connect(str(tmp_path / "awp.db"))
        assert other.execute("SELECT n FROM t").fetchall() == [(7,)]  # committed
        other.close()

        def boom(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO t (n) VALUES (8)")
            raise ValueError("no")

        try:
            await w.run_relaxed(boom)
            raise AssertionError("the job's error must reach the caller")
        except ValueError:
            pass
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1  # rolled back
        assert await w.run(_sync_then(9)) == 2
        await w.stop()

    trio.run(main)


def test_a_relaxed_run_queues_durably_behind_outstanding_jobs(tmp_path):
    conn = _store(tmp_path)
    policy = Policy()

    async def main() -> None:
        w = Writer(conn, policy=policy)
        w.start()
        first = w.submit_nowait(_insert(1))
        assert await w.run_relaxed(_insert(2)) == 2  # behind `first`, in commit order
        await first.wait()
        assert w.relaxed_batches == 0 and "before" in policy.events
        assert [r[0] for r in conn.execute("SELECT n FROM t ORDER BY rowid")] == [1, 2]
        await w.stop()

    trio.run(main)


def test_a_flood_of_tiny_lines_makes_modest_transactions(tmp_path):
    """Jobs of 64 tiny lines (what a connection makes of a flooder's reads)
    fill a batch with a few hundred rows, not thousands (it was 3,500 of
    them): an honest peer's urgent line waits for one such transaction,
    which a run's statements stage in a few milliseconds."""
    w = Writer(_store(tmp_path))
    for _ in range(100):  # 6,400 lines of 150 bytes queued
        w.submit_nowait(_insert(0), weight=writer_mod.lines_weight(64 * 150, 64))
    batch, _urgent = w._next_batch()
    assert 64 <= len(batch) * 64 <= 256, len(batch)
    big = writer_mod.lines_weight(1_000_000, 1)  # a 1 MB line is a batch of its own
    (tmp_path / "x").mkdir()
    w2 = Writer(_store(tmp_path / "x"))
    for _ in range(3):
        w2.submit_nowait(_insert(0), weight=big)
    assert len(w2._next_batch()[0]) == 1


def test_an_urgent_job_joins_the_batch_being_staged(tmp_path):
    """A quiet peer's line (an urgent job) queued while a batch of a flooder's
    jobs is being staged is staged next and shares that batch's commit; the
    flooder's jobs not yet staged go back to the queue, in order, and commit
    after it.  It waited for the rest of the batch and a commit of its own."""
    conn = _store(tmp_path)
    inside, go = threading.Event(), threading.Event()
    order: list[str] = []

    def slow(c: sqlite3.Connection) -> str:
        inside.set()
        go.wait(10)
        c.execute("INSERT INTO t (n) VALUES (0)")
        return "a"

    async def main() -> None:
        w = Writer(conn)
        w.start()
        a = w.submit_nowait(slow, order.append, weight=10)
        rest = [w.submit_nowait(lambda c, n=n: (_insert(n)(c), f"f{n}")[1], order.append,
                                weight=10) for n in range(1, 4)]
        assert await trio.to_thread.run_sync(inside.wait, 10)
        u = w.submit_nowait(lambda c: (_insert(99)(c), "u")[1], order.append, urgent=True)
        go.set()
        for p in (a, u, *rest):
            await p.wait()
        assert order == ["a", "u", "f1", "f2", "f3"]
        assert u.committed_ns == a.committed_ns  # one commit for both
        assert rest[0].committed_ns > u.committed_ns
        assert w.urgent_joins == 1
        await w.stop()

    trio.run(main)
    assert sorted(n for (n,) in conn.execute("SELECT n FROM t")) == [0, 1, 2, 3, 99]


def _wal_syncs(monkeypatch) -> list[str]:
    """Record which files the writer fdatasyncs itself (the WAL, when a sync is owed)."""
    synced: list[str] = []

    def fake(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(owed_mod, "_fdatasync", fake)
    return synced


def test_an_early_lines_relaxed_commit_owes_a_sync_that_synced_pays(tmp_path, monkeypatch):
    """A line that left before its commit is committed without the fsync
    (synchronous NORMAL, the policy untouched); the sync is owed until
    ``synced`` fdatasyncs the WAL, and paid once only."""
    conn = _store(tmp_path)
    policy = Policy()
    synced = _wal_syncs(monkeypatch)

    async def main() -> None:
        w = Writer(conn, policy=policy)
        w.start()
        assert w.hold()
        assert await w.run_held(_sync_then(1), relaxed=True) == 1  # NORMAL: no fsync
        assert policy.events == [] and w.sync_owed()
        other = sqlite3.connect(str(tmp_path / "awp.db"))
        assert other.execute("SELECT n FROM t").fetchall() == [(1,)]  # committed
        other.close()
        await w.synced()
        assert not w.sync_owed()
        assert [os.path.basename(p) for p in synced] == ["awp.db-wal"]
        await w.synced()  # nothing owed: no second sync
        assert len(synced) == 1
        await w.stop()

    trio.run(main)


def test_a_durable_commit_pays_the_owed_sync(tmp_path, monkeypatch):
    """The next durable commit's fsync covers the relaxed frames before it
    (on a quiet daemon: the commit applying the peer's ack)."""
    conn = _store(tmp_path)
    synced = _wal_syncs(monkeypatch)

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        assert w.hold()
        await w.run_held(_insert(1), relaxed=True)
        assert w.sync_owed()
        assert await w.run(_sync_then(2)) == 2  # FULL again, and it pays the sync
        assert not w.sync_owed()
        await w.stop()

    trio.run(main)
    assert synced == []


async def _until_paid(w: Writer) -> None:
    """Wait (5 s at most) until keep_synced has paid what is owed."""
    with trio.fail_after(5):
        while w.sync_owed():
            await trio.sleep(0.005)


def test_keep_synced_pays_owed_syncs_in_time(tmp_path, monkeypatch):
    """With no durable commit coming (no ack), keep_synced pays an early
    line's owed sync within SYNC_WITHIN_S, and a journaled line's
    (run_now relaxed) at once from a worker thread; a stop pays what is
    still owed."""
    conn = _store(tmp_path)
    synced = _wal_syncs(monkeypatch)

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(w.keep_synced)
            monkeypatch.setattr(owed_mod, "SYNC_WITHIN_S", 0.01)
            for n in range(3):
                assert w.hold()
                await w.run_held(_insert(n), relaxed=True)
                await _until_paid(w)
            monkeypatch.setattr(owed_mod, "SYNC_WITHIN_S", 3600.0)  # at once, or never
            assert w.hold()
            p = w.run_now(_sync_then(4), relaxed=True)
            assert p.result() == 1 and w.sync_owed()  # NORMAL: committed, sync owed
            await _until_paid(w)
            nursery.cancel_scope.cancel()
        assert len(synced) == 4
        assert w.hold()
        await w.run_held(_insert(9), relaxed=True)
        await w.stop()
        assert not w.sync_owed() and len(synced) == 5

    trio.run(main)
    assert {os.path.basename(p) for p in synced} == {"awp.db-wal"}


def test_a_relaxed_hold_needs_only_an_empty_queue(tmp_path, monkeypatch):
    """A line that leaves first commits relaxed, so its hold does not wait for a
    quiet, fast store (a durable inline commit does); queued jobs still come
    first, which keeps commit order."""
    conn = _store(tmp_path)
    monkeypatch.setattr(writer_mod, "_FAST_COMMIT_S", -1.0)  # commits never fast enough

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        assert not w.quiet() and not w.hold()
        assert w.hold(relaxed=True)
        await w.run_held(_insert(1), relaxed=True)
        queued = w.submit_nowait(_insert(2))
        assert not w.hold(relaxed=True)  # a job is queued: it commits first
        await queued.wait()
        await w.stop()

    trio.run(main)
    assert [r[0] for r in conn.execute("SELECT n FROM t ORDER BY rowid")] == [1, 2]


def test_a_relaxed_run_owes_no_sync_and_a_relaxed_run_now_does(tmp_path):
    """run_relaxed commits what its neighbours already hold (a relayed board
    record): no fsync is owed for it.  run_now with ``relaxed`` (a journaled
    line) owes one, paid at once."""
    conn = _store(tmp_path)

    async def main() -> None:
        w = Writer(conn, policy=Policy())
        w.start()
        assert await w.run_relaxed(_insert(1)) == 1
        assert w.relaxed_batches == 1 and not w.sync_owed()
        assert w.hold(relaxed=True)
        assert w.run_now(_insert(2), relaxed=True).result() == 2
        assert w.sync_owed()
        await w.synced()
        assert not w.sync_owed()
        await w.stop()

    trio.run(main)
