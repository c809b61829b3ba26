"""What a post costs the hosts it crosses: one streaming wait per follower, records
taken in one store job per read, forwarded as the bytes they came in."""

from __future__ import annotations

import threading
import time

import pytest
from nodes import wait_for

from awp.localapi.client import ApiFailure


def _open_topic(owner, name: str = "ops") -> str:
    owner.api("POST", "/v1/board/topic", {"name": name, "read": "open", "post": "open",
                                          "rate": 6000})
    return f"{owner.key}/{name}"


def _texts(posts: list[dict]) -> list[str]:
    return [p["text"] for p in posts]


class Follower(threading.Thread):
    """Reads one streaming ``/v1/board/wait`` to its end, keeping every object."""

    def __init__(self, node, body: dict, until: str = "") -> None:
        super().__init__(daemon=True)
        self.until = until  # hang up once a post with this text came
        self.chunks: list[dict] = []
        self.error: BaseException | None = None
        self.stream = node.client.stream("POST", "/v1/board/wait", {**body, "stream": True})

    def run(self) -> None:
        try:
            with self.stream:
                for got in self.stream:
                    self.chunks.append(got)
                    if self.until and self.until in _texts(got["posts"]):
                        return
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            self.error = e

    def posts(self) -> list[dict]:
        return [p for c in self.chunks for p in c["posts"]]


@pytest.fixture
def pair(make_node):
    a, b = make_node("a").start(), make_node("b").start()
    a.connect(b)
    topic = _open_topic(a)
    assert b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})["topic"]["known"]
    return a, b, topic


def test_a_streaming_wait_brings_every_post_on_one_request(pair):
    a, b, topic = pair
    start = b.api("POST", "/v1/board/wait", {"topics": [topic], "timeout": 0})["cursor"]
    f = Follower(b, {"topics": [topic], "after": start, "timeout": 30}, until="batch 4")
    f.start()
    for k in range(3):
        a.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text", "text": f"one {k}"}]})
        wait_for(lambda k=k: f"one {k}" in _texts(f.posts()), 10, f"post {k} on the stream")
    # Five posts of one request travel in one line and are stored in one job on b:
    # one look finds them all, so they come as one object.
    a.api("POST", "/v1/board/post", {"topic": topic, "posts": [
        {"parts": [{"k": "text", "text": f"batch {k}"}]} for k in range(5)]})
    wait_for(lambda: "batch 4" in _texts(f.posts()), 10, "the batch on the stream")
    assert _texts(f.chunks[-1]["posts"]) == [f"batch {k}" for k in range(5)]
    assert _texts(f.posts()) == [f"one {k}" for k in range(3)] + [f"batch {k}" for k in range(5)]
    cursors = [c["cursor"] for c in f.chunks]
    assert cursors == sorted(set(cursors)) and not any(c["timed_out"] for c in f.chunks)
    assert cursors[-1] == max(p["seq"] for p in f.posts())
    f.join(10)
    assert f.error is None and not f.is_alive()
    # The cursor of the last object is where a later wait goes on from: nothing again.
    again = b.api("POST", "/v1/board/wait", {"topics": [topic], "after": cursors[-1],
                                             "timeout": 0.2})
    assert again["posts"] == [] and again["timed_out"]


def test_a_streaming_wait_ends_at_its_timeout_with_the_cursor_to_go_on_from(pair):
    a, b, topic = pair
    a.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text", "text": "before"}]})
    wait_for(lambda: b.api("POST", "/v1/board/get", {"topic": topic})["posts"], 10, "b has it")
    t0 = time.monotonic()
    f = Follower(b, {"topics": [topic], "after": 0, "timeout": 1})
    f.run()  # to its end, here
    assert f.error is None
    assert 0.9 <= time.monotonic() - t0 < 10
    assert _texts(f.chunks[0]["posts"]) == ["before"]  # what was there already comes first
    last = f.chunks[-1]
    assert last["timed_out"] and last["posts"] == [] and last["cursor"] >= f.chunks[0]["cursor"]
    a.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text", "text": "after"}]})
    got = b.api("POST", "/v1/board/wait", {"topics": [topic], "after": last["cursor"],
                                           "timeout": 10})
    assert _texts(got["posts"]) == ["after"]


def test_stream_must_be_true_or_false(pair):
    _a, b, topic = pair
    with pytest.raises(ApiFailure) as e:
        b.api("POST", "/v1/board/wait", {"topics": [topic], "stream": "yes"})
    assert e.value.status == 400


def test_a_follower_that_hangs_up_stops_waiting(pair):
    """The stream counts as a waiting client while it is open, and no longer once the
    client goes: the daemon notices the hang-up and closes the stream's subscription."""
    _a, b, topic = pair
    assert b.api("GET", "/v1/activity")["waits"] == 0
    stream = b.client.stream("POST", "/v1/board/wait", {"topics": [topic], "timeout": 600,
                                                        "stream": True})
    wait_for(lambda: b.api("GET", "/v1/activity")["waits"] == 1, 10, "the stream waiting")
    stream.close()  # hang up while the daemon waits for a post
    wait_for(lambda: b.api("GET", "/v1/activity")["waits"] == 0, 10, "the stream released")
