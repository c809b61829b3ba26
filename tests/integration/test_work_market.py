"""The market on real daemons: needs and offers, the award order, standing, and an owner
killed with ``kill -9`` in the middle of an award window.

alice owns the queue with a long award window (so claims sent together by the
test are decided together); bob and carol claim through their own daemons'
local API, each from its own thread, as ``awp work`` does.  A claim without a
bid from a claimant without strikes, with no window open, is decided at once
(nothing could rank below it), so the tests that need a window bid.
"""

from __future__ import annotations

import json
import threading

from nodes import wait_for
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401
from test_work import setup as work_setup

from awp.localapi.client import ApiFailure, LocalClient


def setup(homes, window: str = "1s", *names: str):
    return work_setup(homes, *names, limits={"board_award_window": window})


def post(a, text: str, *needs: str) -> str:
    args = ["post", "jobs", text, "--json"]
    if needs:
        args += ["--needs", ",".join(needs)]
    return json.loads(a.ok(*args).stdout)["post"]["hash"]


def claim(home, **body) -> dict:
    with LocalClient.for_home(home.path, 60) as c:
        try:
            return c.post("/v1/board/claim", {"topic": "alice/jobs", "timeout": 20, **body})
        except ApiFailure as e:
            return {"state": "error", "code": e.code, "message": e.message}


def together(*calls) -> list[dict]:
    """Run the claims at once, each in its own thread; their answers in order."""
    out: list = [None] * len(calls)

    def run(i, fn):
        out[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return out


def test_an_item_goes_only_to_a_worker_whose_offers_cover_its_needs(homes):
    a, (b, c) = setup(homes, "0s", "bob", "carol")
    gpu = post(a, "train", "gpu")
    r = claim(b, offers=["linux"])
    assert r["state"] == "empty"  # bob lacks gpu: the only item is not his
    r = claim(c, offers=["gpu", "linux"])
    assert r["state"] == "claimed" and r["item"]["hash"] == gpu
    plain = post(a, "anyone")
    assert claim(b, offers=["linux"])["item"]["hash"] == plain
    r = claim(b, offers=["Not A Tag"])
    assert r["state"] == "error" and "offers" in r["message"]
    bad = a.run("post", "jobs", "x", "--needs", "GPU!")
    assert bad.returncode == 1 and "needs" in bad.stderr
    q = json.loads(a.ok("queue", "jobs", "--json").stdout)
    assert {i["item"]["hash"]: i["needs"] for i in q["items"]} == {gpu: ["gpu"], plain: []}


def test_claims_in_one_window_go_to_the_best_bid_and_a_striker_loses_standing(homes):
    a, (b, c) = setup(homes, "2s", "bob", "carol")
    keys = {h.path: json.loads(h.ok("status", "--json").stdout)["key"] for h in (b, c)}
    first = post(a, "one")
    # carol asks less: she wins, whoever's claim came first
    rb, rc = together(lambda: claim(b, bid={"price": 5}), lambda: claim(c, bid={"price": 3}))
    assert rc["state"] == "claimed" and rc["item"]["hash"] == first
    assert rb["state"] == "empty"
    # at the same price the shorter expected time wins
    second = post(a, "two")
    rb, rc = together(lambda: claim(b, bid={"price": 3, "ms": 1000}),
                      lambda: claim(c, bid={"price": 3, "ms": 5000}))
    assert rb["item"]["hash"] == second and rc["state"] == "empty"
    # bob fails his item: a strike. Now he loses to carol even when he asks less.
    with LocalClient.for_home(b.path, 60) as cl:
        cl.post("/v1/board/lease", {"topic": "alice/jobs", "lease": rb["lease"], "op": "fail"})
    rb, rc = together(lambda: claim(b, bid={"price": 1}), lambda: claim(c, bid={"price": 9}))
    assert rc["item"]["hash"] == second and rb["state"] == "empty"
    q = json.loads(a.ok("queue", "jobs", "--json").stdout)
    strikes = {w["holder"]: w.get("strikes") for w in q["workers"]}
    assert strikes[keys[b.path]] == 1 and strikes[keys[c.path]] == 0


def test_a_lone_unbid_claim_is_answered_at_once_and_a_striker_waits_the_window(homes):
    """The window is 6 s; bob's first claim asks for an answer within 2 s, so it is
    claimed only when no window held it.  After a fail (a strike) his unbid claim waits
    the window, and carol's, arriving inside it, is served first."""
    a, (b, c) = setup(homes, "6s", "bob", "carol")
    first = post(a, "one")
    r = claim(b, timeout=2)
    assert r["state"] == "claimed" and r["item"]["hash"] == first, r
    with LocalClient.for_home(b.path, 60) as cl:
        cl.post("/v1/board/lease", {"topic": "alice/jobs", "lease": r["lease"], "op": "fail"})
    answers: dict = {}
    t = threading.Thread(target=lambda: answers.update(bob=claim(b)))
    t.start()
    wait_for(lambda: json.loads(a.ok("status", "--json").stdout)["board"].get(
        "claims_in_window") == 1, 30, "bob's claim waiting in alice's award window")
    answers["carol"] = claim(c)
    t.join(60)
    assert answers["carol"]["state"] == "claimed", answers
    assert answers["carol"]["item"]["hash"] == first
    assert answers["bob"]["state"] == "empty", answers


def test_an_owner_killed_mid_award_hands_each_item_to_one_claimant(homes):
    """alice dies while a window of claims is open: nothing of it was logged, so after the
    restart the claimants' retries (same req) start over and each item has one holder."""
    a, (b, c) = setup(homes, "3s", "bob", "carol")
    items = {post(a, f"item {i}") for i in range(2)}
    answers: list = []
    # bids, so each waits in the window (an unbid clean claim is decided at once)
    threads = [threading.Thread(target=lambda h=h: answers.append(
        claim(h, req=f"r-{h.path}", timeout=8, bid={"price": 1}))) for h in (b, c)]
    for t in threads:
        t.start()
    wait_for(lambda: json.loads(a.ok("status", "--json").stdout)["board"].get(
        "claims_in_window") == 2, 30, "both claims waiting in alice's award window")
    a.kill()  # kill -9
    for t in threads:
        t.join(90)
    assert all(r["state"] in ("error", "empty") for r in answers), answers  # none decided
    a.ok("up")
    for h in (b, c):
        h.ok("connect", a.address)
    again = together(lambda: claim(b, req=f"r-{b.path}", wait=30, bid={"price": 1}),
                     lambda: claim(c, req=f"r-{c.path}", wait=30, bid={"price": 1}))
    got = [r["item"]["hash"] for r in again if r["state"] == "claimed"]
    assert sorted(got) == sorted(items), again  # each item once, to one of them
    q = json.loads(a.ok("queue", "jobs", "--json").stdout)
    holders = {i["item"]["hash"]: i["holder"] for i in q["items"]}
    assert len(set(holders.values())) == 2 and all(holders.values())

