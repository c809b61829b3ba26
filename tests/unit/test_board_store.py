"""Board tables against an in-memory SQLite: topics, records, retention, the queue log."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest

from awp.board import sequencer, sync, view
from awp.board.queue import Arbiter, Event
from awp.store import board as sb
from awp.store.schema import BOARD_MIGRATION as BOARD
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
    assert len(kept) == 5 and min(kept) == T0 + 15 * 20_000
    assert floor == T0 + 500_000 - pol.keep_days * 86_400_000  # digests compare from the age
    # the rate rule: 3 a minute for a non-owner, whatever arrived
    c.execute("DELETE FROM board_records")
    burst = [_post(f"b{i}", T0 + i) for i in range(10)]
    for rec in burst:
        sb.put_record(c, rec, T0)
    sb.enforce_retention(c, TOPIC, pol, T0 + 30_000)
    assert len(sb.records(c, TOPIC)) == 3
    last = burst[-1]
    assert sb.recent_before(c, TOPIC, ALICE.key, last.ts, last.hash) == 3


def test_subscriptions_and_listing(c):
    sb.put_topic(c, b.make_topic(OWNER, "ops", 1, T0, title="Ops"), T0)
    sb.subscribe(c, TOPIC, T0, grant={"iss": "x"})
    sb.subscribe(c, TOPIC, T0 + 1)
    assert sb.subscriptions(c) == [TOPIC]
    sb.put_record(c, _post("x", T0), T0)
    assert sb.known_topics(c) == [TOPIC]
    assert sb.topic_stats(c, TOPIC) == {"records": 1, "posts": 1, "newest": T0}
    assert sb.policy(c, TOPIC).title == "Ops"
    sb.unsubscribe(c, TOPIC)
    assert sb.subscriptions(c) == [] and sb.known_topics(c) == [TOPIC]  # the document stays


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
    assert sb.queue_log(c, TOPIC) == events
    again = Arbiter.replay(1000, 2, sb.queue_log(c, TOPIC))
    assert [again.holder_of(i) for i in again.items()] == [ALICE.key, OWNER.key]
    assert sb.queue_log(c, "other") == []
    # compacted: one row an item, in place of the four, replaying to the same state
    sb.replace_log(c, TOPIC, a.compact(set(a.items())))
    assert [ev.op for ev in sb.queue_log(c, TOPIC)] == ["restore", "restore"]
    assert Arbiter.replay(1000, 2, sb.queue_log(c, TOPIC)).snapshot() == a.snapshot()
    # a row holds only what differs from the defaults
    row = c.execute("SELECT event FROM board_queue_log WHERE topic = ? ORDER BY seq",
                    (TOPIC,)).fetchone()[0]
    assert "attempts" not in row and '"op":"restore"' in row


def _stamp(topic: str, of: str, seq: int, ts: int) -> b.Record:
    return b.make_stamp(OWNER, topic, of, seq, ts)


def _own(db, raws, now, **kw):
    """take() on the topic's owner, which stamps what it admits of others'."""
    return sb.take(db, raws, now, me=OWNER.key, signer=_stamp, **kw)


def _wire(db, recs) -> list[str]:
    """The records as the owner sends them: each stamp just before its record."""
    return sb.raw_records(db, TOPIC, [r.hash for r in recs])


def _host(*topics):
    db = sqlite3.connect(":memory:")
    sb.create(db)
    for t in topics:
        sb.put_topic(db, t, T0)
        sb.subscribe(db, t.topic, T0)
    return db


def test_take_checks_admits_dedups_and_only_for_subscribed_topics(monkeypatch):
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=60)
    db = _host(topic)
    p = _post("x", T0)
    other = b.make_post(ALICE, f"{OWNER.key}/elsewhere", [{"k": "text", "text": "y"}], T0)
    calls = []
    real = b.verify
    monkeypatch.setattr(b, "verify", lambda *a: calls.append(1) or real(*a))
    got = _own(db, [p.raw, p.raw, other.raw, "junk", '{"k":"post"}'], T0, via="peer", hops=1)
    assert [r.hash for r in got.new] == [p.hash] and got.sseqs == {p.hash: 1}
    assert got.known == 1 and len(got.refused) == 3
    assert len(calls) == 1  # the duplicate and the unsubscribed topic cost no signature check
    assert _own(db, [p.raw], T0).known == 1 and len(calls) == 1
    # another host takes it only with the owner's stamp, and at the stamp's time
    replica = _host(topic)
    assert sb.take(replica, [p.raw], T0).refused == [sequencer.NO_STAMP]
    [st, raw] = _wire(db, [p])
    forged = st.replace('"seq":1', '"seq":2')  # the owner's signature no longer covers it
    assert sb.take(replica, [forged, raw], T0).refused == ["the owner's stamp does not verify"]
    # the stamp vouches for exactly the bytes it names: a changed record is another hash
    tampered = raw.replace('"text":"x"', '"text":"y"')
    assert sb.take(replica, [st, tampered], T0).refused == [sequencer.NO_STAMP]
    assert [r.hash for r in sb.take(replica, [st, raw], T0 + 9).new] == [p.hash]
    # a newer topic document is taken; the same one again is known
    monkeypatch.undo()
    t2 = b.make_topic(OWNER, "ops", 2, T0, post="grant")
    got = sb.take(db, [t2.raw, t2.raw], T0)
    assert [r.hash for r in got.new] == [t2.hash] and got.known == 1
    assert not sb.policy(db, TOPIC).post_open
    assert _own(db, [_post("z", T0 + 5).raw], T0).refused == ["no grant to post here"]


def test_an_owners_stamp_never_vouches_for_an_authors_signature():
    """The owner signs a stamp for a post in alice's name whose signature is not
    hers: every other host checks alice's signature itself and refuses it."""
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open")
    replica = _host(topic)
    real = _post("mine", T0)
    other = _post("not mine", T0, who=OWNER)  # a valid signature, by another key
    doc = dict(real.doc, sig=other.doc["sig"])
    forged = b.parse_unverified(json.dumps(doc, separators=(",", ":")), lambda *a: None)
    st = b.make_stamp(OWNER, TOPIC, forged.hash, 1, T0)
    got = sb.take(replica, [st.raw, forged.raw], T0 + 5)
    assert got.new == [] and got.refused == ["signature does not verify"]
    assert not sb.has(replica, TOPIC, forged.hash)
    # alice's own post with the same stamp shape is kept
    st2 = b.make_stamp(OWNER, TOPIC, real.hash, 1, T0)
    assert [r.hash for r in sb.take(replica, [st2.raw, real.raw], T0 + 5).new] == [real.hash]


def test_an_owner_that_signs_two_conflicting_statements_is_caught_with_evidence():
    from awp.store import board_conflicts as bc

    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open")
    db = _host(topic)
    p, q = _post("p", T0), _post("q", T0 + 1)
    st_p = b.make_stamp(OWNER, TOPIC, p.hash, 1, T0 + 2)
    assert sb.take(db, [st_p.raw, p.raw], T0 + 5).conflicts == []
    # the same stamp again from another path is no conflict
    assert sb.take(db, [st_p.raw, p.raw], T0 + 5).conflicts == []
    assert bc.summary(db, TOPIC) is None
    # another record under seq 1
    st_q = b.make_stamp(OWNER, TOPIC, q.hash, 1, T0 + 3)
    got = sb.take(db, [st_q.raw, q.raw], T0 + 5)
    assert got.conflicts == [(TOPIC, "seq", "1")]
    # p stamped a second time, later and with another seq
    again = b.make_stamp(OWNER, TOPIC, p.hash, 7, T0 + 4)
    assert sb.take(db, [again.raw, p.raw], T0 + 5).conflicts == [(TOPIC, "stamp", p.hash)]
    # a second stamp a relay made up (not the owner's signature) frames no one
    fake = st_p.raw.replace('"seq":1', '"seq":9')  # the owner's signature no longer covers it
    assert fake != st_p.raw and sb.take(db, [fake, p.raw], T0 + 5).conflicts == []
    # two documents with one seq
    other = b.make_topic(OWNER, "ops", 1, T0, post="grant", read="open")
    assert sb.take(db, [other.raw], T0 + 5).conflicts == [(TOPIC, "doc", "1")]
    s = bc.summary(db, TOPIC)
    assert s["n"] == 3 and s["kinds"] == ["doc", "seq", "stamp"]
    ev = {e["kind"]: e for e in bc.evidence(db, TOPIC)}
    assert {ev["seq"]["a"], ev["seq"]["b"]} == {st_p.raw, st_q.raw}
    assert {ev["stamp"]["a"], ev["stamp"]["b"]} == {st_p.raw, again.raw}
    for e in ev.values():  # every statement kept verifies as the owner's
        for raw in (e["a"], e["b"]):
            assert b.verify_record(b.parse_unverified(raw))
    # the same evidence again adds nothing; the pile is bounded
    assert sb.take(db, [st_q.raw, q.raw], T0 + 5).conflicts == []
    for i in range(2, 40):  # pairs of records under one seq each
        for r in (_post(f"r{i}", T0 + 10 + i), _post(f"s{i}", T0 + 10 + i)):
            sb.take(db, [b.make_stamp(OWNER, TOPIC, r.hash, 100 + i, T0 + 20).raw, r.raw],
                    T0 + 60)
    assert bc.summary(db, TOPIC)["n"] == bc.MAX_PER_TOPIC


def test_a_flooding_author_costs_rate_signature_checks_and_is_not_forwarded(monkeypatch):
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=20)
    db = _host(topic)
    flood = [_post(f"f{i}", T0 + i) for i in range(300)]
    calls = []
    real = b.verify
    monkeypatch.setattr(b, "verify", lambda *a: calls.append(1) or real(*a))
    got = _own(db, [r.raw for r in flood], T0 + 1000)
    assert len(got.new) == 20 and len(calls) == 20
    assert len(got.refused) == 280 and set(got.refused) == {sequencer.OVER_RATE}
    assert got.later == 280  # the author's host offers them again, at the owner's pace
    # another host, fed the stamped records in any order, keeps exactly the owner's 20
    kept = {r.hash for r in got.new}
    pairs = _wire(db, got.new)
    pairs = [pairs[i:i + 2] for i in range(0, len(pairs), 2)]
    random.Random(2).shuffle(pairs)
    db2 = _host(topic)
    for pair in pairs:
        sb.take(db2, pair, T0 + 1000)
    assert {r.hash for r in sb.records(db2, TOPIC)} == kept


def _exchange(a, z, now):
    """One anti-entropy run between two stores, through take() as the daemon would."""
    fa = sb.enforce_retention(a, TOPIC, sb.policy(a, TOPIC), now)
    fz = sb.enforce_retention(z, TOPIC, sb.policy(z, TOPIC), now)
    floors = {id(a): fa, id(z): fz}
    todo = [(z, a, sync.opening(sb.holdings(a, TOPIC), fa, now, b.FUTURE_MS))]
    moved = 0
    while todo:
        me, peer, body = todo.pop()
        step = sync.respond(sb.holdings(me, TOPIC), floors[id(me)], body)
        for src, dst, ids in ((me, peer, step.push), (peer, me, step.want)):
            if ids:
                got = sb.take(dst, sb.raw_records(src, TOPIC, ids), now)
                assert got.known == 0 and not got.refused
                moved += len(got.new)
        if step.reply:
            todo.append((peer, me, step.reply))
    return moved


def test_two_stores_converge_after_a_partition_with_edits_and_a_flood():
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=30, keep=400)
    o, a, z = _host(topic), _host(topic), _host(topic)
    bob = Identity(b"\x05" * 32)
    common = [_post(f"c{i}", T0 + i * 1000) for i in range(100)]
    for i in range(0, 100, 10):  # the owner stamps them as they come, ten a second
        _own(o, [r.raw for r in common[i:i + 10]], T0 + i * 100)
    for db in (a, z):
        sb.take(db, _wire(o, common), T0 + 200_000)
    only_a = [_post(f"a{i}", T0 + 200_000 + i * 2500) for i in range(50)]
    only_a.append(b.make_edit(ALICE, common[3], [{"k": "text", "text": "c3!"}], T0 + 300_000))
    only_z = [b.make_post(bob, TOPIC, [{"k": "text", "text": f"z{i}"}], T0 + 200_000 + i * 10)
              for i in range(100)]  # bob floods: 30 a minute survive
    only_z.append(b.make_delete(ALICE, common[4], T0 + 300_000))
    now = T0 + 400_000
    stamped_a = [r for i in range(3)  # alice's 51, within her rate: 17 a minute
                 for r in _own(o, [x.raw for x in only_a[i * 17:i * 17 + 17]],
                               now - (3 - i) * 61_000).new]
    stamped_z = _own(o, [r.raw for r in only_z], now).new  # bob over his rate: 30 stamped
    assert len(stamped_a) == 51 and len(stamped_z) == 31
    sb.take(a, _wire(o, stamped_a), now)
    sb.take(z, _wire(o, stamped_z), now)
    moved = _exchange(a, z, now)
    ha, hz = sb.holdings(a, TOPIC).hashes(), sb.holdings(z, TOPIC).hashes()
    assert ha == hz
    assert moved == 51 + 30 + 1  # a's posts and edit, bob's 30, the delete: nothing else
    shown = [s.parts[0]["text"] for s in view.visible(sb.records(a, TOPIC))]
    assert shown == [s.parts[0]["text"] for s in view.visible(sb.records(z, TOPIC))]
    assert "c3!" in shown and "c4" not in shown
    assert _exchange(a, z, now) == 0  # a second run finds nothing to move
    assert ha == sb.holdings(o, TOPIC).hashes()  # and both hold what the owner holds


def test_usage_triggers_keep_counts_and_bytes_through_inserts_and_retention(c):
    t = b.make_topic(OWNER, "ops", 1, T0, post="open", keep=5)
    sb.subscribe(c, TOPIC, T0)
    sb.take(c, [t.raw], T0)
    _own(c, [_post(f"p{i}", T0 + i).raw for i in range(8)], T0 + 100)

    def usage():
        return c.execute("SELECT n, bytes FROM board_usage WHERE topic = ?", (TOPIC,)).fetchone()

    n, size = c.execute("SELECT count(*), sum(size) FROM board_records WHERE topic = ?",
                        (TOPIC,)).fetchone()
    assert n == 5 and usage() == (n, size)


def test_migrations_split_into_whole_statements_triggers_included():
    from awp.store.db import _split
    stmts = _split(MIGRATIONS[BOARD])
    triggers = [x for x in stmts if x.startswith("CREATE TRIGGER")]
    assert len(triggers) == 2 and all(x.rstrip().endswith("END;") for x in triggers)
    assert all(sqlite3.complete_statement(x if x.endswith(";") else x + ";") for x in stmts)


def test_records_kept_under_the_old_rule_meet_the_owner_as_sequencer():
    """Rows stored before stamps: the owner stamps them in arrival order at their arrival
    time; elsewhere ours wait for the owner and others' go until they come back stamped."""
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open")
    bob = Identity(b"\x05" * 32)
    old = [_post("a1", T0 + 5), _post("b1", T0 + 1, who=bob), _post("a2", T0 + 9)]
    owner, host = _host(topic), _host(topic)
    for db in (owner, host):
        for i, rec in enumerate(old):
            sb.put_record(db, rec, T0 + 100 + i)  # as the old take stored them
    assert sb.unstamped_at_start(owner, OWNER.key, _stamp) == 3
    seqs = dict(owner.execute("SELECT hash, sseq FROM board_records"))
    assert [seqs[r.hash] for r in old] == [1, 2, 3]  # the order they reached the owner
    assert {r.hash: r.ts for r in sb.records(owner, TOPIC)} == {  # at their arrival time
        r.hash: T0 + 100 + i for i, r in enumerate(old)}
    assert sb.next_stamp(owner, TOPIC, T0) == (4, T0 + 103)  # never a seq twice
    assert sb.unstamped_at_start(owner, OWNER.key, _stamp) == 0  # once
    assert sb.unstamped_at_start(host, bob.key, _stamp) == 3
    assert [r.hash for r in sb.waiting(host)] == [old[1].hash]  # bob's own: to the owner
    assert sb.holdings(host, TOPIC).hashes() == set()  # alice's go until they come stamped
    sb.take(host, _wire(owner, old), T0 + 200)
    assert sb.holdings(host, TOPIC).hashes() == sb.holdings(owner, TOPIC).hashes()
    assert sb.waiting(host) == []


def test_the_owner_counts_an_authors_stamps_once_a_record():
    """The rate check before the signature and the admission after it read one count."""
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=2)
    db = _host(topic)
    seen: list[str] = []
    db.set_trace_callback(seen.append)
    got = _own(db, [_post(f"r{i}", T0 + i).raw for i in range(3)], T0 + 10)
    db.set_trace_callback(None)
    assert len(got.new) == 2 and got.refused == [sequencer.OVER_RATE]
    counts = [s for s in seen if s.startswith("SELECT count(*) FROM board_records WHERE topic")]
    assert len(counts) == 3  # one a record, the third refused


def test_the_owners_count_of_an_authors_stamps_reads_the_author_index_alone():
    """Up to ``rate`` records are counted for every record stamped: a row read for each
    (its ``sseq``) made a flood of an open topic cost the owner a table lookup a record."""
    topic = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=6000)
    db = _host(topic)
    got = _own(db, [_post(f"r{i}", T0 + i).raw for i in range(5)], T0 + 10)
    assert len(got.new) == 5
    seen: list[str] = []
    db.set_trace_callback(seen.append)
    assert sb.stamped_lately(db, TOPIC, ALICE.key, sb.next_ts(db, TOPIC, T0 + 10)) == 5
    db.set_trace_callback(None)
    [count] = [s for s in seen if "count(*)" in s]
    plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + count)]
    assert plan == ["SEARCH board_records USING COVERING INDEX board_records_author"
                    " (topic=? AND author=? AND ts>?)"]
