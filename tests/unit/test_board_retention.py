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


def test_floor_by_count_keeps_ties_together():
    pol = _pol(keep=3)
    es = [_e(T0, "a" * 32), _e(T0 + 1, "b" * 32), _e(T0 + 1, "c" * 32), _e(T0 + 2, "d" * 32),
          _e(T0 + 3, "e" * 32)]
    kept, floor = retention.kept(es, OWNER.key, pol, T0 + 10)
    assert floor == T0 + 1
    assert [e.hash[0] for e in kept] == ["b", "c", "d", "e"]  # both T0+1 records stay


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
