"""Trust no one, the owner included (issue 34 items 1-3, issue 40 item 4).

The "owner" here is a raw peer that signs its topic's records by hand, so it
can do what an honest daemon never does: stamp a post in someone else's
name, stamp two records with one seq, sign heads and then fall silent.  The
host under test is a real daemon (carol); what she keeps, shows and logs is
checked through her local API, her CLI and her log.
"""

from __future__ import annotations

import subprocess
import sys

from nodes import wait_for
from rawpeer import RawPeer

from awp.board.sync import Holdings, opening
from awp.wire import board as wb
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms

DAY = 86_400_000


def _feeder(node, topic: str, doc: wb.Record) -> RawPeer:
    p = RawPeer(node.address, Identity.generate())
    p.handshake(caps=["chat", "board"])
    p.resume()
    p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
    p.send_line({"t": "board-topic", "hops": 0, "doc": doc.doc})
    return p


def _posts(p: RawPeer, topic: str, recs: list[wb.Record]) -> None:
    p.send_line({"t": "board-posts", "topic": topic, "hops": 0, "recs": [r.doc for r in recs]})


def _head(p: RawPeer, head: dict) -> None:
    p.send_line({"t": "board-head", "hops": 0, "doc": head})


def _topic(node, topic: str) -> dict:
    return node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["topic"]


def _texts(node, topic: str) -> list[str]:
    return [p["text"] for p in node.api("POST", "/v1/board/get", {"topic": topic})["posts"]]


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "awp", args[0], "--home", node.home, *args[1:]],
                          capture_output=True, text=True, timeout=60)


def _setup(make_node, **limits):
    owner = Identity.generate()
    topic = f"{owner.key}/ops"
    t0 = now_ms()
    doc = wb.make_topic(owner, "ops", 1, t0 - 5000, read="open", post="open")
    carol = make_node("c")
    if limits:
        carol.with_limits(**limits)
    carol.start()
    carol.api("POST", "/v1/board/subscribe", {"topic": topic})
    return owner, topic, t0, doc, carol


def test_an_owner_cannot_publish_in_another_authors_name(make_node):
    owner, topic, t0, doc, carol = _setup(make_node)
    me = carol.api("GET", "/v1/status")["key"]
    alice = Identity.generate()
    # "carol's" post: carol's key as author, a signature that is not hers
    mine = wb.make_post(alice, topic, [{"k": "text", "text": "forged in carol's name"}], t0)
    body = dict(mine.doc, author=me)
    forged = wb.parse_unverified(wb.canonical_bytes(body).decode(), lambda *a: None)
    honest = wb.make_post(alice, topic, [{"k": "text", "text": "alice's own"}], t0 + 1)
    with _feeder(carol, topic, doc) as p:
        _posts(p, topic, [wb.make_stamp(owner, topic, forged.hash, 1, t0 + 2), forged,
                          wb.make_stamp(owner, topic, honest.hash, 2, t0 + 3), honest])
        wait_for(lambda: "alice's own" in _texts(carol, topic), 20, "the honest post at carol")
        assert _texts(carol, topic) == ["alice's own"]
        assert "forged in carol's name" not in _cli(carol, "get", topic).stdout


def test_an_owner_that_equivocates_is_caught_shown_and_logged(make_node):
    owner, topic, t0, doc, carol = _setup(make_node)
    alice, bob = Identity.generate(), Identity.generate()
    a = wb.make_post(alice, topic, [{"k": "text", "text": "a"}], t0)
    b = wb.make_post(bob, topic, [{"k": "text", "text": "b"}], t0 + 1)
    with _feeder(carol, topic, doc) as p:
        _posts(p, topic, [wb.make_stamp(owner, topic, a.hash, 1, t0 + 2), a])
        wait_for(lambda: _texts(carol, topic) == ["a"], 20, "a at carol")
        assert _topic(carol, topic)["equivocated"] is None
        # seq 1 again, for another record; then a stamped a second time
        _posts(p, topic, [wb.make_stamp(owner, topic, b.hash, 1, t0 + 3), b])
        _posts(p, topic, [wb.make_stamp(owner, topic, a.hash, 5, t0 + 4), a])
        wait_for(lambda: (_topic(carol, topic)["equivocated"] or {}).get("n") == 2, 20,
                 "both proofs kept")
    eq = _topic(carol, topic)["equivocated"]
    assert eq["kinds"] == ["seq", "stamp"]
    shown = _cli(carol, "topics")
    assert "owner equivocated" in shown.stdout, shown
    got = _cli(carol, "get", topic)
    assert got.returncode == 0 and "owner equivocated" in got.stderr, got
    assert "owner equivocated" in _cli(carol, "topic", "show", topic).stdout
    wait_for(lambda: "equivocated" in carol.tail_log(200), 10, "the log says so")
    page = carol.api("GET", "/v1/status")["board"]
    assert page["equivocations"] == 2


def test_a_relay_that_freezes_makes_the_topic_stale_and_another_path_revives_it(make_node):
    owner, topic, t0, doc, carol = _setup(make_node, board_stale_heads=3)
    every = 400  # the owner promises a head at least every 0.4 s
    floor = t0 - 30 * DAY
    post = wb.make_post(owner, topic, [{"k": "text", "text": "p0"}], t0 - 100)
    held = Holdings([(post.ts, post.hash)])

    def head(ts: int) -> dict:
        return wb.make_head(owner, topic, ts, 1, floor, opening(held, floor, ts, 0)["ranges"],
                            0, every)

    relay = _feeder(carol, topic, doc)
    with relay:
        _posts(relay, topic, [post])
        _head(relay, head(now_ms()))
        wait_for(lambda: _topic(carol, topic)["head"] is not None, 20, "the head at carol")
        # then nothing at all: past three heads' worth carol says her view is stale
        wait_for(lambda: _topic(carol, topic)["stale"] is not None, 20, "carol sees staleness")
        st = _topic(carol, topic)["stale"]
        assert st["via"] == relay.identity.key and st["heads"] >= 3
        assert "stale via" in _cli(carol, "topics").stdout
        wait_for(lambda: "is stale via" in carol.tail_log(200), 10, "the log says so")
        # another path: dave has a fresh head from the owner; carol asks every peer
        dave = make_node("d").start()
        dave.api("POST", "/v1/board/subscribe", {"topic": topic})
        with _feeder(dave, topic, doc) as p2:
            _posts(p2, topic, [post])
            _head(p2, head(now_ms() + 60_000))  # fresh for the rest of the test
            wait_for(lambda: _topic(dave, topic)["head"] is not None, 20, "dave's head")
            carol.connect(dave)
            wait_for(lambda: _topic(carol, topic)["stale"] is None, 20, "fresh again via dave")
    assert carol.api("GET", "/v1/status")["board"]["heads_stale"] >= 1


def test_an_old_head_is_ignored_even_after_a_restart(make_node):
    owner, topic, t0, doc, carol = _setup(make_node)
    floor = t0 - 30 * DAY
    posts = [wb.make_post(owner, topic, [{"k": "text", "text": f"p{i}"}], t0 - 900 + i)
             for i in range(3)]
    new = wb.make_head(owner, topic, t0, 1, floor, opening(
        Holdings((r.ts, r.hash) for r in posts), floor, t0, 0)["ranges"])
    old = wb.make_head(owner, topic, t0 - 800, 1, floor, opening(
        Holdings((r.ts, r.hash) for r in posts[:1]), floor, t0 - 800, 0)["ranges"])
    with _feeder(carol, topic, doc) as p:
        _posts(p, topic, posts[:1])  # a relay that withholds two, with the head naming them
        _head(p, new)
        wait_for(lambda: (_topic(carol, topic)["head"] or {}).get("missing") == 2, 20,
                 "carol tells the gap")
        _head(p, old)  # a replay of an older head, which names only what she holds
        wait_for(lambda: carol.api("GET", "/v1/status")["board"]["heads_old"] == 1, 10,
                 "the old head counted")
        assert _topic(carol, topic)["head"]["missing"] == 2
    wait_for(lambda: "older head" in carol.tail_log(200), 10, "the log says so")
    carol.kill()
    carol.start()
    with _feeder(carol, topic, doc) as p:
        _head(p, old)
        wait_for(lambda: carol.api("GET", "/v1/status")["board"]["heads_old"] == 1, 10,
                 "the old head refused after the restart too")
        t = _topic(carol, topic)
        assert t["head"]["ts"] == new["ts"] and t["head"]["missing"] == 2
