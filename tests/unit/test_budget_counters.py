"""The budget bookkeeping on its own: token buckets, in flight, stored, connections."""

from __future__ import annotations

import sqlite3

import pytest

from awp.base.limits import Limits
from awp.node.budgets import Budgets, TokenBucket
from awp.store import usage
from awp.store.db import migrate


def test_bucket_allows_a_burst_then_the_rate():
    b = TokenBucket(rate=100, burst=50, now=0.0)
    assert b.spend(50, 0.0) == 0.0
    assert b.spend(10, 0.0) == pytest.approx(0.1)  # 10 lines of debt at 100/s
    assert b.spend(0, 0.1) == 0.0  # paid off
    b.spend(0, 100.0)
    assert b.level == 50  # never more than the burst


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_rate_is_per_key_and_survives_reconnects():
    clock = Clock()
    bud = Budgets(Limits(peer_lines_per_second=10, peer_burst_lines=10,
                         peer_bytes_per_second=10**9, peer_burst_bytes=10**9), clock)
    assert bud.spend("k1", 10, 100) == 0.0
    # a new connection of the same key finds the same, empty bucket
    assert bud.spend("k1", 5, 100) == pytest.approx(0.5)
    assert bud.spend("k2", 5, 100) == 0.0
    clock.t = 10.0
    assert bud.spend("k1", 5, 100) == 0.0


def test_bytes_rate_counts_too():
    bud = Budgets(Limits(peer_bytes_per_second=1000, peer_burst_bytes=1000), Clock())
    assert bud.spend("k", 1, 3000) == pytest.approx(2.0)


def test_in_flight_waits_but_an_idle_connection_always_reads():
    bud = Budgets(Limits(peer_inflight_bytes=100, inflight_bytes=150))
    assert bud.may_read(99)
    assert not bud.may_read(100)
    bud.take(150)
    assert not bud.may_read(10)  # the global budget is full
    assert bud.may_read(0)  # but a quiet peer is never held up by the others
    bud.give(150)
    assert bud.may_read(10)


def test_stored_budgets_per_key_and_in_all():
    bud = Budgets(Limits(peer_stored_bytes=100, stored_bytes=150))
    bud.load_stored({"a": (60, 20), "b": (40, 0)})
    assert bud.stored_total == 120
    assert bud.over_stored("a", 20) == ""
    assert "peer_stored_bytes" in bud.over_stored("a", 21)
    assert "stored_bytes" in bud.over_stored("b", 31)
    bud.add_stored("a", blob=-20)
    assert bud.stored_of("a") == 60 and bud.stored_total == 100


class FakeConn:
    def __init__(self, key: str = "") -> None:
        self.peer_key = key
        self.counted_key = False
        self.closed_with = ""

    def close(self, reason: str = "") -> None:
        self.closed_with = reason


def test_the_oldest_handshake_gives_way():
    bud = Budgets(Limits(handshakes=2, connections=10))
    a, b, c = FakeConn(), FakeConn(), FakeConn()
    assert bud.open_inbound(a) and bud.open_inbound(b)
    assert bud.open_inbound(c)
    assert "dropped the oldest" in a.closed_with and not b.closed_with
    bud.closed(a)
    assert list(bud.handshaking) == [b, c]


def test_full_of_established_connections_turns_new_ones_away():
    bud = Budgets(Limits(handshakes=5, connections=2))
    a, b = FakeConn("k"), FakeConn("k")
    assert bud.open_inbound(a) and bud.open_inbound(b)
    bud.handshake_done(a)
    bud.handshake_done(b)
    assert not bud.open_inbound(FakeConn())
    assert bud.refused["connections"] == 1
    bud.closed(a)
    assert bud.open_inbound(FakeConn())


def test_connections_per_key():
    bud = Budgets(Limits(peer_connections=1))
    a, b = FakeConn("k"), FakeConn("k")
    assert bud.admit_key(a) == ""
    assert "too many connections" in bud.admit_key(b)
    bud.closed(a)
    assert bud.admit_key(b) == ""


def test_usage_is_filled_from_an_existing_store_and_kept():
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.row_factory = sqlite3.Row
    from awp.store.schema import MIGRATIONS
    for script in MIGRATIONS[:3]:
        c.executescript(script)
    c.execute(f"PRAGMA user_version = {3}")
    c.execute("INSERT INTO log (peer, dir, t, id, ts, at, line) VALUES"
              " ('p', 'in', 'msg', 'i1', 0, 0, 'héllo'), ('p', 'out', 'msg', 'i2', 0, 0, 'xx')")
    c.execute("INSERT INTO blobs (peer, dir, ref, status, received, created, updated)"
              " VALUES ('p', 'in', 'r', 'pending', 1000, 0, 0)")
    migrate(c)
    assert usage.load(c) == {"p": (6, 1000 + usage.BLOB_ROW)}
    usage.add(c, "p", log=4)
    usage.add(c, "q", blob=7)
    assert usage.load(c) == {"p": (10, 1000 + usage.BLOB_ROW), "q": (0, 7)}


def test_status_and_peers_show_use_against_the_budgets():
    from awp.present.render import budget_line, peer_budget_cell

    bud = Budgets(Limits(stored_bytes=8 << 30))
    bud.load_stored({"a": (3 << 20, 0)})
    bud.refused["quota"] = 2
    line = budget_line(bud.status())
    assert "stored 3.0 MiB of 8.0 GiB" in line and "refused: quota 2" in line
    assert peer_budget_cell({"stored_bytes": 1536, "refused": 3}) == "1.5 KiB (3 refused)"
    assert peer_budget_cell({"stored_bytes": 10, "throttled": 4}) == "10 B (slowed 4x)"
    assert peer_budget_cell(None) == "-"


def test_an_urgent_job_overtakes_a_queue_of_heavy_ones(tmp_path):
    """A quiet peer's line does not wait for everything a flooder has queued."""
    import threading

    import trio

    from awp.store.db import open_store
    from awp.store.writer import Writer

    conn = open_store(str(tmp_path / "awp.db"))
    conn.execute("CREATE TABLE t (n TEXT)")
    gate = threading.Event()
    order: list[str] = []

    def job(name: str, wait: bool = False):
        def run(c: sqlite3.Connection) -> str:
            if wait:
                gate.wait(10)
            c.execute("INSERT INTO t (n) VALUES (?)", (name,))
            return name
        return run

    async def main() -> None:
        w = Writer(conn)
        w.start()
        first = w.submit_nowait(job("h0", wait=True), order.append, weight=1 << 20)
        await trio.sleep(0.1)  # h0 is running and holds the writer
        heavy = [w.submit_nowait(job(f"h{i}"), order.append, weight=1 << 20)
                 for i in range(1, 4)]
        quiet = w.submit_nowait(job("u"), order.append, weight=100, urgent=True)
        gate.set()
        for p in (first, *heavy, quiet):
            await p.wait()
        await w.stop()

    trio.run(main)
    assert order == ["h0", "u", "h1", "h2", "h3"]


def test_large_lines_take_turns_first_come_first_served():
    """One turn at a time, in arrival order; a line below the size needs none."""
    import trio
    import trio.testing

    bud = Budgets(Limits(large_lines=1, large_line_bytes=1000))
    assert not bud.large([b"x" * 999, b"y"]) and bud.large([b"y", b"x" * 1000])
    order: list[str] = []

    async def line(name: str, hold: float) -> None:
        assert await bud.large_turn()
        order.append(f"{name} in")
        await trio.sleep(hold)
        order.append(f"{name} out")
        bud.large_done()

    async def main() -> None:
        async with trio.open_nursery() as n:
            for i, name in enumerate("abc"):
                n.start_soon(line, name, 0.5)
                await trio.sleep(0.01 * (i + 1))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert bud.large_waits == 2 and bud.large_overruns == 0


def test_a_turn_that_stands_still_is_gone_round_but_a_moving_queue_is_waited():
    """A holder that never finishes (a peer that stopped reading) costs the
    others LARGE_TURN_WAIT, not its write_timeout; a queue that keeps moving is
    waited out even when that takes longer than LARGE_TURN_WAIT."""
    import trio
    import trio.testing

    from awp.node.budgets import LARGE_TURN_WAIT

    bud = Budgets(Limits(large_lines=1))
    waited: dict[str, float] = {}

    async def stuck() -> None:
        assert await bud.large_turn()
        await trio.sleep(100)

    async def other(name: str) -> None:
        t0 = trio.current_time()
        got = await bud.large_turn()
        waited[name] = trio.current_time() - t0
        assert not got

    async def stalled() -> None:
        async with trio.open_nursery() as n:
            n.start_soon(stuck)
            await trio.sleep(0.1)
            n.start_soon(other, "x")
            await trio.sleep(1)
            n.start_soon(other, "y")
            await trio.sleep(5)
            n.cancel_scope.cancel()

    trio.run(stalled, clock=trio.testing.MockClock(autojump_threshold=0))
    assert waited["x"] == pytest.approx(LARGE_TURN_WAIT - 0.1)
    assert waited["y"] == pytest.approx(LARGE_TURN_WAIT - 1.1)
    assert bud.large_overruns == 2

    bud = Budgets(Limits(large_lines=1))
    got: list[str] = []

    async def turn(name: str) -> None:
        assert await bud.large_turn()
        got.append(name)
        await trio.sleep(LARGE_TURN_WAIT * 0.75)
        bud.large_done()

    async def moving() -> None:
        async with trio.open_nursery() as n:
            for name in "abcd":
                n.start_soon(turn, name)
                await trio.sleep(0.01)

    trio.run(moving, clock=trio.testing.MockClock(autojump_threshold=0))
    assert got == list("abcd") and bud.large_overruns == 0  # d waited 2.25 turns' worth


def test_a_line_that_gives_up_waiting_leaves_no_turn_behind():
    """A connection closed while its line waits takes its place out of the
    queue; one closed once it was handed the turn still ends that turn."""
    import trio
    import trio.testing

    bud = Budgets(Limits(large_lines=1))
    got: list[str] = []

    async def main() -> None:
        assert await bud.large_turn()  # held here
        async with trio.open_nursery() as n:
            scopes: dict[str, trio.CancelScope] = {}

            async def wait(name: str) -> None:
                with trio.CancelScope() as scopes[name]:
                    assert await bud.large_turn()
                    got.append(name)
                    bud.large_done()

            for name in "bcd":
                n.start_soon(wait, name)
                await trio.sleep(0.01)
            scopes["b"].cancel()  # gone while waiting
            await trio.sleep(0.01)
            bud.large_done()  # hands the turn to c, not to b's empty place ...
            scopes["c"].cancel()  # ... which has it already: c, then d
        assert got == ["c", "d"] and bud.large_overruns == 0
        assert await bud.large_turn()  # and the turn is free again

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
