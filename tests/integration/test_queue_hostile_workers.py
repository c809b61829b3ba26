"""The queue against its own granted workers, played by a raw protocol peer (issues 40, 34).

Fail loops and hoards cost the worker's standing before they cost the items (40.1,
34.6); captured asks cannot be replayed, and a stranger's asks never push a granted
claimant's out of the owner's memory (40.3).
"""

from __future__ import annotations

import json
import sqlite3
import time

from nodes import wait_for
from rawpeer import RawPeer

from awp.wire import board as wb
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms


def _queue(owner, n: int, post: str = "open", **policy) -> str:
    owner.api("POST", "/v1/board/topic", {"name": "jobs", "read": "open", "post": post,
                                          "queue": True, **policy})
    topic = f"{owner.key}/jobs"
    for i in range(n):
        owner.api("POST", "/v1/board/post", {"topic": topic,
                                             "parts": [{"k": "text", "text": f"job {i}"}]})
    return topic


def _items(owner) -> list[dict]:
    return owner.api("GET", "/v1/board/queue", topic="jobs")["items"]


def _leases(node, topic: str) -> list[dict]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return [json.loads(r[0]) for r in con.execute(
            "SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease' ORDER BY ts, hash",
            (topic,))]


def _ask(p: RawPeer, topic: str, op: str, **body) -> dict:
    """One queue request on the raw link; the owner's ``board-lease`` answer to it."""
    sent = p.send_line({"t": "board-claim", "topic": topic, "op": op, **body})
    return p.recv_until(lambda x: x.get("t") == "board-lease" and x.get("re") == sent["id"],
                        30)


def _peer(owner, me: Identity | None = None) -> RawPeer:
    p = RawPeer(owner.address, me or Identity.generate())
    p.handshake(caps=["chat", "board"])
    p.resume()
    return p


def _claim_up_to(p, topic: str, n: int, refused: str) -> tuple[list[str], str]:
    """Up to ``n`` new leases, stopping at the first refusal (then its reason)."""
    leases = []
    for _ in range(n):
        got = _ask(p, topic, "claim", req=p.ids.next())
        if "error" in got:
            return leases, got["error"]
        leases.append(got["doc"]["lease"])
    return leases, refused


def test_a_fail_loop_stops_at_the_worker_and_kills_no_item(make_node):
    """Issue 40.1: claim 8, fail each at once, again. One attempt is used in all (the
    first fail, made in good standing); from then on the worker pays with strikes,
    and past ``board_strikes_bar`` it is awarded nothing, with the reason."""
    a = make_node("a").start()
    topic = _queue(a, n=16, attempts=3)
    refused = ""
    with _peer(a) as p:
        for _round in range(5):
            leases, refused = _claim_up_to(p, topic, 8, refused)
            for lease in leases:
                assert _ask(p, topic, "fail", lease=lease)["doc"]["state"] == "failed"
    assert "strikes" in refused and "nothing is awarded" in refused, refused
    items = _items(a)
    assert {i["status"] for i in items} == {"open"}
    assert sum(i["attempts"] for i in items) == 1
    b = make_node("b").start()
    b.connect(a)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    got = b.api("POST", "/v1/board/claim", {"topic": topic})
    assert got["state"] == "claimed"
    # every host shows the same attempts from the lease records as the arbiter does
    wait_for(lambda: sum(i["attempts"] for i in b.api("GET", "/v1/board/queue",
                                                       topic=topic)["items"]) == 1,
             10, "b counts one attempt")


def test_a_hoarder_whose_leases_run_out_kills_no_item(make_node):
    """Issue 34.6: 8 leases taken and never renewed, round after round (2 s leases).
    The expiries are strikes; they cost one attempt in all, and the hoarder is
    refused once past the bar."""
    a = make_node("a").start()
    topic = _queue(a, n=8, lease_s=2, attempts=3)
    refused = ""
    with _peer(a) as p:
        for _round in range(4):
            leases, refused = _claim_up_to(p, topic, 8, refused)
            wait_for(lambda ls=leases: {d["lease"] for d in _leases(a, topic)
                                        if d["state"] == "expired"} >= set(ls),
                     20, "the hoard expires")
    assert "strikes" in refused, refused
    assert {i["status"] for i in _items(a)} == {"open"}
    assert sum(i["attempts"] for i in _items(a)) == 1


def test_a_replayed_ask_is_never_decided_again_whatever_strangers_send(make_node):
    """Issue 40.3: a host between carries worker W's signed asks. After W's claim and
    complete, it sends 4,200 asks signed by fresh ungranted keys (they used to push W's
    asks out of the owner's memory), then W's claim ask again: nothing is decided."""
    a = make_node("a").start()
    topic = _queue(a, n=3, post="grant")
    w = Identity.generate()
    a.api("POST", "/v1/board/grant", {"topic": "jobs", "peer": w.key, "what": "post"})
    with _peer(a) as p:  # the host in between: itself not granted
        claim = wb.make_ask(w, topic, "claim", now_ms(), req="r1")
        got = _ask(p, topic, "claim", req="r1", ask=claim)
        lease = got["doc"]["lease"]
        assert got["doc"]["holder"] == w.key
        done = wb.make_ask(w, topic, "complete", now_ms(), lease=lease)
        assert _ask(p, topic, "complete", lease=lease, ask=done)["doc"]["state"] == "done"
        t = now_ms()
        for i in range(4200):
            s = Identity.generate()
            p.send_line({"t": "board-claim", "topic": topic, "op": "claim", "req": f"s{i}",
                         "ask": wb.make_ask(s, topic, "claim", t, req=f"s{i}")})
        last = _ask(p, topic, "claim", req="x", ask=wb.make_ask(
            Identity.generate(), topic, "claim", now_ms(), req="x"))
        assert "no grant" in last["error"]
        p.send_line({"t": "board-claim", "topic": topic, "op": "claim", "req": "r1",
                     "ask": claim})  # the replay
        # W's next real ask is decided: by then the replay was met and dropped
        fresh = _ask(p, topic, "claim", req="r2",
                     ask=wb.make_ask(w, topic, "claim", now_ms(), req="r2"))
        assert fresh["doc"]["state"] == "claimed"
        claims = [d for d in _leases(a, topic)
                  if d["state"] == "claimed" and d["holder"] == w.key]
        assert len(claims) == 2, claims  # r1 and r2: the replay took nothing
        # an ask dated outside the window is refused, and says why
        old = _ask(p, topic, "claim", req="r3",
                   ask=wb.make_ask(w, topic, "claim", now_ms() - 400_000, req="r3"))
        assert "board_ask_window" in old["error"]
    assert a.proc.poll() is None


def test_retries_are_answered_without_reading_the_topic(make_node):
    """Issue 34.5: a retried claim (and complete) used to read and parse every record of
    the topic inside the writer's transaction. On a topic of 3,000 records, 300 retries
    of one claim and 300 of one complete now cost next to nothing, the owner's own post
    meanwhile is not held, and after kill -9 (nothing kept in memory) a retry still gets
    the record first announced, looked up by the item."""
    a = make_node("a").with_limits(board_claims_per_minute=100000).start()
    topic = _queue(a, n=2, keep=100000, rate=6000)
    first = _items(a)[0]["item"]["hash"]
    for i in range(3000):
        a.api("POST", "/v1/board/post", {"topic": topic, "parent": first,
                                         "parts": [{"k": "text", "text": f"note {i}"}]})
    me = Identity.generate()
    with _peer(a, me) as p:
        got = _ask(p, topic, "claim", req="r1")
        lease = got["doc"]["lease"]
        other = _ask(p, topic, "claim", req="r2")["doc"]["lease"]
        assert _ask(p, topic, "complete", lease=other)["doc"]["state"] == "done"
        t0 = time.monotonic()
        ids = []
        for i in range(600):
            body = ({"op": "claim", "req": "r1"} if i % 2 else {"op": "complete", "lease": other})
            ids.append(p.send_line({"t": "board-claim", "topic": topic, **body})["id"])
        t_post = time.monotonic()
        a.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text",
                                                                    "text": "owner's post"}]})
        post_s = time.monotonic() - t_post
        answers = {}
        while len(answers) < len(ids):
            x = p.recv_until(lambda x: x.get("t") == "board-lease" and x.get("re") in ids, 60)
            answers[x["re"]] = x
        spent = time.monotonic() - t0
        assert all(x["doc"]["lease"] in (lease, other) for x in answers.values())
        assert spent < 4.0 and post_s < 1.0, (spent, post_s)
    a.kill()
    a.start()
    with _peer(a, me) as p:
        again = _ask(p, topic, "claim", req="r1")
        assert again["doc"] == got["doc"]  # the very record first announced
        done = _ask(p, topic, "complete", lease=other)
        assert done["doc"]["state"] == "done" and done["doc"]["lease"] == other


def test_a_peers_queue_work_is_bounded_by_what_it_costs_the_writer(make_node):
    """``limits.board_queue_seconds``: past its share of the writer's time in a minute,
    a peer's queue requests are refused with the reason, however few they were."""
    a = make_node("a").with_limits(board_queue_seconds=0.000001).start()
    topic = _queue(a, n=4)
    with _peer(a) as p:
        first = _ask(p, topic, "claim", req="r1")
        assert first["doc"]["state"] == "claimed"
        over = _ask(p, topic, "claim", req="r2")
        assert "board_queue_seconds" in over["error"], over
    assert _items(a)[1]["status"] == "open"
