"""The board's indexes since migration 10: fewer entries a record, no query walks a topic.

A post is stored on every host it reaches, and each index its row is in is
one more page written at commit.  Migration 10 drops the index on the hash
alone and keeps in the ``of`` and ``parent`` indexes only the records that
name another.  These tests hold what that must not cost: every query the
store makes on ``board_records`` still finds its rows through an index (a
partial index is used only when the query says ``of != ''`` in so many
words, and ``INDEXED BY`` fails loudly when it cannot be), every reader
gives the same answers on a store upgraded from version 9, and a plain
post is in no more indexes than it needs.
"""

from __future__ import annotations

import re
import sqlite3

from awp.store import board as sb
from awp.store.db import _split, migrate
from awp.store.schema import MIGRATIONS
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"
OTHER = f"{OWNER.key}/misc"


def _stamp(topic: str, of: str, seq: int, ts: int) -> b.Record:
    return b.make_stamp(OWNER, topic, of, seq, ts)


def _store(version: int) -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    for script in MIGRATIONS[:version]:
        for stmt in _split(script):
            c.execute(stmt)
    c.execute(f"PRAGMA user_version = {version}")
    return c


def _fill(c: sqlite3.Connection) -> dict[str, b.Record]:
    """Two topics of the owner's, with posts, a reply, an edit, a delete, a hide, a
    lease and stamped posts of another author: every kind of row a reader meets."""
    recs: dict[str, b.Record] = {}
    for name, topic in (("ops", TOPIC), ("misc", OTHER)):
        doc = b.make_topic(OWNER, name, 1, T0, post="open", read="open", queue=True)
        sb.subscribe(c, topic, T0)
        sb.take(c, [doc.raw], T0)
    posts = [b.make_post(OWNER, TOPIC, [{"k": "text", "text": f"p{i}"}], T0 + i)
             for i in range(6)]
    recs.update(item=posts[0], edited=posts[1], deleted=posts[2], hidden=posts[3])
    recs["reply"] = b.make_post(ALICE, TOPIC, [{"k": "text", "text": "re"}], T0 + 10,
                                parent=posts[0].hash)
    recs["edit"] = b.make_edit(OWNER, posts[1], [{"k": "text", "text": "p1!"}], T0 + 11)
    recs["delete"] = b.make_delete(OWNER, posts[2], T0 + 12)
    recs["hide"] = b.make_hide(OWNER, posts[3], T0 + 13)
    recs["lease"] = b.make_lease(OWNER, TOPIC, posts[0].hash, ALICE.key, "claimed", "l1",
                                 T0 + 60_000, T0 + 14)
    recs["alice"] = b.make_post(ALICE, TOPIC, [{"k": "text", "text": "a"}], T0 + 15)
    recs["misc"] = b.make_post(OWNER, OTHER, [{"k": "text", "text": "m"}], T0 + 16)
    got = sb.take(c, [r.raw for r in (*posts, *[v for k, v in recs.items() if k not in (
        "item", "edited", "deleted", "hidden")])], T0 + 100, me=OWNER.key, signer=_stamp)
    assert not got.refused, got.refused
    return recs


def _readers(c: sqlite3.Connection, recs: dict[str, b.Record]) -> list[object]:
    """What every reader of the store answers (each answer in a comparable form)."""
    now = T0 + 200
    item, reply = recs["item"], recs["reply"]
    pol = sb.policy(c, TOPIC)
    assert pol is not None

    def posts(ps: list[sb.Post]) -> list[tuple]:
        return [(p.shown.hash, str(p.shown.parts), p.shown.edited, p.seq, p.replies) for p in ps]

    return [
        sb.has(c, TOPIC, item.hash), sb._held_at_all(c, TOPIC, reply.hash),
        sb.stamped_raws(c, TOPIC, reply.hash), sorted(sb.holdings(c, TOPIC)._set),
        sb.raw_records(c, TOPIC, [item.hash, reply.hash]),
        [r.hash for r in sb.records(c, TOPIC)], [r.hash for r in sb.records(c, TOPIC, 0, "edit")],
        [r.hash for r in sb.record(c, item.hash[:6])], [r.hash for r in sb.record(c, "0")],
        sb.recent_before(c, TOPIC, ALICE.key, now, "f" * 32),
        sb.arrived_lately(c, TOPIC, ALICE.key, now),
        posts(sb.visible_posts(c, TOPIC)), posts(sb.visible_posts(c, TOPIC, parent=item.hash)),
        posts(sb.posts_after(c, [TOPIC], 0, ALICE.key)), posts(sb.posts_after(c, None, 2, "")),
        posts(sb.posts_at(c, [1, 2, 3, 8])), sb.plain_posts(c, 0, 100, 100),
        sb.last_seq(c), sb.version_and_last(c)[1],
        posts(sb.unread(c, ALICE.key)[0]), sb.unread_count(c, TOPIC, ALICE.key),
        posts([p for p in [sb.post_by_hash(c, TOPIC, item.hash)] if p]),
        sb.topic_stats(c, TOPIC), sb.queue_items(c, TOPIC),
        sb.lease_raws(c, TOPIC, OWNER.key), sb.item_history(c, TOPIC, item.hash),
        sb.retention_due(c, TOPIC, pol, now), sb.top_seqs(c), sb.top_seq(c, TOPIC),
        [r.hash for r in sb.waiting(c)], sb.stamped_lately(c, TOPIC, ALICE.key, now),
        sb.next_ts(c, TOPIC, now), sb._has_later(c, recs["alice"]),
        sb._Shape.read(c, TOPIC, item.hash),
    ]


def _plans(c: sqlite3.Connection) -> dict[str, list[str]]:
    """Every statement the readers run on ``board_records``, with its query plan."""
    recs = _fill(c)
    seen: list[str] = []
    c.set_trace_callback(seen.append)
    _readers(c, recs)
    c.set_trace_callback(None)
    return {s: [r[3] for r in c.execute("EXPLAIN QUERY PLAN " + s)]
            for s in seen if "board_records" in s}


def _scans(plan: list[str]) -> list[str]:
    return [p for p in plan if p.startswith("SCAN") and not p.startswith(("SCAN CONSTANT",
                                                                            "SCAN pragma_"))]


def _searches(plan: list[str]) -> list[str]:
    """The plan without index names: how many columns each step looks rows up by."""
    return [re.sub(r"USING (COVERING )?INDEX \S+", "USING INDEX", p) for p in plan]


def test_every_board_query_finds_its_rows_through_an_index():
    new, old = _plans(_store(len(MIGRATIONS))), _plans(_store(9))
    assert len(new) > 25 and set(new) == set(old)
    for s, plan in new.items():
        if "hash >= " in s and "topic = " not in s:  # record(): a prefix, topic by topic
            assert plan[0].endswith("(topic=? AND hash>? AND hash<?)"), plan
            continue
        # each looks its rows up by as many columns as before: none walks a whole topic
        # (or the whole table) where it used to go straight to its rows
        assert _searches(plan) == _searches(old[s]), (s, plan, old[s])
    # walking every record is right only where every record is wanted: at start-up
    # (top_seqs); `awp unread` walked them before migration 10 too
    walks = sorted(s[:24] for s, plan in new.items() if _scans(plan))
    assert walks == ["SELECT p.seq, p.topic, p", "SELECT topic, max(sseq) "]


def test_a_store_from_version_9_upgrades_and_answers_the_same():
    old = _store(9)
    recs = _fill(old)
    before = _readers(old, recs)  # the new queries, on the old indexes
    assert migrate(old) == len(MIGRATIONS) >= 10
    indexes = dict(old.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'board_records'"
        " AND sql IS NOT NULL"))
    assert "board_records_hash" not in indexes
    assert indexes["board_records_of"].endswith("WHERE of != ''")
    assert indexes["board_records_parent"].endswith("WHERE parent != ''")
    assert _readers(old, recs) == before
    # only the records that name another are in the partial indexes
    assert old.execute("SELECT count(*) FROM board_records INDEXED BY board_records_of"
                       " WHERE of != ''").fetchone()[0] == 4  # edit, delete, hide, lease
    assert old.execute("SELECT count(*) FROM board_records INDEXED BY board_records_parent"
                       " WHERE parent != ''").fetchone()[0] == 1


def test_a_plain_post_is_in_three_indexes_besides_the_table():
    """The unique (topic, hash), (topic, ts, hash) and (topic, author, ts): each index a
    row is in costs every host a page written for every post."""
    c = _store(len(MIGRATIONS))
    _fill(c)
    names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'index'"
                                     " AND tbl_name = 'board_records'"
                                     " AND coalesce(sql, '') NOT LIKE '%WHERE%'"
                                     " ORDER BY name")]
    assert names == ["board_records_author", "board_records_ts",
                     "sqlite_autoindex_board_records_1"]
