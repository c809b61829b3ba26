"""Board tables against an in-memory SQLite: topics, records, retention, the queue log."""

from __future__ import annotations

import sqlite3

import pytest

from awp.board import view
from awp.board.queue import Arbiter, Event
from awp.store import board as sb
from awp.store.schema import MIGRATIONS
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"


@pytest.fixture
def c():
    db = sqlite3.connect(":memory:")
    sb.create(db)
    yield db
    db.close()


def _post(text, ts, who=ALICE, **kw):
    return b.make_post(who, TOPIC, [{"k": "text", "text": text}], ts, **kw)


def test_not_a_migration_yet():
    assert not any("board_" in m for m in MIGRATIONS)


def test_newest_topic_document_wins_and_ties_are_settled_the_same_everywhere(c):
    t1 = b.make_topic(OWNER, "ops", 1, T0)
    t2 = b.make_topic(OWNER, "ops", 2, T0, post="open")
    assert sb.put_topic(c, t1, T0) == "new"
    assert sb.put_topic(c, t2, T0) == "newer"
    assert sb.put_topic(c, t1, T0) == ""
    assert sb.policy(c, TOPIC).post_open
    a = b.make_topic(OWNER, "ops", 3, T0, title="a")
    z = b.make_topic(OWNER, "ops", 3, T0, title="z")
    win = max(a, z, key=lambda r: r.hash)
    for first, second in ((a, z), (z, a)):
        db = sqlite3.connect(":memory:")
        sb.create(db)
        sb.put_topic(db, first, T0)
        sb.put_topic(db, second, T0)
        assert sb.topic_doc(db, TOPIC) == win.raw
    with pytest.raises(b.BoardError):
        sb.put_topic(c, _post("x", T0), T0)


def test_records_are_stored_once_byte_for_byte(c):
    p = _post("hello", T0)
    assert sb.put_record(c, p, T0, via="peer", hops=2)
    assert not sb.put_record(c, p, T0 + 1)
    assert sb.has(c, TOPIC, p.hash)
    assert sb.raw_records(c, TOPIC, [p.hash, "0" * 32]) == [p.raw]
    [again] = sb.records(c, TOPIC)
    assert (again.hash, again.raw, again.author, again.ts) == (p.hash, p.raw, ALICE.key, T0)
    assert [r.hash for r in sb.record(c, p.hash[:8])] == [p.hash]
    assert sb.record(c, "zz") == []
    assert len(sb.holdings(c, TOPIC)) == 1
    with pytest.raises(b.BoardError):
        sb.put_record(c, b.make_topic(OWNER, "ops", 1, T0), T0)


def test_view_from_the_store(c):
    p = _post("one", T0)
    r = _post("re", T0 + 1, parent=p.hash)
    for rec in (r, b.make_delete(ALICE, p, T0 + 2), p):
        sb.put_record(c, rec, T0)
    assert [s.hash for s in view.visible(sb.records(c, TOPIC))] == [r.hash]


def test_retention_drops_the_same_records_as_the_pure_rule(c):
    sb.put_topic(c, b.make_topic(OWNER, "ops", 1, T0, keep=5, rate=3), T0)
    pol = sb.policy(c, TOPIC)
    recs = [_post(str(i), T0 + i * 20_000) for i in range(20)]
    for rec in recs:
        sb.put_record(c, rec, T0)
    floor = sb.enforce_retention(c, TOPIC, pol, T0 + 500_000)
    kept = [r.ts for r in sb.records(c, TOPIC)]
    assert len(kept) == 5 and min(kept) == floor == T0 + 15 * 20_000
    # the rate rule: 3 a minute for a non-owner, whatever arrived
    c.execute("DELETE FROM board_records")
    burst = [_post(f"b{i}", T0 + i) for i in range(10)]
    for rec in burst:
        sb.put_record(c, rec, T0)
    sb.enforce_retention(c, TOPIC, pol, T0 + 30_000)
    assert sb.recent_by(c, TOPIC, ALICE.key, T0) == 3


def test_subscriptions_and_listing(c):
    sb.put_topic(c, b.make_topic(OWNER, "ops", 1, T0, title="Ops"), T0)
    sb.subscribe(c, TOPIC, T0, grant={"iss": "x"})
    sb.subscribe(c, TOPIC, T0 + 1)
    assert sb.subscriptions(c) == [TOPIC]
    sb.put_record(c, _post("x", T0), T0)
    [t] = sb.topics(c)
    assert (t["topic"], t["subscribed"], t["records"], t["doc"]["title"]) == (TOPIC, True, 1,
                                                                              "Ops")
    sb.unsubscribe(c, TOPIC)
    assert sb.topics(c)[0]["subscribed"] is False


def test_queue_log_replays_into_the_same_arbiter(c):
    a = Arbiter(1000, 2)
    events = [Event("add", T0, item="a" * 32, ts=T0), Event("add", T0, item="b" * 32, ts=T0 + 1),
              Event("claim", T0 + 1, who=ALICE.key, req="r1"),
              Event("claim", T0 + 2, who=OWNER.key, req="r1")]
    out = []
    for ev in events:
        sb.log_event(c, TOPIC, ev)  # durably first, then decide
        out.append(a.apply(ev))
    # "kill -9": a new arbiter from what the table holds
    again = Arbiter.replay(1000, 2, sb.queue_log(c, TOPIC))
    assert again.log == a.log
    assert [again.holder_of(i) for i in again.items()] == [ALICE.key, OWNER.key]
    assert sb.queue_log(c, "other") == []
