"""The queue arbiter: one winner per item under any interleaving, and the same after a crash."""

from __future__ import annotations

import random

import pytest

from awp.board.queue import Arbiter, Decision, Event

LEASE = 10_000
T0 = 1_790_000_000_000
ITEMS = [f"{i:032x}" for i in range(1, 9)]
HASHES = [f"{i:02x}" * 16 for i in range(1, 9)]  # distinct leading bytes: distinct lease ids


def _arb(items=ITEMS, attempts=3):
    a = Arbiter(LEASE, attempts)
    for i, h in enumerate(items):
        a.apply(Event("add", T0, item=h, ts=T0 + i))
    return a


def test_claims_go_oldest_first_one_each():
    a = _arb()
    got = [a.apply(Event("claim", T0 + 1, who=f"w{i}", req=f"r{i}"))[-1] for i in range(9)]
    assert [d.item for d in got[:8]] == ITEMS
    assert len({d.holder for d in got[:8]}) == 8
    assert got[8] == Decision("empty")


def test_a_retried_claim_gets_the_same_answer():
    a = _arb()
    d1 = a.apply(Event("claim", T0 + 1, who="w", req="r1"))[-1]
    d2 = a.apply(Event("claim", T0 + 2, who="w", req="r1"))[-1]
    assert d1 == d2 and a.status(ITEMS[1]) == "open"
    d3 = a.apply(Event("claim", T0 + 3, who="other", req="r1"))[-1]  # same req, other key
    assert d3.item == ITEMS[1]


def test_only_the_holder_before_expiry():
    a = _arb()
    d = a.apply(Event("claim", T0, who="w", req="1"))[-1]
    assert a.apply(Event("complete", T0 + 1, who="thief", lease=d.lease))[-1].state == "refused"
    assert a.apply(Event("renew", T0 + LEASE - 1, who="w", lease=d.lease))[-1].until == (
        T0 + 2 * LEASE - 1)
    out = a.apply(Event("complete", T0 + 2 * LEASE, who="w", lease=d.lease))
    assert [x.state for x in out] == ["expired", "refused"]  # too late: the lease ran out
    d2 = a.apply(Event("claim", T0 + 2 * LEASE, who="v", req="1"))[-1]
    assert (d2.item, d2.holder) == (ITEMS[0], "v") and d2.lease != d.lease
    assert a.apply(Event("complete", T0 + 2 * LEASE + 1, who="v", lease=d2.lease))[-1].state \
        == "done"
    assert a.status(ITEMS[0]) == "done"
    # a stale lease of a finished item is refused, never reopens it
    assert a.apply(Event("release", T0 + 2 * LEASE + 2, who="w", lease=d.lease))[-1].state \
        == "refused"


def test_failures_cost_attempts_release_does_not():
    """Each of two workers in good standing pays one attempt; a release pays none."""
    a = _arb(items=ITEMS[:1], attempts=2)
    d = a.apply(Event("claim", T0, who="w", req="1"))[-1]
    a.apply(Event("release", T0 + 1, who="w", lease=d.lease))
    d = a.apply(Event("claim", T0 + 2, who="w", req="2"))[-1]
    a.apply(Event("fail", T0 + 3, who="w", lease=d.lease))
    d = a.apply(Event("claim", T0 + 4, who="v", req="3"))[-1]
    assert d.state == "claimed"
    assert a.apply(Event("tick", T0 + 4 + LEASE))[0].state == "expired"
    assert a.status(ITEMS[0]) == "dead"
    assert a.apply(Event("claim", T0 + 5 + LEASE, who="u", req="4"))[-1].state == "empty"


def test_a_fail_loop_costs_the_workers_standing_not_the_items():
    """Issue 40.1: claim 8, fail each at once, again and again. Only the first fail,
    made in good standing, costs an attempt; once its strikes reach the bar the
    worker is awarded nothing until they lapse, and an honest worker finds every item
    alive."""
    a = _arb(HASHES, attempts=3)
    now, refused = T0, None
    for _round in range(10):
        leases = []
        for i in range(8):
            now += 1
            d = a.apply(Event("claim", now, who="m", req=f"{now}.{i}"))[-1]
            if d.state == "refused":
                refused = d
                break
            leases.append(d.lease)
        for lease in leases:
            now += 1
            a.apply(Event("fail", now, who="m", lease=lease))
            last = now
    assert refused is not None and "strikes on this queue" in refused.why
    assert "until" in refused.why
    assert sum(it["attempts"] for it in a.snapshot()) == 1
    assert {it["status"] for it in a.snapshot()} == {"open"}
    got = [a.apply(Event("claim", now + 1, who="honest", req=f"h{i}"))[-1] for i in range(8)]
    assert [d.item for d in got] == HASHES
    # the bar lasts until the strikes lapse, then the worker is served again
    from awp.board.market import STANDING_MS
    for d in got[:-1]:
        a.apply(Event("complete", now + 2, who="honest", lease=d.lease))
    a.apply(Event("release", now + 2, who="honest", lease=got[-1].lease))
    assert a.apply(Event("claim", last + STANDING_MS - 1, who="m", req="x"))[-1].state \
        == "refused"
    assert a.apply(Event("claim", last + STANDING_MS, who="m", req="y"))[-1].item == HASHES[-1]


def test_a_hoarder_whose_leases_expire_pays_with_its_standing():
    """Issue 34.6: one claimant takes 8 items and never renews, twice. The 16 expiries
    are 16 strikes but one attempt (the first, in good standing); past the bar (10)
    it is refused."""
    a = _arb(HASHES, attempts=3)
    assert a.bar == 10
    for rnd in range(2):
        t = T0 + rnd * 2 * LEASE
        for i in range(8):
            assert a.apply(Event("claim", t + i, who="h", req=f"{rnd}.{i}"))[-1].state \
                == "claimed"
        out = a.apply(Event("tick", t + 8 + LEASE))
        assert [d.state for d in out] == ["expired"] * 8
    assert [it["attempts"] for it in a.snapshot()] == [1] + [0] * 7
    assert a.standing.count("h", T0 + 3 * LEASE) == 16
    assert a.apply(Event("claim", T0 + 3 * LEASE, who="h", req="9"))[-1].state == "refused"
    # bar 0: never barred, yet the items still pay only for good standing
    b = _arb(HASHES, attempts=3)
    b.bar = 0
    for rnd in range(5):
        t = T0 + rnd * 2 * LEASE
        for i in range(8):
            assert b.apply(Event("claim", t + i, who="h", req=f"{rnd}.{i}"))[-1].state \
                == "claimed"
        b.apply(Event("tick", t + 8 + LEASE))
    assert {it["status"] for it in b.snapshot()} == {"open"}
    assert sum(it["attempts"] for it in b.snapshot()) == 1


def test_an_item_that_fails_for_every_worker_still_dies():
    """A poison item: three workers in good standing each fail it once, and it is dead."""
    a = _arb(items=HASHES[:1], attempts=3)
    for i, w in enumerate(("u", "v", "w")):
        d = a.apply(Event("claim", T0 + 2 * i, who=w, req="1"))[-1]
        assert d.state == "claimed"
        a.apply(Event("fail", T0 + 2 * i + 1, who=w, lease=d.lease))
    assert a.status(HASHES[0]) == "dead"


def test_a_withdrawn_item_is_never_handed_out_and_its_lease_ends():
    a = _arb(items=ITEMS[:2])
    d = a.apply(Event("claim", T0, who="w", req="1"))[-1]
    out = a.apply(Event("remove", T0 + 1, item=d.item))
    assert [(x.state, x.lease) for x in out] == [("released", d.lease)]
    assert a.status(d.item) == "dead"
    assert a.apply(Event("complete", T0 + 2, who="w", lease=d.lease))[-1].state == "refused"
    a.apply(Event("remove", T0 + 2, item=ITEMS[1]))
    assert a.apply(Event("claim", T0 + 3, who="v", req="1"))[-1].state == "empty"
    assert a.apply(Event("remove", T0 + 4, item="f" * 32)) == []


def test_clock_never_goes_back():
    a = _arb(items=ITEMS[:1])
    d = a.apply(Event("claim", T0 + 5 * LEASE, who="w", req="1"))[-1]
    # an event stamped earlier (a clock step) does not revive time before the claim
    assert a.apply(Event("renew", T0, who="w", lease=d.lease))[-1].until == T0 + 6 * LEASE


def _random_run(seed: int, n_events: int = 400):
    rng = random.Random(seed)
    items = [f"{rng.getrandbits(128):032x}" for _ in range(rng.randrange(1, 12))]
    workers = [f"w{i}" for i in range(rng.randrange(1, 6))]
    a = Arbiter(LEASE, rng.randrange(1, 4))
    now = T0
    held: dict[str, list[str]] = {w: [] for w in workers}
    leases_seen: list[Decision] = []
    decisions: list[list[Decision]] = []
    for i in range(n_events):
        now += rng.choice([0, 0, 1, 50, LEASE // 3, LEASE])
        if rng.random() < 0.03:
            now -= rng.randrange(LEASE)  # a clock step backwards
        w = rng.choice(workers)
        op = rng.choice(["add", "claim", "claim", "claim", "renew", "release", "complete",
                         "fail", "tick", "remove"])
        lease = rng.choice(held[w] or [""]) if rng.random() < 0.8 else rng.choice(
            [d.lease for d in leases_seen] or ["nope"])
        if op in ("add", "remove"):
            ev = Event(op, now, item=rng.choice(items), ts=rng.randrange(T0, T0 + 100))
        elif op == "claim":
            ev = Event("claim", now, who=w, req=str(rng.randrange(i + 1)))
        else:
            ev = Event(op, now, who=w, lease=lease)
        out = a.apply(ev)
        decisions.append(out)
        for d in out:
            if d.state == "claimed":
                held[d.holder].append(d.lease)
                leases_seen.append(d)
        yield a, ev, out


@pytest.mark.parametrize("seed", range(60))
def test_any_interleaving_keeps_one_holder_per_item_and_replays_identically(seed):
    active: dict[str, Decision] = {}  # item -> the lease we believe active
    finished: set[str] = set()
    dead_or_done: set[str] = set()
    all_out, log = [], []
    a = None
    for a, ev, out in _random_run(seed):
        all_out.append(out)
        log.append(ev)
        for d in out:
            if d.again:  # a retry answered again: it decided nothing new
                continue
            if d.state == "claimed":
                prev = active.get(d.item)
                assert prev is None or prev.lease == d.lease, "two holders for one item"
                assert d.item not in dead_or_done, "a finished item was handed out again"
                active[d.item] = d
            elif d.state in ("released", "failed", "expired", "done"):
                assert active.get(d.item) is not None and active[d.item].lease == d.lease
                assert active[d.item].holder == d.holder
                del active[d.item]
                if d.state == "done":
                    assert d.item not in finished, "an item completed twice"
                    finished.add(d.item)
                    dead_or_done.add(d.item)
            elif d.state == "renewed":
                assert active[d.item].lease == d.lease and active[d.item].holder == d.holder
        for item in a.items():
            if a.status(item) == "dead":
                dead_or_done.add(item)
        # what the arbiter reports agrees with what it said
        for item, d in active.items():
            assert a.holder_of(item) in (d.holder, "")  # "" only when expiry is due next event
    assert a is not None
    # kill -9 and restart: the log replayed gives the same state and the same answers
    again = Arbiter(a.lease_ms, a.attempts)
    replayed = [again.apply(ev) for ev in log]
    assert replayed == all_out
    assert [again.status(i) for i in again.items()] == [a.status(i) for i in a.items()]


def test_concurrent_claimants_without_failures_each_item_claimed_exactly_once():
    rng = random.Random(11)
    items = [f"{i:032x}" for i in range(500)]
    a = _arb(items=items)
    claimants = [f"host{i}" for i in range(100)]
    won: dict[str, str] = {}
    pending = list(claimants)
    now = T0
    while pending:
        rng.shuffle(pending)  # the order requests reach the arbiter over many links
        w = pending.pop()
        now += 1
        d = a.apply(Event("claim", now, who=w, req=f"{w}-{now}"))[-1]
        if d.state == "empty":
            continue
        assert d.item not in won
        won[d.item] = w
        assert a.apply(Event("complete", now, who=w, lease=d.lease))[-1].state == "done"
        pending.append(w)
    assert sorted(won) == items


@pytest.mark.parametrize("seed", range(40))
def test_a_compacted_log_replays_into_an_arbiter_that_answers_the_same(seed):
    cut = random.Random(1000 + seed).randrange(50, 350)
    b = None
    for n, (a, ev, out) in enumerate(_random_run(seed)):
        if b is not None:
            assert b.apply(ev) == out, f"after compaction, {ev} was answered differently"
            assert b.snapshot() == a.snapshot()
        elif n >= cut and len(a):
            events = a.compact(set(a.items()))
            restores = [e for e in events if e.op == "restore"]
            assert len(restores) == len(a) and {e.op for e in events} <= {"restore", "standing"}
            b = Arbiter.replay(a.lease_ms, a.attempts, events)
            assert b.snapshot() == a.snapshot() and b.next_expiry() == a.next_expiry()
            assert b.standing.strikes(a._clock) == a.standing.strikes(a._clock)
    assert b is not None


def test_compaction_forgets_finished_items_whose_post_is_gone_but_not_a_current_lease():
    a = _arb(items=ITEMS[:4], attempts=1)
    done = a.apply(Event("claim", T0, who="w", req="1"))[-1]
    a.apply(Event("complete", T0 + 1, who="w", lease=done.lease))
    held = a.apply(Event("claim", T0 + 2, who="w", req="2"))[-1]
    a.apply(Event("remove", T0 + 3, item=ITEMS[2]))
    events = a.compact({ITEMS[3]})  # only the last item's post is still held
    assert [e.item for e in events] == [held.item, ITEMS[3]]
    for arb in (a, Arbiter.replay(LEASE, 1, events)):
        assert arb.status(done.item) == "unknown" and arb.status(ITEMS[2]) == "unknown"
        assert arb.holder_of(held.item) == "w" and arb.status(ITEMS[3]) == "open"
        # the holder can still finish, a retried claim still gets its lease back
        again = arb.apply(Event("claim", T0 + 4, who="w", req="2"))[-1]
        assert (again.lease, again.again) == (held.lease, True)
        assert arb.apply(Event("complete", T0 + 5, who="w", lease=held.lease))[-1].state == "done"
        # a stale lease of a forgotten item is refused, as before
        assert arb.apply(Event("release", T0 + 6, who="w", lease=done.lease))[-1].state \
            == "refused"



def test_a_retried_complete_answers_done_after_replay_and_compaction():
    """Issue 19 item 3: a complete the owner committed, retried because its answer was
    lost, answered "no such lease" and the claimant took it as lost work."""
    items = ["a" * 32, "b" * 32]  # lease ids start with the item's hash
    log = [Event("add", T0, item=h, ts=T0 + i) for i, h in enumerate(items)]
    a = Arbiter.replay(LEASE, 3, log)
    log.append(Event("claim", T0 + 1, who="w", req="r"))
    d = a.apply(log[-1])[-1]
    log.append(Event("complete", T0 + 2, who="w", lease=d.lease))
    assert a.apply(log[-1])[-1].state == "done"
    again = Event("complete", T0 + 3, who="w", lease=d.lease)
    compacted = Arbiter.replay(LEASE, 3, a.compact(set(items)))
    for arb in (a, Arbiter.replay(LEASE, 3, log), compacted):
        answer = arb.apply(again)[-1]
        assert (answer.state, answer.item, answer.again) == ("done", d.item, True)
        # only the holder hears it; a release or fail of that lease is still refused
        assert arb.apply(Event("complete", T0 + 4, who="x", lease=d.lease))[-1].state == "refused"
        assert arb.apply(Event("fail", T0 + 4, who="w", lease=d.lease))[-1].state == "refused"
        assert arb.status(d.item) == "done"


def test_leases_held_are_counted_per_claimant():
    a = _arb([f"{i:x}" * 32 for i in range(1, 9)])  # lease ids start with the item's hash
    for i in range(3):
        a.apply(Event("claim", T0 + 1, who="w", req=f"r{i}"))
    a.apply(Event("claim", T0 + 1, who="v", req="r"))
    assert a.held_by("w") == 3 and a.held_by("v") == 1 and a.held_by("z") == 0
    assert a.retry_of("w", "r0") and not a.retry_of("w", "r9")
    a.apply(Event("tick", T0 + 1 + LEASE))
    assert a.held_by("w") == 0
