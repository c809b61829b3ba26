"""The owner as sequencer, the pure parts: its admission rule, holes in the seqs, the
signed stamp and refusal (SPEC.md section 14, "The owner stamps")."""

from __future__ import annotations

import json

import pytest

from awp.board import sequencer as sq
from awp.board.perms import TOO_EARLY
from awp.wire import board as b
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
G = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"


def _post(ts: int, who: Identity = G) -> b.Record:
    return b.make_post(who, TOPIC, [{"k": "text", "text": "x"}], ts)


def test_the_owner_admits_by_its_clock_and_the_rate_on_arrival():
    pol = b.check_policy(b.make_topic(OWNER, "ops", 1, T0, post="open", rate=3).doc)
    assert sq.admission(_post(T0 - 20 * 86_400_000), pol, T0, arrived=0) == ""
    assert sq.admission(_post(T0), pol, T0, arrived=3) == sq.OVER_RATE
    assert sq.admission(_post(T0 + 10 * 60_000), pol, T0, arrived=0) == TOO_EARLY
    closed = b.check_policy(b.make_topic(
        OWNER, "ops", 2, T0, members=[{"key": G.key, "can": "post",
                                       "until": format_ts(T0)}]).doc)
    assert sq.admission(_post(T0 - 60_000), closed, T0, arrived=0) == "no grant to post here"
    assert not sq.final(sq.OVER_RATE) and not sq.final(TOO_EARLY)
    assert sq.final("no grant to post here") and sq.final("author is banned from this topic")


def test_holes_open_on_a_skipped_seq_and_close_when_it_comes():
    h = sq.Holes()
    assert not h.saw(1) and not h.saw(2)
    assert h.saw(5) and h.missing == {3, 4} and h.top == 5
    assert not h.saw(3) and h.missing == {4}
    assert not h.saw(2) and h.behind(7) == 2 and h.behind(4) == 0
    far = sq.Holes(top=1)
    assert far.saw(1 + 3 * sq.MAX_HOLES) and len(far.missing) == sq.MAX_HOLES  # bounded


def test_a_stamp_names_one_record_and_only_the_owner_signs_one():
    p = _post(T0)
    st = b.make_stamp(OWNER, TOPIC, p.hash, 7, T0 + 5)
    assert (st.kind, st.of, st.doc["seq"], st.ts, st.author) == ("stamp", p.hash, 7, T0 + 5,
                                                                OWNER.key)
    assert b.verify_record(b.parse_unverified(st.raw))
    with pytest.raises(b.BoardError, match="signed by the topic's owner"):
        b.make_stamp(G, TOPIC, p.hash, 1, T0)
    for seq in (0, -1, True, 2 ** 53, "1"):
        doc = dict(st.doc, seq=seq)
        with pytest.raises(b.BoardError, match="seq"):
            b.check_record(json.dumps(doc))


def test_a_refusal_is_the_owners_and_cannot_be_changed():
    r = b.make_refusal(OWNER, TOPIC, "a" * 32, "no grant to post here", False, T0)
    assert b.check_refusal(r) is r
    for bad in (dict(r, later=True), dict(r, of="b" * 32), dict(r, author=G.key)):
        with pytest.raises(b.BoardError):
            b.check_refusal(bad)
    forged = b.make_refusal(G, TOPIC, "a" * 32, "x", False, T0)
    forged["author"] = OWNER.key
    with pytest.raises(b.BoardError):
        b.check_refusal(forged)


def test_missing_seqs_stay_shown_until_they_come_or_the_owners_head_explains_them():
    from awp.board.sequencer import Holes

    h = Holes()
    h.saw(1)
    assert h.saw(5) and h.missing == {2, 3, 4}
    h.asked |= h.missing  # every peer was asked: still missing, and shown as such
    assert h.missing == {2, 3, 4} and not h.missing - h.asked
    h.saw(3)
    assert h.missing == {2, 4} and h.asked == {2, 4}
    h.saw(9)
    assert h.missing - h.asked == {6, 7, 8}  # new holes are asked for, old ones are not again
    h.explained(6)  # the owner's head: we hold all it holds up to seq 6
    assert h.missing == {7, 8} and h.asked == set()
