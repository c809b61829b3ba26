"""Issue 19's attacks on the owner's store: no author rewrites history by the times it claims.

The owner admits every record of another author once and stamps it
(:mod:`awp.board.sequencer`); every other host keeps what carries a stamp.
So the owner's store decides here, and :func:`_replica` checks that a host
fed the stamped records, in any order, keeps the same ones.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from awp.store import board as sb
from awp.wire import board as b
from awp.wire.grants import grant_hash, make_grant
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts

T0 = 1_790_000_000_000
MIN = 60_000
OWNER = Identity(b"\x01" * 32)
G = Identity(b"\x02" * 32)
BOB = Identity(b"\x03" * 32)
TOPIC = f"{OWNER.key}/ops"


@pytest.fixture
def c():
    db = sqlite3.connect(":memory:")
    sb.create(db)
    sb.subscribe(db, TOPIC, T0)
    yield db
    db.close()


def _doc(c, seq: int, **policy) -> None:
    assert sb.take(c, [b.make_topic(OWNER, "ops", seq, T0, **policy)], T0).new


def _stamp(topic: str, of: str, seq: int, ts: int) -> b.Record:
    return b.make_stamp(OWNER, topic, of, seq, ts)


def _take(c, recs: list[b.Record], now: int) -> sb.Taken:
    """What the owner's daemon does with records arriving from peers."""
    return sb.take(c, [r.raw if r.author != OWNER.key else r for r in recs], now,
                   via="peer", me=OWNER.key, signer=_stamp)


def _replica(c, now: int) -> set[str]:
    """The texts another host keeps when fed the owner's stamped records shuffled."""
    other = sqlite3.connect(":memory:")
    sb.create(other)
    sb.subscribe(other, TOPIC, T0)
    sb.take(other, [sb.topic_doc(c, TOPIC)], now)
    hashes = [r.hash for r in sb.records(c, TOPIC)]
    raws = sb.raw_records(c, TOPIC, hashes)
    pairs = []
    i = 0
    while i < len(raws):  # a stamp goes with the record after it
        n = 2 if '"k":"stamp"' in raws[i] else 1
        pairs.append(raws[i:i + n])
        i += n
    random.Random(3).shuffle(pairs)
    for pair in pairs:
        sb.take(other, pair, now)
    got = {r.doc["parts"][0]["text"].rstrip(".") for r in sb.records(other, TOPIC)}
    other.close()
    return got


def _post(who: Identity, ts: int, text: str = "x", size: int = 0) -> b.Record:
    body = text + "." * max(0, size - len(text))
    return b.make_post(who, TOPIC, [{"k": "text", "text": body}], ts)


def _texts(c) -> set[str]:
    return {r.doc["parts"][0]["text"].rstrip(".") for r in sb.records(c, TOPIC)}


def test_backdated_posts_after_a_revoke_are_refused(c):
    until = format_ts(T0 + 30 * 24 * 3_600_000)
    _doc(c, 1, members=[{"key": G.key, "can": "post", "until": until}])
    assert _take(c, [_post(G, T0, "before")], T0).new
    _doc(c, 2, members=[])  # revoked at T0
    now = T0 + 1000
    for back in (10 * MIN, 3 * 60 * MIN, 20 * 24 * 60 * MIN):
        taken = _take(c, [_post(G, T0 - back, f"back {back}")], now)
        assert not taken.new and taken.refused == ["no grant to post here"]
    assert _texts(c) == {"before"} == _replica(c, now)


def test_backdated_posts_under_a_revoked_grant_are_refused(c):
    """The grant inside the record was judged at the record's own ts: dated before the
    revocation, it still counted (issue 19 item 8)."""
    g = make_grant(OWNER, G.key, [b.post_cap(TOPIC)], T0 + 30 * 24 * 3_600_000)
    _doc(c, 1)
    assert _take(c, [b.make_post(G, TOPIC, [{"k": "text", "text": "before"}], T0,
                                 grant=g)], T0).new
    _doc(c, 2, revoked=[{"grant": grant_hash(g), "at": format_ts(T0 + 500)}])
    for back in (10 * MIN, 3 * 60 * MIN, 20 * 24 * 60 * MIN):
        rec = b.make_post(G, TOPIC, [{"k": "text", "text": f"back {back}"}], T0 - back, grant=g)
        assert not _take(c, [rec], T0 + 1000).new
    assert _texts(c) == {"before"} == _replica(c, T0 + 1000)


def test_an_expired_membership_admits_nothing_new(c):
    _doc(c, 1, members=[{"key": G.key, "can": "post", "until": format_ts(T0 + MIN)}])
    assert _take(c, [_post(G, T0, "in time")], T0).new
    assert not _take(c, [_post(G, T0 + 1, "dated in time")], T0 + MIN).new
    assert _texts(c) == {"in time"}


def test_backdated_large_posts_of_one_author_keep_the_owners_and_are_paced(c):
    """1,200 posts of 63 KB dated -15 to +5 minutes, from one granted author."""
    _doc(c, 1, members=[{"key": G.key, "can": "post"}, {"key": BOB.key, "can": "post"}],
         keep_bytes=16 * 1024 * 1024)
    now = T0 + 20 * MIN
    own = [_post(OWNER, now - 30 * MIN + i * 1000, f"own {i}") for i in range(20)]
    honest = [_post(BOB, now - 30 * MIN + i * 5000, f"bob {i}") for i in range(10)]
    assert len(_take(c, own + honest, now - 10 * MIN).new) == 30
    rng = random.Random(5)
    flood = [_post(G, now + rng.randrange(-15 * MIN, 5 * MIN), f"flood {i}", 63_000)
             for i in range(1_200)]
    taken = _take(c, flood, now)
    # on arrival at the owner: ``rate`` a minute of its clock, whatever the records claim
    assert len(taken.new) == 60 and taken.later == 1_140
    for minute in range(1, 4):  # what the author's host offers again
        assert len(_take(c, [r for r in flood if not sb.has(c, TOPIC, r.hash)],
                         now + minute * MIN).new) == 60
    held = _texts(c)
    assert {f"own {i}" for i in range(20)} <= held and {f"bob {i}" for i in range(10)} <= held
    usage = c.execute("SELECT bytes FROM board_usage WHERE topic = ?", (TOPIC,)).fetchone()[0]
    assert usage <= 2 * 16 * 1024 * 1024
    assert _replica(c, now + 4 * MIN) == held


def test_thirty_four_fresh_keys_on_an_open_topic_do_not_wipe_others(c):
    _doc(c, 1, post="open", read="open", keep=300)
    now = T0 + 10 * MIN
    mine = [_post(OWNER, now - 5 * MIN + i, f"own {i}") for i in range(5)]
    theirs = [_post(BOB, now - 5 * MIN + i, f"bob {i}") for i in range(5)]
    _take(c, mine + theirs, now - 5 * MIN)
    crowd = [Identity.generate() for _ in range(34)]
    for k, who in enumerate(crowd):
        _take(c, [_post(who, now - 30_000 + i * 10, f"k{k} {i}") for i in range(60)], now)
    held = _texts(c)
    assert {f"own {i}" for i in range(5)} <= held and {f"bob {i}" for i in range(5)} <= held
    assert len(sb.records(c, TOPIC)) <= 300 + 5
    assert _replica(c, now) == held
