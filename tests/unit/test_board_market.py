"""The market's pure rules: needs and offers, the award order, standing, and the arbiter."""

from __future__ import annotations

import json

import pytest

from awp.board.market import (
    NO_BID,
    STANDING_MS,
    Ask,
    Bid,
    Standing,
    award_order,
    covers,
    needs_of,
    parse_tags,
)
from awp.board.queue import Arbiter, Event
from awp.wire.board import BoardError, check_record, check_tags, make_post
from awp.wire.keys import Identity

LEASE = 10_000
T0 = 1_790_000_000_000
A, B, C = (f"{i:032x}" for i in range(1, 4))


def test_tags_are_checked_folded_and_sorted():
    assert check_tags(["linux", "gpu", "gpu"], "offers") == ("gpu", "linux")
    assert parse_tags(" GPU, claude ,,linux", "--offers") == ("claude", "gpu", "linux")
    for bad in (["Has Space"], ["-x"], ["x" * 33], [1], "gpu", [f"t{i}" for i in range(17)]):
        with pytest.raises(BoardError):
            check_tags(bad, "needs")


def test_offers_must_cover_every_need():
    assert covers(("gpu", "linux"), ("gpu",))
    assert covers((), ())
    assert not covers(("linux",), ("gpu", "linux"))
    assert not covers(("gpu",), None)  # malformed needs: nobody


def test_needs_travel_in_a_signed_post_and_bad_ones_are_refused():
    me = Identity.generate()
    topic = f"{me.key}/jobs"
    rec = make_post(me, topic, [{"k": "text", "text": "x"}], T0)
    assert needs_of(rec.doc) == ()
    doc = json.loads(rec.raw)
    doc.pop("sig")
    doc["needs"] = ["gpu", "claude"]
    from awp.wire.board import sign_record

    rec = sign_record(me, doc)
    assert needs_of(check_record(rec.raw).doc) == ("claude", "gpu")
    doc["needs"] = ["GPU!"]
    with pytest.raises(BoardError, match="needs"):
        sign_record(me, doc)


def test_award_order_is_strikes_then_price_then_time_then_arrival():
    asks = [Ask("slow", "1", bid=Bid(5, 9000), seq=1), Ask("none", "2", seq=2),
            Ask("fast", "3", bid=Bid(5, 1000), seq=3), Ask("cheap", "4", bid=Bid(2, 50_000), seq=4),
            Ask("struck", "5", bid=Bid(0, 0), seq=5), Ask("tie", "6", bid=Bid(5, 1000), seq=6)]
    order = [a.who for a in award_order(asks, {"struck": 1})]
    assert order == ["cheap", "fast", "tie", "slow", "none", "struck"]
    assert Bid.check(None) == Bid(NO_BID, NO_BID) and Bid.check({"price": 3}).to_json() == {
        "price": 3}
    for bad in ({"price": -1}, {"ms": True}, [1], {"price": 1.5}):
        with pytest.raises(BoardError):
            Bid.check(bad)


def test_standing_lapses_after_a_quiet_spell():
    s = Standing()
    s.strike("w", T0)
    s.strike("w", T0 + 1000)
    assert s.strikes(T0 + STANDING_MS) == {"w": 2}  # counted from the latest strike
    assert s.strikes(T0 + 1000 + STANDING_MS) == {}
    s.strike("w", T0 + 2 * STANDING_MS)
    assert s.strikes(T0 + 2 * STANDING_MS) == {"w": 1}  # a fresh start


def _arb() -> Arbiter:
    a = Arbiter(LEASE, 3)
    a.apply(Event("add", T0, item=A, ts=T0 + 1, needs=("gpu",)))
    a.apply(Event("add", T0, item=B, ts=T0 + 2))
    a.apply(Event("add", T0, item=C, ts=T0 + 3, needs=("claude", "gpu")))
    return a


def test_a_claim_takes_the_oldest_item_its_offers_cover():
    a = _arb()
    assert a.apply(Event("claim", T0 + 5, who="cpu", req="1"))[-1].item == B
    assert a.apply(Event("claim", T0 + 6, who="cpu", req="2"))[-1].state == "empty"
    assert a.apply(Event("claim", T0 + 7, who="g", req="3", offers=("gpu",)))[-1].item == A
    assert a.apply(Event("claim", T0 + 8, who="g", req="4", offers=("gpu",)))[-1].state == "empty"
    d = a.apply(Event("claim", T0 + 9, who="both", req="5", offers=("claude", "gpu", "x")))[-1]
    assert d.item == C


def test_fails_and_expiries_are_strikes_that_survive_compaction_and_replay():
    a = _arb()
    log = [Event("claim", T0 + 5, who="w", req="1"),
           Event("fail", T0 + 6, who="w", lease=f"{B[:16]}.1"),
           Event("claim", T0 + 7, who="v", req="2"),
           Event("tick", T0 + 7 + LEASE)]  # v's lease runs out
    for ev in log:
        a.apply(ev)
    assert a.standing.strikes(T0 + 7 + LEASE) == {"w": 1, "v": 1}
    events = a.compact({A, B, C})
    b = Arbiter.replay(LEASE, 3, events)
    assert b.standing.strikes(T0 + 7 + LEASE) == {"w": 1, "v": 1}
    assert b.needs(A) == ("gpu",) and b.needs(C) == ("claude", "gpu")
    # a log row read back from JSON (lists, not tuples) replays the same
    rows = [Event(**json.loads(json.dumps(e.to_json()))) for e in events]
    assert Arbiter.replay(LEASE, 3, rows).snapshot() == b.snapshot()
