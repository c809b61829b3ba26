"""Retry answers kept off the writer follow the lease records the owner commits."""

from __future__ import annotations

from awp.board.queue import Decision
from awp.node.queue_answers import RetryAnswers
from awp.wire.board import make_lease
from awp.wire.keys import Identity

OWNER = Identity.generate()
TOPIC = f"{OWNER.key}/jobs"
ITEM = "ab" * 16
NOW = 1_790_000_000_000
W, THIEF = Identity.generate().key, Identity.generate().key


def _rec(state: str, lease: str, until: int, holder: str = W):
    return make_lease(OWNER, TOPIC, ITEM, holder, state, lease, until, NOW)


def test_a_claim_retry_is_answered_until_its_lease_ends_or_runs_out():
    r = RetryAnswers(bound=2)
    d = Decision("claimed", ITEM, W, "L1", NOW + 1000)
    rec = _rec("claimed", "L1", NOW + 1000)
    r.claimed(TOPIC, W, "req", d, rec)
    got = r.claim(TOPIC, W, "req", NOW)
    assert got is not None and got[0].again and got[1] is rec
    assert r.claim(TOPIC, THIEF, "req", NOW) is None
    assert r.claim(TOPIC, W, "req", NOW + 1000) is None  # ran out: the arbiter decides
    r.note([_rec("renewed", "L1", NOW + 5000)])
    assert r.claim(TOPIC, W, "req", NOW + 2000)[0].until == NOW + 5000
    r.note([_rec("done", "L1", NOW + 5000)])
    assert r.claim(TOPIC, W, "req", NOW) is None
    done = r.complete(TOPIC, W, "L1")
    assert done is not None and done[0].state == "done" and done[0].again
    assert r.complete(TOPIC, THIEF, "L1") is None


def test_entries_are_bounded():
    r = RetryAnswers(bound=2)
    for i in range(5):
        r.claimed(TOPIC, W, f"q{i}", Decision("claimed", ITEM, W, f"L{i}", NOW + 9),
                  _rec("claimed", f"L{i}", NOW + 9))
        r.note([_rec("done", f"D{i}", NOW)])
    assert len(r) == 4
    assert r.claim(TOPIC, W, "q0", NOW) is None and r.claim(TOPIC, W, "q4", NOW)
