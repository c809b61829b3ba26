"""Acks count only from the peer a line was sent to: the store and the waiters."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awp.node.config import NodeConfig
from awp.node.engine import Engine
from awp.store import ops
from awp.store.db import open_store
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity

A = "ed25519:" + "A" * 43
B = "ed25519:" + "B" * 43


@pytest.fixture
def store(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    yield c
    c.close()


def _queue(c, gen: IdGenerator, peer: str, text: str = "hi") -> tuple[int, dict, str]:
    ops.ensure_peer(c, peer, 1)
    return ops.queue_line(c, gen, peer, lambda i, ts: {
        "t": "msg", "id": i, "ts": ts, "th": "thr_acktest1",
        "parts": [{"k": "text", "text": text}]}, now=1)


def _acked(c, ident: str) -> bool:
    """What the log shows for our line ``ident`` (``ops.out_acked``)."""
    peer, t, acked = c.execute("SELECT peer, t, acked FROM log WHERE dir = 'out' AND id = ?",
                               (ident,)).fetchone()
    return ops.out_acked(c, peer, ident, t, acked)


def test_an_ack_from_another_peer_leaves_the_line_queued_and_unacked(store):
    gen = IdGenerator()
    _seq, line, _text = _queue(store, gen, A)
    assert ops.apply_ack(store, B, "thr_acktest1", line["id"]) is False
    assert store.execute("SELECT count(*) FROM outbox WHERE peer = ?", (A,)).fetchone()[0] == 1
    assert not _acked(store, line["id"])
    # The right peer's ack is news once, and drops the line.
    assert ops.apply_ack(store, A, "thr_acktest1", line["id"]) is True
    assert ops.apply_ack(store, A, "thr_acktest1", line["id"]) is False
    assert store.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0
    assert _acked(store, line["id"])


def test_an_ack_writes_nothing_to_the_log_row_but_a_dropped_line_stays_unacked(store):
    """The log row of an acked msg is not written again; a line the retention
    dropped unacked shows unacked, and an ack that comes for it after all is news."""
    gen = IdGenerator()
    lines = [_queue(store, gen, A, f"m{n}")[1]["id"] for n in range(3)]
    before = store.execute("SELECT total_changes()").fetchone()[0]
    assert ops.apply_acks(store, A, [("thr_acktest1", lines[0])]) == [lines[0]]
    assert store.execute("SELECT total_changes()").fetchone()[0] == before + 1  # the outbox row
    assert [_acked(store, i) for i in lines] == [True, False, False]
    assert ops.sweep_outbox(store, 2) == 2  # queued at 1 ms: older than the cutoff
    assert [_acked(store, i) for i in lines] == [True, False, False]
    assert ops.apply_acks(store, A, [("thr_acktest1", lines[2]), ("thr_acktest1", lines[0])]) \
        == [lines[2]]
    assert [_acked(store, i) for i in lines] == [True, False, True]


def test_an_introduction_the_peer_read_is_not_shown_acked(store):
    """Introductions are never acked: dropped once a later line is acked, they stay
    unacked in the log, as before acks stopped writing it."""
    gen = IdGenerator()
    ops.ensure_peer(store, A, 1)
    intro = ops.queue_line(store, gen, A, lambda i, ts: {
        "t": "introduce", "id": i, "ts": ts, "th": "thr_intro1", "peer": {"key": B}}, now=1)[1]
    msg = _queue(store, gen, A)[1]
    assert ops.apply_acks(store, A, [("thr_acktest1", msg["id"])]) == [msg["id"]]
    assert store.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0
    assert not _acked(store, intro["id"]) and _acked(store, msg["id"])


def test_a_waiter_wakes_only_for_the_peer_the_line_went_to(tmp_path):
    eng = Engine(Identity.generate(), str(tmp_path / "awp.db"), NodeConfig(name="t"))
    ident = "01M8N8" + "0" * 20

    async def main() -> None:
        eng.hand_over(A, (1, {"id": ident, "t": "msg"}, "{}", [], []), committed=False)
        waiter = trio.Event()

        async def wait() -> None:
            assert await eng.wait_ack(ident, 5) is True
            waiter.set()

        async with trio.open_nursery() as n:
            n.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            eng.ack_received(B, ident)
            await trio.testing.wait_all_tasks_blocked()
            assert not waiter.is_set()
            # A recent ack from the wrong peer does not answer a later ask either.
            assert await eng.wait_ack(ident, 0, peer=A) is False
            eng.ack_received(A, ident)
        assert waiter.is_set()
        assert await eng.wait_ack(ident, 0, peer=A) is True

    trio.run(main)



def test_a_run_of_acks_is_news_once_and_drops_earlier_introductions(store):
    """apply_acks (one call per run of acks) answers as apply_ack one at a time would,
    and an introduction queued before the last acked line stops being replayed."""
    gen = IdGenerator()
    ops.ensure_peer(store, A, 1)
    ops.queue_line(store, gen, A, lambda i, ts: {
        "t": "introduce", "id": i, "ts": ts, "th": "thr_intro1", "peer": {"key": B}}, now=1)
    lines = [_queue(store, gen, A, f"m{n}")[1] for n in range(3)]
    later = ops.queue_line(store, gen, A, lambda i, ts: {
        "t": "introduce", "id": i, "ts": ts, "th": "thr_intro2", "peer": {"key": B}}, now=1)
    acks = [("thr_acktest1", x["id"]) for x in lines]
    assert ops.apply_acks(store, A, acks + [("thr_acktest1", "nope")]) == [x["id"] for x in lines]
    assert ops.apply_acks(store, A, acks) == []  # no news twice
    assert ops.apply_acks(store, B, acks) == []  # nor from another peer
    left = [r[0] for r in store.execute("SELECT id FROM outbox WHERE peer = ?", (A,))]
    assert left == [later[1]["id"]]  # the one queued after the acked lines stays


def test_lines_to_send_again_come_in_outbox_order_from_a_real_store(store):
    # The store's rows are sqlite3.Row objects, which cannot be compared:
    # sorting them whole raised TypeError as soon as two lines were due again.
    gen = IdGenerator()
    lines = [_queue(store, gen, A, f"m{i}")[1]["id"] for i in range(3)]
    got = ops.fetch_outbox_ids(store, A, list(reversed(lines)))
    assert [i for i, _text in got] == lines
    assert ops.fetch_outbox_ids(store, B, lines) == []


def test_a_run_of_acks_leaves_the_store_as_acks_one_at_a_time_do(tmp_path):
    """The batched apply_acks against apply_ack per ack, on copies of one store:
    msgs, chunks and introductions in two threads, acks in and out of order,
    repeated, for another peer's line and for nothing."""
    import random
    import sqlite3

    rnd = random.Random(7)
    for trial in range(12):
        one = open_store(str(tmp_path / f"one{trial}.db"))
        one.execute("PRAGMA synchronous = OFF")  # the order of rows is the point here
        gen = IdGenerator()
        ops.ensure_peer(one, A, 1)
        ops.ensure_peer(one, B, 1)
        ids: list[str] = []
        for _n in range(30):
            t = rnd.choice(["msg", "msg", "chunk", "introduce"])
            th = rnd.choice(["thr_one", "thr_two", "thr_one"])
            peer = A if rnd.random() < 0.9 else B
            line = ops.queue_line(one, gen, peer, lambda i, ts, t=t, th=th: {
                "t": t, "id": i, "ts": ts, "th": th}, now=1)[1]
            if t == "msg":
                ids.append(line["id"])
        many = sqlite3.connect(str(tmp_path / f"many{trial}.db"), isolation_level=None)
        one.backup(many)
        acks = [("x", rnd.choice(ids)) for _n in range(rnd.randint(1, 25))] + [("x", "nope")]
        if rnd.random() < 0.5:
            acks.sort(key=lambda a: a[1])
        got = ops.apply_acks(many, A, acks)
        want = []
        for _th, re in acks:
            if ops.apply_ack(one, A, "x", re) and re not in want:
                want.append(re)
        assert got == want
        for q in ("SELECT seq, peer, id FROM outbox ORDER BY seq",
                  "SELECT id, acked FROM log ORDER BY seq"):
            assert many.execute(q).fetchall() == [tuple(r) for r in one.execute(q)]
        one.close()
        many.close()
