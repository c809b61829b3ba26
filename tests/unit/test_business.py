"""Business with peers (awp/node/business.py, awp/node/board_links.py) against a real store.

Which peer a daemon keeps a link to is a function of its tables: these tests
fill the tables and ask, without any I/O.
"""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

from awp.base.limits import Limits
from awp.node import board_links
from awp.node.business import Business
from awp.store import links, ops
from awp.store.db import migrate
from awp.wire.board import make_lease
from awp.wire.keys import Identity

NOW = 1_790_000_000_000
ME = Identity(b"\x07" * 32)
OWNER = Identity(b"\x01" * 32)
RELAY, OTHER = "ed25519:relay", "ed25519:other"
TOPIC = f"{OWNER.key}/ops"
DAY = 86_400_000


def business(**limits) -> Business:
    cfg = SimpleNamespace(outbox_ttl=7 * 86400.0, limits=Limits(**limits))
    eng = SimpleNamespace(config=cfg, identity=ME)
    eng.business = Business(eng)  # type: ignore[arg-type]
    board_links.register(eng)  # type: ignore[arg-type]
    return eng.business


@pytest.fixture
def c():
    db = sqlite3.connect(":memory:", isolation_level=None)
    migrate(db)
    yield db
    db.close()


def peer(c, key: str, last_seen: int = 0, parked: bool = False) -> None:
    ops.ensure_peer(c, key, NOW - DAY)
    c.execute("UPDATE peers SET last_seen = ? WHERE key = ?", (last_seen, key))
    ops.set_parked(c, key, parked)


def test_nothing_is_no_business_and_a_queued_line_is(c):
    biz = business()
    peer(c, OTHER)
    assert biz.reason(c, OTHER, NOW) == ""
    assert biz.reason(c, "ed25519:unknown", NOW) == ""
    c.execute("INSERT INTO outbox (peer, id, t, line, created) VALUES (?, 'x', 'msg', '{}', ?)",
              (OTHER, NOW))
    assert biz.reason(c, OTHER, NOW) == "outbox"
    assert biz.peers(c, NOW) == {OTHER: "outbox"}


def test_an_open_thread_within_the_retention_is_business_a_finished_one_is_not(c):
    biz = business()
    peer(c, OTHER)
    c.execute("INSERT INTO threads (peer, th, created, updated, my_since, their_since)"
              " VALUES (?, 'thr_1', ?, ?, 0, 0)", (OTHER, NOW, NOW - DAY))
    assert biz.reason(c, OTHER, NOW) == "thread"
    assert biz.reason(c, OTHER, NOW + 7 * DAY) == ""  # past the outbox retention
    c.execute("UPDATE threads SET mine = 'done'")
    assert biz.reason(c, OTHER, NOW) == ""


def test_a_parked_peer_has_no_business_until_unparked(c):
    biz = business()
    peer(c, OTHER, last_seen=NOW, parked=True)
    c.execute("INSERT INTO outbox (peer, id, t, line, created) VALUES (?, 'x', 'msg', '{}', ?)",
              (OTHER, NOW))
    assert biz.reason(c, OTHER, NOW) == "" and biz.peers(c, NOW) == {}
    ops.set_parked(c, OTHER, False)
    assert biz.reason(c, OTHER, NOW) == "outbox"


def test_a_recent_link_is_kept_warm_for_warm_for(c):
    biz = business(warm_for=600)
    peer(c, OTHER, last_seen=NOW - 599_000)
    assert biz.reason(c, OTHER, NOW) == "warm"
    assert biz.reason(c, OTHER, NOW + 2_000) == ""
    assert business(warm_for=0).reason(c, OTHER, NOW) == ""


def test_the_owner_of_a_subscribed_topic_and_the_links_that_carry_it(c):
    biz = business(warm_for=0)
    peer(c, OWNER.key)
    peer(c, RELAY, last_seen=NOW - DAY)
    links.heard(c, RELAY, [TOPIC], [], NOW - DAY)
    assert biz.reason(c, OWNER.key, NOW) == "" and biz.reason(c, RELAY, NOW) == ""
    c.execute("INSERT INTO board_subs (topic, since) VALUES (?, ?)", (TOPIC, NOW))
    assert biz.reason(c, OWNER.key, NOW) == "subscription"
    assert biz.reason(c, RELAY, NOW) == "relay"
    assert biz.peers(c, NOW) == {OWNER.key: "subscription", RELAY: "relay"}
    links.heard(c, RELAY, [], [TOPIC], NOW)  # the relay dropped the topic
    assert biz.reason(c, RELAY, NOW) == ""


def test_kept_links_are_capped_to_the_most_recently_connected_peers(c):
    """A crowd of fresh keys subscribing to our topic cannot make us dial a crowd."""
    biz = business(warm_for=3600, kept_peers=3)
    c.execute("INSERT INTO board_subs (topic, since) VALUES (?, ?)", (TOPIC, NOW))
    crowd = [f"ed25519:crowd{i:02d}" for i in range(10)]
    for i, key in enumerate(crowd):
        peer(c, key, last_seen=NOW - 1000 * i)
        links.heard(c, key, [TOPIC], [], NOW)
    assert {k for k in crowd if biz.reason(c, k, NOW)} == set(crowd[:3])
    assert set(biz.peers(c, NOW)) == set(crowd[:3])
    # Business we made ourselves is not capped.
    c.execute("INSERT INTO outbox (peer, id, t, line, created) VALUES (?, 'x', 'msg', '{}', ?)",
              (crowd[9], NOW))
    assert biz.reason(c, crowd[9], NOW) == "outbox"


def test_a_kept_queue_operation_and_a_held_lease_are_business_with_the_owner(c):
    biz = business(warm_for=0)
    peer(c, OWNER.key)
    c.execute("INSERT INTO board_pending (lease, topic, op, until) VALUES ('l1', ?, 'complete',"
              " ?)", (TOPIC, NOW + 60_000))
    assert biz.reason(c, OWNER.key, NOW) == "queue"
    assert biz.reason(c, OWNER.key, NOW + 60_000) == ""  # its lease ran out
    c.execute("DELETE FROM board_pending")

    def lease(item: str, holder: str, state: str, ts: int, until: int) -> None:
        rec = make_lease(OWNER, TOPIC, item, holder, state, "l-" + item, until, ts)
        c.execute("INSERT INTO board_records (topic, hash, kind, author, ts, of, size, raw,"
                  " received) VALUES (?, ?, 'lease', ?, ?, ?, ?, ?, ?)",
                  (TOPIC, rec.hash, OWNER.key, ts, item, rec.size, rec.raw, ts))

    lease("a" * 32, ME.key, "claimed", NOW - 1000, NOW + 60_000)
    assert biz.reason(c, OWNER.key, NOW) == "queue"
    assert biz.peers(c, NOW) == {OWNER.key: "queue"}
    lease("a" * 32, ME.key, "done", NOW - 500, NOW - 500)  # the newest record wins
    assert biz.reason(c, OWNER.key, NOW) == ""
    lease("b" * 32, Identity(b"\x09" * 32).key, "claimed", NOW - 1000, NOW + 60_000)
    assert biz.reason(c, OWNER.key, NOW) == ""


def test_carriers_are_forgotten_once_long_gone_or_unsubscribed(c):
    peer(c, RELAY, last_seen=NOW - 8 * DAY)
    peer(c, OTHER, last_seen=NOW)
    c.execute("INSERT INTO board_subs (topic, since) VALUES (?, ?)", (TOPIC, NOW))
    links.heard(c, RELAY, [TOPIC], [], NOW - 8 * DAY)
    links.heard(c, OTHER, [TOPIC, "ed25519:x/left"], [], NOW)
    assert links.prune(c, NOW - 7 * DAY) == 2
    assert links.carriers(c) == {OTHER}
    assert c.execute("SELECT count(*) FROM peer_topics").fetchone()[0] == 1


def test_carrier_rows_are_capped_newest_kept(c, monkeypatch):
    """Each (neighbour, topic) row is one a peer made us write by subscribing."""
    monkeypatch.setattr(links, "MAX_ROWS", 4)
    c.execute("INSERT INTO board_subs (topic, since) VALUES (?, ?)", (TOPIC, NOW))
    keys = [f"ed25519:sub{i}" for i in range(10)]
    for i, key in enumerate(keys):
        peer(c, key, last_seen=NOW)
        links.heard(c, key, [TOPIC], [], NOW + i)
    assert links.prune(c, NOW - DAY) == 6
    assert links.carriers(c) == set(keys[-4:])
