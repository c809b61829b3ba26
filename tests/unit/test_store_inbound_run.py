"""A run of msgs stored together leaves the rows that storing them one by one leaves."""

from __future__ import annotations

import random

from awp.store import inbound, ops
from awp.store.db import open_store
from awp.wire.ids import IdGenerator

A = "ed25519:" + "A" * 43

_ROWS = ("SELECT peer, dir, t, id, th, re, ts, at, line, read, acked FROM log ORDER BY seq",
         "SELECT peer, th, last_id, updated FROM seen ORDER BY th",
         "SELECT peer, th, subject, created, updated FROM threads ORDER BY th")


def _line(gen: IdGenerator, rnd: random.Random) -> dict:
    line: dict = {"t": "msg", "id": gen.next(), "ts": rnd.choice(
        ["2026-12-01T19:00:00.123Z", "2026-12-01T21:00:00+02:00", "garbage"]),
        "th": rnd.choice(["thr_one", "thr_two", ""]),
        "parts": [{"k": "text", "text": rnd.choice(["", "  \n", "hello there", "x" * 90])}]}
    if rnd.random() < 0.2:
        line["subject"] = rnd.choice(["", "a subject"])
    if rnd.random() < 0.2:
        line["re"] = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    return line


def test_a_run_stored_at_once_equals_the_lines_one_at_a_time(tmp_path):
    rnd = random.Random(11)
    for trial in range(8):
        one = open_store(str(tmp_path / f"one{trial}.db"))
        many = open_store(str(tmp_path / f"many{trial}.db"))
        gen = IdGenerator()
        for c in (one, many):
            c.execute("PRAGMA synchronous = OFF")
            ops.ensure_peer(c, A, 1)
        sent: list[tuple[dict, str]] = []
        for run in range(4):
            now = 1_764_615_600_000 + run * rnd.choice([10, 1500])
            lines = [_line(gen, rnd) for _n in range(rnd.randint(1, 12))]
            batch = [(x, ops.compact_json(x)) for x in lines]
            batch += rnd.sample(sent + batch, min(3, len(sent + batch)))  # duplicates
            rnd.shuffle(batch)
            sent += batch
            want = [ops.store_inbound(one, A, line, text, now) for line, text in batch]
            dups = inbound.stored_ids(many, A, [x["id"] for x, _t in batch])
            fresh, seen_ids = [], set(dups)
            for line, text in batch:
                if line["id"] not in seen_ids:
                    seen_ids.add(line["id"])
                    fresh.append((line, text))
            got = inbound.store_msgs(many, A, fresh, now)
            # Seqs count up in line order (one by one, an ignored duplicate
            # burns a number, so the values themselves may differ).
            assert len(got) == len([s for s in want if s])
            assert got == sorted(got) and len(set(got)) == len(got)
            assert [r[0] for r in many.execute(
                "SELECT seq FROM log ORDER BY seq DESC LIMIT ?", (len(got),))][::-1] == got
            for q in _ROWS:
                assert many.execute(q).fetchall() == one.execute(q).fetchall(), q
        assert inbound.seen_threads(many, A, ["thr_one", "thr_two", "thr_no"]) <= {
            "thr_one", "thr_two"}
        one.close()
        many.close()


def test_a_line_already_stored_costs_the_run_nothing_but_a_lookup(tmp_path):
    """The caller's duplicate check missed one: the row stays as it was and
    every other line still gets its own seq."""
    c = open_store(str(tmp_path / "awp.db"))
    gen = IdGenerator()
    rnd = random.Random(3)
    first = [(x, ops.compact_json(x)) for x in (_line(gen, rnd) for _n in range(3))]
    old = inbound.store_msgs(c, A, first[1:2], 5)
    got = inbound.store_msgs(c, A, first, 6)
    assert got[1] == old[0]
    assert {got[0], got[2]} == {r[0] for r in c.execute(
        "SELECT seq FROM log WHERE id IN (?, ?)", (first[0][0]["id"], first[2][0]["id"]))}
    assert c.execute("SELECT at FROM log WHERE seq = ?", (old[0],)).fetchone()[0] == 5


def _engine(tmp_path, name: str, limit: int):
    from awp.base.limits import Limits
    from awp.node.config import NodeConfig
    from awp.node.engine import Engine
    from awp.wire.keys import Identity

    limits = Limits(peer_stored_bytes=limit)
    eng = Engine(Identity.generate(), str(tmp_path / f"{name}.db"), NodeConfig(name=name,
                                                                               limits=limits))
    c = open_store(eng.db_path)
    c.execute("PRAGMA synchronous = OFF")
    ops.ensure_peer(c, A, 1)
    return eng, c


def test_a_run_near_the_stored_budget_is_refused_where_one_by_one_refuses(tmp_path):
    """Runs crossing peer_stored_bytes: the run's results, rows, counted bytes and
    refusals equal what storing the lines one at a time gives, and a run well
    inside the budget is counted at once to the same total."""
    from types import SimpleNamespace

    from awp.node.store_run import store_run

    rnd = random.Random(17)
    gen = IdGenerator()
    runs = []
    for _r in range(6):
        lines = [_line(gen, rnd) for _n in range(rnd.randint(2, 10))]
        batch = [(x, ops.compact_json(x)) for x in lines]
        runs.append(batch + rnd.sample(batch, 1))
    for limit in (10**9, 9_000, 4_000):
        one, c1 = _engine(tmp_path, f"one{limit}", limit)
        many, c2 = _engine(tmp_path, f"many{limit}", limit)
        conn1 = SimpleNamespace(peer_key=A, quota_refused=0, peer_name="a")
        conn2 = SimpleNamespace(peer_key=A, quota_refused=0, peer_name="a")
        for n, batch in enumerate(runs):
            now = 1_764_615_600_000 + n
            c1.execute("BEGIN")
            owed = [0]
            want = [one.store_inbound(c1, conn1, line, text, now, owed) for line, text in batch]
            if owed[0]:
                ops_usage_add(c1, owed[0])
            c1.execute("COMMIT")
            c2.execute("BEGIN")
            got = store_run(many, c2, conn2, batch, now)
            c2.execute("COMMIT")
            assert [(s > 0, r) for s, r in got] == [(s > 0, r) for s, r in want]
            assert conn1.quota_refused == conn2.quota_refused
            assert one.budgets.stored_of(A) == many.budgets.stored_of(A)
        for q in _ROWS:
            assert c2.execute(q).fetchall() == c1.execute(q).fetchall(), q
        assert c2.execute("SELECT * FROM usage").fetchall() == \
            c1.execute("SELECT * FROM usage").fetchall()
        if limit == 10**9:
            assert conn2.quota_refused == 0
        else:
            assert conn2.quota_refused > 0  # the budget was crossed in this case
        c1.close()
        c2.close()


def ops_usage_add(c, n: int) -> None:
    from awp.store import usage

    usage.add(c, A, log=n)
