"""Retention and the reader's view: the same result whatever order records arrive in."""

from __future__ import annotations

import random

from awp.board import retention, view
from awp.board.retention import Entry
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
DAY = retention.DAY_MS
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
BOB = Identity(b"\x03" * 32)
TOPIC = f"{OWNER.key}/ops"


def _pol(**kw):
    return b.check_policy(b.make_topic(OWNER, "ops", 1, T0, **kw).doc)


def _e(ts, h, author=ALICE.key, size=300):
    return Entry(ts, h, author, size)


def test_rate_per_author_per_minute_owner_exempt():
    flood = [_e(T0 + i, f"{i:032x}") for i in range(100)]
    own = [_e(T0 + i, f"f{i:031x}", OWNER.key) for i in range(100)]
    kept = retention.within_rate(flood + own, OWNER.key, 10)
    assert sum(e.author == ALICE.key for e in kept) == 10
    assert sum(e.author == OWNER.key for e in kept) == 100
    # the window slides: a minute later the author may post again
    later = [_e(T0 + 60_000 + i, f"a{i:031x}") for i in range(5)]
    kept = retention.within_rate(flood + later, OWNER.key, 10)
    assert sum(e.ts >= T0 + 60_000 for e in kept) == 5


def test_result_does_not_depend_on_arrival_order():
    rng = random.Random(3)
    entries = [_e(T0 + rng.randrange(600_000), f"{rng.getrandbits(128):032x}",
                  rng.choice([ALICE.key, BOB.key]), rng.randrange(100, 5000))
               for _ in range(2000)]
    pol = _pol(rate=20, keep=500, keep_bytes=b.MAX_RECORD * 20)
    first, floor = retention.kept(entries, OWNER.key, pol, T0 + 600_000)
    for _ in range(5):
        rng.shuffle(entries)
        again, floor2 = retention.kept(entries, OWNER.key, pol, T0 + 600_000)
        assert again == first and floor2 == floor
    # applying it again changes nothing, and what it dropped stays dropped next to the rest
    assert retention.kept(first, OWNER.key, pol, T0 + 600_000) == (first, floor)
    assert retention.kept(first + entries, OWNER.key, pol, T0 + 600_000)[0] == first


def test_over_keep_the_author_holding_most_loses_its_oldest():
    pol = _pol(keep=3)
    es = [_e(T0, "a" * 32), _e(T0 + 1, "b" * 32), _e(T0 + 2, "c" * 32, BOB.key),
          _e(T0 + 3, "d" * 32), _e(T0 + 4, "e" * 32)]
    kept, floor = retention.kept(es, OWNER.key, pol, T0 + 10)
    assert floor == T0 + 10 - pol.keep_days * DAY
    assert [e.hash[0] for e in kept] == ["c", "d", "e"]  # bob's one record outlives alice's old


def test_one_author_backdating_large_records_evicts_only_its_own():
    """Issue 19 item 7: 1,200 posts of 63 KB dated -15 to +5 minutes by one granted
    author pushed every owner's post out on every host; now they push out only their own."""
    pol = _pol()
    rng = random.Random(7)
    own = [_e(T0 + i * 1000, f"0{i:031x}", OWNER.key, 2_000) for i in range(50)]
    honest = [_e(T0 + i * 1000, f"1{i:031x}", BOB.key, 1_500) for i in range(20)]
    flood = [_e(T0 + rng.randrange(-15 * 60_000, 5 * 60_000), f"2{i:031x}", ALICE.key, 63_000)
             for i in range(1_200)]
    kept, _ = retention.kept(own + honest + flood, OWNER.key, pol, T0 + 600_000)
    held = {e.hash for e in kept}
    assert all(e.hash in held for e in own + honest)
    assert sum(e.size for e in kept if e.author != OWNER.key) <= pol.keep_bytes
    assert 0 < sum(e.author == ALICE.key for e in kept) < 1_200


def test_a_crowd_of_fresh_keys_cannot_wipe_other_authors():
    """34 fresh keys, each within its own rate, wiped the owner's and a subscriber's posts."""
    pol = _pol(keep=500, post="open")
    honest = [_e(T0 + i, f"1{i:031x}", BOB.key) for i in range(10)]
    own = [_e(T0 + i, f"0{i:031x}", OWNER.key) for i in range(10)]
    crowd = [_e(T0 + 1000 + i, f"c{k:02x}{i:029x}", Identity(bytes([k + 10]) * 32).key)
             for k in range(34) for i in range(60)]
    kept, _ = retention.kept(own + honest + crowd, OWNER.key, pol, T0 + 600_000)
    held = {e.hash for e in kept}
    assert all(e.hash in held for e in own + honest)
    assert len([e for e in kept if e.author != OWNER.key]) == 500
    # and the result still depends only on the set
    mixed = own + honest + crowd
    random.Random(2).shuffle(mixed)
    assert retention.kept(mixed, OWNER.key, pol, T0 + 600_000)[0] == kept


def test_floor_by_age_and_by_bytes():
    pol = _pol(keep_days=1, keep_bytes=b.MAX_RECORD)
    old = _e(T0, "a" * 32)
    new = _e(T0 + DAY, "b" * 32)
    kept, floor = retention.kept([old, new], OWNER.key, pol, T0 + DAY + 1)
    assert kept == [new] and floor == T0 + 1
    big = [_e(T0 + i, f"{i:032x}", size=20_000) for i in range(5)]
    kept, floor = retention.kept(big, OWNER.key, pol, T0 + 10)
    assert sum(e.size for e in kept) <= b.MAX_RECORD
    assert [e.ts for e in kept] == [T0 + 2, T0 + 3, T0 + 4]


def test_view_applies_edits_deletes_and_hides_in_any_order():
    p1 = b.make_post(ALICE, TOPIC, [{"k": "text", "text": "one"}], T0)
    p2 = b.make_post(BOB, TOPIC, [{"k": "text", "text": "two"}], T0 + 1)
    p3 = b.make_post(BOB, TOPIC, [{"k": "text", "text": "three"}], T0 + 2, parent=p1.hash)
    e1 = b.make_edit(ALICE, p1, [{"k": "text", "text": "one, fixed"}], T0 + 5)
    e0 = b.make_edit(ALICE, p1, [{"k": "text", "text": "one, first try"}], T0 + 4)
    forged_edit = b.make_edit(BOB, p1, [{"k": "text", "text": "pwned"}], T0 + 9)
    forged_delete = b.make_delete(BOB, p1, T0 + 9)
    d2 = b.make_delete(BOB, p2, T0 + 6)
    hide = b.make_hide(OWNER, p3, T0 + 7)
    recs = [p1, p2, p3, e1, e0, forged_edit, forged_delete, d2]
    rng = random.Random(1)
    for _ in range(5):
        rng.shuffle(recs)
        shown = view.visible(recs)
        assert [(s.hash, s.parts[0]["text"], s.edited) for s in shown] == [
            (p1.hash, "one, fixed", T0 + 5), (p3.hash, "three", 0)]
        assert shown[1].parent == p1.hash
    assert [s.hash for s in view.visible([*recs, hide])] == [p1.hash]
    # the owner hiding an edit brings back the text before it
    shown = view.visible([*recs, b.make_hide(OWNER, e1, T0 + 8)])
    assert shown[0].parts[0]["text"] == "one, first try"
