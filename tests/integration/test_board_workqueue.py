"""Work queues between real daemons: one arbiter, concurrent claimants, and kill -9."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid

from nodes import wait_for

from awp.localapi.client import ApiFailure


def _queue(owner, name: str = "jobs", n: int = 0, **policy) -> str:
    owner.api("POST", "/v1/board/topic", {"name": name, "read": "open", "post": "open",
                                          "queue": True, **policy})
    topic = f"{owner.key}/{name}"
    for i in range(n):
        owner.api("POST", "/v1/board/post", {"topic": topic,
                                             "parts": [{"k": "text", "text": f"job {i}"}]})
    return topic


def _leases(node, topic: str) -> list[dict]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return [json.loads(r[0]) for r in con.execute(
            "SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease' ORDER BY ts, hash",
            (topic,))]


def _never_held_twice(leases: list[dict]) -> dict[str, int]:
    """Per item, lease records in order never show a claim while another is current.

    Returns how many times each item was done.
    """
    holder: dict[str, str] = {}
    done: dict[str, int] = {}
    for d in leases:
        item, state = d["of"], d["state"]
        if state == "claimed":
            assert item not in holder, (f"{item} claimed while {holder.get(item)} held it: "
                                        + str([(x["ts"], x["state"], x["lease"])
                                               for x in leases if x["of"] == item]))
            holder[item] = d["lease"]
        elif state == "renewed":
            assert holder.get(item) == d["lease"]
        else:
            assert holder.pop(item, None) == d["lease"], (item, d)
            if state == "done":
                done[item] = done.get(item, 0) + 1
    return done


def test_two_daemons_claiming_at_once_each_get_different_items(make_node):
    a, b, c = (make_node(x).start() for x in "abc")
    topic = _queue(a, n=10)
    for n in (b, c):
        n.connect(a)
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    got: dict[str, list[str]] = {"b": [], "c": []}

    def work(node) -> None:
        while True:
            r = node.api("POST", "/v1/board/claim", {"topic": topic})
            if r["state"] == "empty":
                return
            got[node.name].append(r["item"]["hash"])
            node.api("POST", "/v1/board/lease", {"topic": topic, "lease": r["lease"],
                                                 "op": "complete"})

    ts = [threading.Thread(target=work, args=(n,)) for n in (b, c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    items = got["b"] + got["c"]
    assert len(items) == len(set(items)) == 10
    assert got["b"] and got["c"]
    q = a.api("GET", "/v1/board/queue", topic="jobs")
    assert q["arbiter"] and {i["status"] for i in q["items"]} == {"done"}
    assert set(_never_held_twice(_leases(a, topic)).values()) == {1}
    # a claimant sees the owner's lease records too, and the same picture
    wait_for(lambda: {i["status"] for i in b.api("GET", "/v1/board/queue", topic=topic)["items"]}
             == {"done"}, 10, "b sees every item done")


def test_rules_of_the_lease(make_node):
    a, b, c = (make_node(x).start() for x in "abc")
    topic = _queue(a, n=2, lease_s=2, attempts=2)
    for n in (b, c):
        n.connect(a)
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    first = b.api("POST", "/v1/board/claim", {"topic": topic, "req": "r1"})
    again = b.api("POST", "/v1/board/claim", {"topic": topic, "req": "r1"})
    assert again["lease"] == first["lease"]  # a retried claim is the same claim
    # someone else cannot complete b's lease
    try:
        a.api("POST", "/v1/board/lease", {"topic": "jobs", "lease": first["lease"],
                                          "op": "complete"})
        raise AssertionError("the owner completed b's lease")
    except ApiFailure as e:
        assert e.code == "refused"
    renewed = b.api("POST", "/v1/board/lease", {"topic": topic, "lease": first["lease"],
                                                "op": "renew"})
    assert renewed["state"] == "renewed" and renewed["until"] >= first["until"]
    rel = b.api("POST", "/v1/board/lease", {"topic": topic, "lease": first["lease"],
                                            "op": "release"})
    assert rel["state"] == "released"
    # the released item is handed out again; left to expire by two claimants in good
    # standing (a second expiry of b's would cost b, not the item), it is dead
    for n in (b, c):
        r = n.api("POST", "/v1/board/claim", {"topic": topic})
        assert r["item"]["hash"] == first["item"]["hash"]
        wait_for(lambda r=r: any(d["lease"] == r["lease"] and d["state"] == "expired"
                                 for d in _leases(a, topic)), 10, "the lease expires")
    q = {i["item"]["hash"]: i for i in a.api("GET", "/v1/board/queue", topic="jobs")["items"]}
    assert q[first["item"]["hash"]]["status"] == "dead"
    nxt = b.api("POST", "/v1/board/claim", {"topic": topic})
    assert nxt["item"]["hash"] != first["item"]["hash"]


def test_no_claims_while_the_owner_is_away_and_completes_wait_for_it(make_node):
    a, b = make_node("a").start(), make_node("b").start()
    topic = _queue(a, n=2, lease_s=120)
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    held = b.api("POST", "/v1/board/claim", {"topic": topic})
    a.kill()
    wait_for(lambda: not b.api("GET", "/v1/status")["board"]["links"], 10, "b sees a gone")
    try:
        b.api("POST", "/v1/board/claim", {"topic": topic})
        raise AssertionError("claimed with the owner away")
    except ApiFailure as e:
        assert e.code == "no_owner"
    kept = b.api("POST", "/v1/board/lease", {"topic": topic, "lease": held["lease"],
                                             "op": "complete"})
    assert kept["queued"]
    a.start()  # b redials it by itself: a subscription is business with the topic's owner
    wait_for(lambda: any(d["lease"] == held["lease"] and d["state"] == "done"
                         for d in _leases(a, topic)), 30, "the kept complete reaches a")


def test_kill_9_of_the_arbiter_among_concurrent_claimants_holds_no_item_twice(make_node):
    a = make_node("a").start()
    claimants = [make_node(x).start() for x in ("b", "c", "d")]
    topic = _queue(a, n=40, lease_s=4, attempts=100)
    for n in claimants:
        n.connect(a)
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    stop = threading.Event()
    completed: list[str] = []
    lock = threading.Lock()

    def work(node) -> None:
        req = uuid.uuid4().hex
        while not stop.is_set():
            try:
                r = node.api("POST", "/v1/board/claim", {"topic": topic, "req": req,
                                                         "timeout": 3})
            except ApiFailure:
                time.sleep(0.05)  # the owner is away: try again (same req: same claim)
                continue
            except OSError:
                return
            req = uuid.uuid4().hex
            if r["state"] == "empty":
                time.sleep(0.05)
                continue
            try:
                done = node.api("POST", "/v1/board/lease", {"topic": topic, "lease": r["lease"],
                                                            "op": "complete", "timeout": 3})
            except (ApiFailure, OSError):
                continue  # expired meanwhile, or refused: the item comes round again
            if done["state"] == "done":
                with lock:
                    completed.append(r["item"]["hash"])

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in claimants]
    for t in threads:
        t.start()
    wait_for(lambda: len(completed) >= 10, 60, "work under way")
    a.kill()  # kill -9, mid-claims
    a.start()
    for n in claimants:
        n.connect(a)
    try:
        wait_for(lambda: {i["status"] for i in a.api("GET", "/v1/board/queue",
                                                     topic="jobs")["items"]} == {"done"},
                 120, "every item done")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    done = _never_held_twice(_leases(a, topic))
    assert len(done) == 40 and set(done.values()) == {1}
    assert len(completed) == len(set(completed))  # no claimant was told "done" twice


def _log_rows(node) -> int:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return con.execute("SELECT count(*) FROM board_queue_log").fetchone()[0]


def test_a_claimant_flooding_the_arbiter_is_bounded(make_node):
    a = make_node("a").with_limits(board_claims_per_minute=20).start()
    b = make_node("b").start()
    topic = _queue(a, n=1)
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    held = b.api("POST", "/v1/board/claim", {"topic": topic})
    before = _log_rows(a)
    # requests that change nothing are answered and not logged
    for _ in range(5):
        assert b.api("POST", "/v1/board/claim", {"topic": topic})["state"] == "empty"
        try:
            b.api("POST", "/v1/board/lease", {"topic": topic, "lease": "nope.1",
                                              "op": "renew"})
        except ApiFailure as e:
            assert e.code == "refused"
    assert _log_rows(a) == before
    # past the limit the arbiter answers with an error and keeps nothing
    codes = []
    for _ in range(20):
        try:
            b.api("POST", "/v1/board/lease", {"topic": topic, "lease": held["lease"],
                                              "op": "renew"})
            codes.append("ok")
        except ApiFailure as e:
            codes.append(e.code)
            assert "too many queue requests" in str(e)
    assert codes.count("ok") == 20 - 11 and codes[-1] == "refused"
    assert a.api("GET", "/v1/status")["board"]["claims_refused"] == 11


def test_renews_sent_at_once_are_each_answered(make_node):
    """Asks are signed and the owner drops one it has met: two renews of one lease
    made in one millisecond must still be two asks, each answered at once."""
    a = make_node("a").start()
    b = make_node("b").start()
    topic = _queue(a, n=1)
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    held = b.api("POST", "/v1/board/claim", {"topic": topic})
    start = threading.Barrier(6)
    states: list[str] = []

    def renew() -> None:
        start.wait()
        try:
            states.append(b.api("POST", "/v1/board/lease", {
                "topic": topic, "lease": held["lease"], "op": "renew", "timeout": 5})["state"])
        except ApiFailure as e:
            states.append(e.code)

    threads = [threading.Thread(target=renew) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert states == ["renewed"] * 6


def test_the_arbiters_log_is_compacted_and_survives_kill_9(make_node):
    a = make_node("a").with_limits(board_queue_log=30).start()
    b = make_node("b").start()
    topic = _queue(a, n=10, lease_s=300)
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    rows = []
    # one holder claiming and releasing the same item: two rows a cycle, for ever
    for _ in range(40):
        r = b.api("POST", "/v1/board/claim", {"topic": topic})
        b.api("POST", "/v1/board/lease", {"topic": topic, "lease": r["lease"], "op": "release"})
        rows.append(_log_rows(a))
    for _ in range(6):
        r = b.api("POST", "/v1/board/claim", {"topic": topic})
        b.api("POST", "/v1/board/lease", {"topic": topic, "lease": r["lease"], "op": "complete"})
        rows.append(_log_rows(a))
    held = b.api("POST", "/v1/board/claim", {"topic": topic, "req": "kept"})
    assert max(rows) <= 31
    shrank = sum(1 for x, y in zip(rows, rows[1:], strict=False) if y < x)
    assert shrank >= 2  # compacted, more than once
    before = a.api("GET", "/v1/board/queue", topic="jobs")["items"]
    assert [i["status"] for i in before].count("done") == 6
    a.kill()  # kill -9: the compacted log is all it restarts from
    a.start()
    b.connect(a)
    after = a.api("GET", "/v1/board/queue", topic="jobs")["items"]
    assert after == before
    # the lease held across the restart still counts, a retried claim gets it back
    again = b.api("POST", "/v1/board/claim", {"topic": topic, "req": "kept", "timeout": 10})
    assert again["lease"] == held["lease"]
    assert b.api("POST", "/v1/board/lease", {"topic": topic, "lease": held["lease"],
                                             "op": "complete"})["state"] == "done"
    rest = []
    while (r := b.api("POST", "/v1/board/claim", {"topic": topic}))["state"] != "empty":
        rest.append(r["item"]["hash"])
        b.api("POST", "/v1/board/lease", {"topic": topic, "lease": r["lease"], "op": "complete"})
    assert len(rest) == 3  # finished items never came back as new ones
    assert _log_rows(a) <= 31
    done = _never_held_twice(_leases(a, topic))
    assert len(done) == 10 and set(done.values()) == {1}


def test_one_claimant_cannot_hold_every_item(make_node):
    """Issue 19 item 9: one claimant claimed all 10 items and never completed."""
    a = make_node("a").with_limits(board_leases_per_claimant=3).start()
    b, c = make_node("b").start(), make_node("c").start()
    topic = _queue(a, n=10, post="open")
    for n in (b, c):
        n.connect(a)
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    got, refused = [], []
    for _ in range(10):
        try:
            got.append(b.api("POST", "/v1/board/claim", {"topic": topic}))
        except ApiFailure as e:
            refused.append(str(e))
    assert len(got) == 3 and len(refused) == 7
    assert all("holds 3 leases" in r for r in refused), refused[:1]
    # others still find work, and the greedy one may claim again once it finishes one
    assert c.api("POST", "/v1/board/claim", {"topic": topic})["state"] == "claimed"
    b.api("POST", "/v1/board/lease", {"topic": topic, "lease": got[0]["lease"], "op": "complete"})
    assert b.api("POST", "/v1/board/claim", {"topic": topic})["state"] == "claimed"


def test_a_retried_complete_the_owner_committed_answers_done(make_node):
    """Issue 19 item 3: the retry of a committed complete said "no such lease"."""
    a, b = make_node("a").start(), make_node("b").start()
    topic = _queue(a, n=1, post="open")
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    held = b.api("POST", "/v1/board/claim", {"topic": topic})
    body = {"topic": topic, "lease": held["lease"], "op": "complete"}
    first = b.api("POST", "/v1/board/lease", body)
    again = b.api("POST", "/v1/board/lease", body)
    assert first["state"] == again["state"] == "done"
    assert first["item"]["hash"] == again["item"]["hash"]
    assert [rec["state"] for rec in _leases(a, topic)] == ["claimed", "done"]  # decided once


def _pending(node) -> list[tuple]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return con.execute("SELECT lease, op FROM board_pending").fetchall()


def test_a_lease_id_no_owner_hands_out_is_refused_before_it_is_kept(make_node):
    """5 MiB lease ids (and a claim's 1 KiB retry id) from a local caller are refused with
    a clear error while the owner is away, and nothing is kept to be sent to it (issue
    39.4): a kept line too long for the link would drop it on every reconnect."""
    a, b = make_node("a").start(), make_node("b").start()
    topic = _queue(a, n=1, lease_s=120)
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    try:
        b.api("POST", "/v1/board/claim", {"topic": topic, "req": "r" * 1024})
        raise AssertionError("a 1 KiB req was taken")
    except ApiFailure as e:
        assert e.code == "bad_request" and "at most 64 characters" in e.message
    a.kill()
    wait_for(lambda: not b.api("GET", "/v1/status")["board"]["links"], 10, "b sees a gone")
    for op in ("complete", "fail", "release", "renew"):
        for lease in ("x" * (5 << 20), "abc\ndef", "two words"):
            try:
                b.api("POST", "/v1/board/lease", {"topic": topic, "lease": lease, "op": op})
                raise AssertionError(f"{op} of a bad lease id was taken")
            except ApiFailure as e:
                assert e.code == "bad_request" and e.message.startswith("lease:"), e.message
                assert len(e.message) < 200
    assert _pending(b) == []
