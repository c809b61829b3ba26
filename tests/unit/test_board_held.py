"""The in-memory holdings a topic (awp.store.board_held) against a real SQLite store.

The cache must always equal a full read (``sb.holdings``), and must get there
by reading only what arrived when nothing else changed: a stale copy would
make the owner's head, or a subscriber's gap check, wrong.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3

import pytest

from awp.board import sync
from awp.store import board as sb
from awp.store import board_held
from awp.store.board_held import HeldCache
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"
OTHER = f"{OWNER.key}/misc"


@pytest.fixture
def c():
    db = sqlite3.connect(":memory:", isolation_level=None)
    sb.create(db)
    yield db
    db.close()


def _post(text: str, ts: int, topic: str = TOPIC) -> b.Record:
    return b.make_post(ALICE, topic, [{"k": "text", "text": text}], ts)


def _keys(h: sync.Holdings) -> list[tuple[int, str]]:
    assert h._hs == [x for _ts, x in h._keys]  # the hashes alone stay in step with the keys
    assert h._keys == sorted(h._keys) and h._set == set(h._hs)
    return list(h._keys)


def _look(cache: HeldCache, c: sqlite3.Connection, topic: str = TOPIC) -> list[tuple[int, str]]:
    return cache.using(c, topic, _keys)


def _truth(c: sqlite3.Connection, topic: str = TOPIC) -> list[tuple[int, str]]:
    return list(sb.holdings(c, topic)._keys)


def test_new_records_are_added_without_reading_the_topic_again(c):
    cache = HeldCache()
    for i in range(50):
        sb.put_record(c, _post(f"old {i}", T0 + i), T0)
    assert _look(cache, c) == _truth(c)
    for i in range(20):
        sb.put_record(c, _post(f"new {i}", T0 + 1000 + i), T0)
        sb.put_record(c, _post(f"elsewhere {i}", T0 + i, OTHER), T0)
        assert _look(cache, c) == _truth(c)
    assert cache.full_reads == 1  # one full read, then only what arrived
    assert cache.using(c, TOPIC, lambda h: h.summary(T0, T0 + 2000)) == \
        sb.holdings(c, TOPIC).summary(T0, T0 + 2000)


def test_a_deleted_record_is_caught_even_when_as_many_arrived(c):
    cache = HeldCache()
    recs = [_post(f"p {i}", T0 + i) for i in range(10)]
    for r in recs:
        sb.put_record(c, r, T0)
    _look(cache, c)
    c.execute("DELETE FROM board_records WHERE hash = ?", (recs[3].hash,))
    sb.put_record(c, _post("instead", T0 + 50), T0)  # the count alone would look unchanged
    assert _look(cache, c) == _truth(c)
    assert recs[3].hash not in cache.using(c, TOPIC, lambda h: h.hashes())
    assert cache.full_reads == 2


def test_retention_drops_are_caught(c):
    cache = HeldCache()
    pol = sb.put_topic(c, b.make_topic(OWNER, "ops", 1, T0, post="open", keep=5), T0)
    assert pol
    for i in range(12):
        sb.put_record(c, _post(f"p {i}", T0 + i), T0)
    assert len(_look(cache, c)) == 12
    sb.enforce_retention(c, TOPIC, sb.policy(c, TOPIC), T0 + 100)
    assert _look(cache, c) == _truth(c)
    assert len(_look(cache, c)) == 5


def test_our_waiting_record_joins_at_its_stamped_time(c):
    cache = HeldCache()
    mine = _post("mine", T0 + 5)
    sb.put_record(c, _post("before", T0), T0)
    sb.put_record(c, mine, T0, waiting=True)
    assert mine.hash not in cache.using(c, TOPIC, lambda h: h.hashes())
    stamped = dataclasses.replace(mine, ts=T0 + 900)
    sb.put_record(c, stamped, T0 + 10, sseq=1, stamp="stamp")
    assert _look(cache, c) == _truth(c)
    assert (T0 + 900, mine.hash) in _look(cache, c)
    assert cache.full_reads == 1  # the stamp was looked up, not the whole topic


def test_a_rolled_back_transaction_does_not_stay_in_the_copy(c):
    """A write transaction's view is read in full and never kept: after a rollback
    SQLite gives the same arrival seqs again, so a kept copy would miss the rows
    stored under them (and keep the ones rolled back) with every count agreeing."""
    cache = HeldCache()
    sb.put_record(c, _post("kept", T0), T0)
    _look(cache, c)
    c.execute("BEGIN")
    sb.put_record(c, _post("rolled back", T0 + 1), T0)
    assert len(_look(cache, c)) == 2  # the writer sees its own transaction
    c.execute("ROLLBACK")
    sb.put_record(c, _post("stored instead", T0 + 2), T0)  # under the same seq
    assert _look(cache, c) == _truth(c)
    assert len(_truth(c)) == 2


def test_a_copy_is_read_in_full_now_and_then_and_on_drop(c, monkeypatch):
    monkeypatch.setattr(board_held, "FULL_EVERY", 3)
    cache = HeldCache()
    sb.put_record(c, _post("a", T0), T0)
    for _ in range(5):  # a full read, 3 looks at what arrived, a full read
        _look(cache, c)
    assert cache.full_reads == 2
    cache.drop(TOPIC)
    _look(cache, c)
    assert cache.full_reads == 3


def test_random_changes_never_leave_the_copy_stale(c):
    rnd = random.Random(24)
    cache = HeldCache()
    waiting: list[b.Record] = []
    for step in range(400):
        op = rnd.random()
        if op < 0.55:
            sb.put_record(c, _post(f"r {step}", T0 + rnd.randrange(10_000)), T0)
        elif op < 0.7:
            rec = _post(f"w {step}", T0 + rnd.randrange(10_000))
            sb.put_record(c, rec, T0, waiting=True)
            waiting.append(rec)
        elif op < 0.8 and waiting:
            rec = waiting.pop(rnd.randrange(len(waiting)))
            sb.put_record(c, dataclasses.replace(rec, ts=T0 + 20_000 + step), T0,
                          sseq=step, stamp="s")
        elif op < 0.9:
            row = c.execute("SELECT hash FROM board_records ORDER BY random() LIMIT 1").fetchone()
            if row:
                c.execute("DELETE FROM board_records WHERE hash = ?", row)
                waiting = [w for w in waiting if w.hash != row[0]]
        if rnd.random() < 0.5:
            assert _look(cache, c) == _truth(c), step
    assert _look(cache, c) == _truth(c)
    assert cache.full_reads < 150  # mostly the new rows only


def test_extend_keeps_order_and_each_hash_once():
    h = sync.Holdings([(5, "b"), (1, "a")])
    assert h.extend([(3, "c"), (3, "c"), (1, "a")]) == 1
    assert h.extend([(i, f"x{i:02}") for i in range(20, 0, -1)]) == 20  # among the old
    assert h.extend([(i, f"y{i:03}") for i in range(200, 100, -1)]) == 100  # all newer
    assert h.extend([(i, f"z{i:03}") for i in range(300, 0, -3)]) == 100  # many, everywhere
    assert len(_keys(h)) == 223 == len(h.hashes())
    assert h.ids(0, 400) == h._hs and h.summary(5, 6)[0] == 1 + 1  # (5, "b"), (5, "x05")
    h.discard_below(100)
    assert len(_keys(h)) == len(h) and min(h._keys)[0] >= 100


def test_the_joined_fingerprint_is_the_digest_a_hash_at_a_time():
    import hashlib
    hashes = [f"{i:032x}" for i in range(100)]
    d = hashlib.sha256()
    for x in hashes:
        d.update(x.encode("ascii"))
    assert sync.fingerprint(iter(hashes)) == d.hexdigest()[:24]
