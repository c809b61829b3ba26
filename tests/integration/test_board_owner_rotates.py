"""A topic's owner rotates its key (issue 35): the topic keeps its history,
readers and members under the new key, on three hosts, one of which never met
the owner and learns the rotation from the topic's own document."""

from __future__ import annotations

from nodes import wait_for
from test_key_rotation import _rotate


def _texts(node, topic: str) -> list[str]:
    got = node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["posts"]
    return sorted(p["text"] for p in got)


def _post(node, topic: str, text: str) -> dict:
    return node.api("POST", "/v1/board/post",
                    {"topic": topic, "parts": [{"k": "text", "text": text}]})["post"]


def test_a_topic_owner_rotating_keeps_its_topic_on_three_hosts(make_node):
    o, h1, h2, h3 = (make_node(n) for n in ("owner", "h1", "h2", "h3"))
    for n in (o, h1, h2, h3):
        n.start(wait=False)
    for n in (o, h1, h2, h3):
        n.wait_ready(60)
    h1.connect(o)
    h2.connect(o)
    h3.connect(h2)  # h3 never meets the owner
    o.api("POST", "/v1/board/topic", {"name": "plan", "read": "open", "post": "open"})
    old = o.key
    topic = f"{old}/plan"
    for n in (h1, h2, h3):
        assert n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 30})["topic"]["known"]
    _post(h1, topic, "before")
    everyone = (o, h1, h2, h3)
    wait_for(lambda: all(_texts(n, topic) == ["before"] for n in everyone), 30, "before")

    rot = _rotate(o)
    new = rot["new"]
    # h1 and h2 follow the owner's rotation on their links; h3 only hears of it
    # through the board (the owner re-signs its topic document under the new key).
    for n in (h1, h2):
        wait_for(lambda n=n: n.peer_state(new).startswith("connected"), 60,
                 f"{n.name} relinked")
    # the owner's new document reaches all, signed by the new key, naming the rotation
    for n in everyone:
        wait_for(lambda n=n: n.api("POST", "/v1/board/get", {"topic": topic, "n": 0})
                 ["topic"].get("owner_key") == new, 60,
                 f"{n.name} sees the new owner key")
    # a member's post after the rotation is admitted by the owner's new key everywhere
    _post(h3, topic, "after, from afar")
    _post(o, topic, "the owner, rotated")
    want = ["after, from afar", "before", "the owner, rotated"]
    wait_for(lambda: all(_texts(n, topic) == want for n in everyone), 60, "posts everywhere")
    # the topic answers to its owner's current key too, and the old name still works
    for n in (h1, h3):
        assert _texts(n, f"{new}/plan") == want
    assert _texts(o, "plan") == want  # the owner's own short name
    # the owner can still change its policy; every host takes the new document
    o.api("POST", "/v1/board/topic", {"name": "plan", "title": "the plan, rotated"})
    wait_for(lambda: all(n.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["topic"]
                         ["policy"]["title"] == "the plan, rotated" for n in everyone), 60, "title")
