"""A relay that withholds records or the owner's policy is found out (issue 19 item 10).

The "relay" is a raw peer that passes carol only part of a topic whose owner
signs its records by hand: 3 of 5 posts and the older document.  The owner's
signed head says what carol should hold; carol tells the gap, and once a
second path exists she fetches what was withheld over it.
"""

from __future__ import annotations

from nodes import wait_for
from rawpeer import RawPeer

from awp.board.sync import Holdings, opening
from awp.wire import board as wb
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms

DAY = 86_400_000


def _feed(node, topic: str, doc: wb.Record, posts: list[wb.Record], head: dict | None = None):
    """A raw peer that connects to ``node``, subscribes, and passes it these records."""
    p = RawPeer(node.address, Identity.generate())
    p.handshake(caps=["chat", "board"])
    p.resume()
    p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
    p.send_line({"t": "board-topic", "hops": 0, "doc": doc.doc})
    p.send_line({"t": "board-posts", "topic": topic, "hops": 0, "recs": [r.doc for r in posts]})
    if head is not None:
        p.send_line({"t": "board-head", "hops": 0, "doc": head})
    return p


def _topic(node, topic: str) -> dict:
    return node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["topic"]


def test_a_withholding_relay_is_detected_and_another_path_fills_the_gap(make_node):
    owner, mallory = Identity.generate(), Identity.generate()
    topic = f"{owner.key}/ops"
    t0 = now_ms()
    doc1 = wb.make_topic(owner, "ops", 1, t0 - 1000, read="open")
    doc2 = wb.make_topic(owner, "ops", 2, t0 - 500, read="open", banned=[mallory.key])
    posts = [wb.make_post(owner, topic, [{"k": "text", "text": f"p{i}"}], t0 - 900 + i)
             for i in range(5)]
    held = Holdings((r.ts, r.hash) for r in posts)
    floor = t0 - 30 * DAY
    head = wb.make_head(owner, topic, t0, 2, floor, opening(held, floor, t0, 0)["ranges"])

    carol = make_node("c").start()
    carol.api("POST", "/v1/board/subscribe", {"topic": topic})
    with _feed(carol, topic, doc1, posts[:3], head):
        wait_for(lambda: (_topic(carol, topic).get("head") or {}).get("missing") == 2, 20,
                 "carol tells the gap")
        t = _topic(carol, topic)
        assert t["head"]["policy_behind"] is True and t["posts"] == 3
        # a second path: dave holds everything the owner signed
        dave = make_node("d").start()
        dave.api("POST", "/v1/board/subscribe", {"topic": topic})
        with _feed(dave, topic, doc2, posts):
            wait_for(lambda: _topic(dave, topic)["posts"] == 5, 20, "dave holds the topic")
            carol.connect(dave)
            wait_for(lambda: _topic(carol, topic)["head"]["missing"] == 0, 30,
                     "carol fetched what was withheld")
            t = _topic(carol, topic)
            assert t["posts"] == 5 and t["head"]["policy_behind"] is False
            assert t["policy"]["banned"] == [mallory.key]


def test_a_forged_head_is_dropped(make_node):
    owner, other = Identity.generate(), Identity.generate()
    topic = f"{owner.key}/ops"
    t0 = now_ms()
    doc = wb.make_topic(owner, "ops", 1, t0 - 1000, read="open")
    forged = wb.make_head(other, topic, t0, 9, t0 - DAY, [])
    forged["author"] = owner.key  # claims the owner, signed by someone else
    carol = make_node("c").start()
    carol.api("POST", "/v1/board/subscribe", {"topic": topic})
    with _feed(carol, topic, doc, [], forged) as p:
        assert p.ping()["t"] == "pong"
        wait_for(lambda: _topic(carol, topic)["known"], 10, "the document at carol")
        assert _topic(carol, topic)["head"] is None
