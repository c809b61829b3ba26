"""The board as a new user first meets it (issue 22, "The board's first touch").

Each test is one rough edge that was there: the owner's own label, posting
to a topic that does not exist, a failed post's subscription, ``--lines``
past the rate, a grant's ttl, and the exit status of usage errors.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from rawpeer import RawPeer
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401

from awp.localapi.client import ApiFailure, LocalClient
from awp.wire.keys import Identity


def test_the_owner_can_use_the_label_every_listing_shows(homes):
    a = homes("a")
    a.ok("up", "--name", "alice")
    a.ok("topic", "create", "ops", "--open")
    a.ok("post", "ops", "first")
    topics = json.loads(a.ok("topics", "--json").stdout)["topics"]
    assert [t["label"] for t in topics] == ["alice/ops"]
    got = json.loads(a.ok("get", "alice/ops", "--json").stdout)
    assert [p["text"] for p in got["posts"]] == ["first"]
    a.ok("post", "alice/ops", "second")
    # MCP reads through the same route: awp_get topic=alice/ops
    client = LocalClient(os.path.join(a.path, "awp.sock"))
    res = client.post("/v1/board/get", {"topic": "alice/ops", "n": 0})
    assert [p["text"] for p in res["posts"]] == ["first", "second"]


def test_posting_to_a_topic_that_does_not_exist_says_how_to_create_it(homes):
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    a.ok("topic", "create", "ops", "--open")
    b.ok("connect", a.address)
    b.run("subscribe", "alice/ops", "--once", "--timeout", "3s")
    r = b.run("post", "ops", "hello")
    assert r.returncode == 1
    assert "you have no topic ops: create it with `awp topic create ops`" in r.stderr
    assert "alice/ops" in r.stderr  # which topics match
    labels = [t["label"] for t in json.loads(b.ok("topics", "--json").stdout)["topics"]]
    assert "bob/ops" not in labels  # no phantom topic of bob's


def test_a_post_to_a_topic_the_connected_owner_lacks_fails_fast_and_leaves_nothing(homes):
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    b.ok("connect", a.address)
    t0 = time.monotonic()
    r = b.run("post", "alice/nosuch", "hello")
    took = time.monotonic() - t0
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "alice has no topic nosuch: its owner can create it" in r.stderr, r.stderr
    assert took < 5, took  # the owner answered board-none: no 10 s wait for a document
    labels = [t["label"] for t in json.loads(b.ok("topics", "--json").stdout)["topics"]]
    assert "alice/nosuch" not in labels
    # A topic created later works: the owner's "none" is not remembered past it.
    a.ok("topic", "create", "nosuch", "--open")
    b.ok("post", "alice/nosuch", "hello again")
    got = json.loads(a.ok("get", "nosuch", "-n", "0", "--json").stdout)
    assert [p["text"] for p in got["posts"]] == ["hello again"]


def test_the_owner_answers_board_none_once_per_topic_it_lacks(make_node):
    a = make_node("a").start()
    a.api("POST", "/v1/board/topic", {"name": "ops", "read": "open", "post": "open"})
    ops, nosuch = f"{a.key}/ops", f"{a.key}/nosuch"
    with RawPeer(a.address, Identity.generate()) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        listed = [nosuch, nosuch, ops, f"{Identity.generate().key}/x"]  # twice, held, not a's
        p.send_line({"t": "board-sub", "topics": [{"topic": t} for t in listed], "drop": []})
        p.expect("board-none", topic=nosuch)
        p.expect("board-topic")  # ops, answered after nosuch: the link's queue is in order
        p.send_line({"t": "board-sub", "topics": [{"topic": ops}], "drop": []})
        p.expect("board-topic")  # so everything the first line drew came before this
        assert [x for x in p.skipped if x.get("t") == "board-none"] == []


def _post_meanwhile(node, topic: str, timeout: float):
    """Start a post to ``topic`` in a thread: its error and how long it took."""
    def run() -> tuple[ApiFailure | None, float]:
        t0 = time.monotonic()
        try:
            node.api("POST", "/v1/board/post", {"topic": topic, "timeout": timeout,
                                                "parts": [{"k": "text", "text": "hi"}]})
        except ApiFailure as e:
            return e, time.monotonic() - t0
        return None, time.monotonic() - t0
    return ThreadPoolExecutor(1).submit(run)


def test_board_none_is_believed_only_from_the_topics_owner(make_node):
    a = make_node("a").start()
    owner = Identity.generate()
    for speaker, name in ((Identity.generate(), "x"), (owner, "y")):
        topic = f"{owner.key}/{name}"
        with RawPeer(a.address, speaker) as p:
            p.handshake(caps=["chat", "board"])
            p.resume()
            p.send_line({"t": "board-sub", "topics": [], "drop": []})
            done = _post_meanwhile(a, topic, 4)
            p.recv_until(lambda x, t=topic: x.get("t") == "board-sub" and any(
                e.get("topic") == t for e in x.get("topics", [])))
            p.send_line({"t": "board-none", "topic": topic})
            err, took = done.result(30)
        assert err is not None and err.code == "unknown_topic"
        if speaker is owner:
            assert f"has no topic {name}" in str(err) and took < 3, (str(err), took)
        else:  # a relay cannot make a post fail: it waits for the document
            assert "no topic document for" in str(err) and took >= 4, (str(err), took)
    assert a.api("GET", "/v1/board/topics")["topics"] == []


def test_post_lines_past_the_rate_fails_and_names_the_lines_left(homes, tmp_path):
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    a.ok("topic", "create", "jobs", "--open", "--rate", "5")  # the owner has no rate
    b.ok("connect", a.address)
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"job {i}\n" for i in range(1, 9)))
    r = b.run("post", "alice/jobs", "--lines", str(src))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "posted 5 of 8 on alice/jobs" in r.stdout
    assert f"lines not posted: 6-8 of {src}" in r.stderr and "rate" in r.stderr, r.stderr
    texts = [p["text"] for p in json.loads(b.ok("get", "alice/jobs", "-n", "0", "--json")
                                           .stdout)["posts"]]
    assert texts == [f"job {i}" for i in range(1, 6)]


def test_a_grant_lasts_what_its_ttl_says(homes):
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    a.ok("connect", b.address)
    a.ok("topic", "create", "ops")
    for ttl, days in (("7d", 7), ("90d", 90), (None, 30)):
        args = ["topic", "grant", "ops", "bob", "--json"] + (["--ttl", ttl] if ttl else [])
        until = json.loads(a.ok(*args).stdout)["until"]  # a member of the topic's document
        exp = time.mktime(time.strptime(until[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert abs(exp - time.time() - days * 86400) < 120, (ttl, until)
    r = a.run("topic", "grant", "ops", "bob", "--ttl", "20000d")
    assert r.returncode == 1 and "ttl is at most" in r.stderr


def test_usage_errors_exit_2_on_both_paths(homes):
    a = homes("a")
    a.ok("up", "--name", "alice")
    a.ok("topic", "create", "ops")
    for args in (["topic", "create", "jobs", "--queue", "--lease", "30x"],
                 ["topic", "set", "ops", "--lease", "0s"],
                 ["get", "ops", "--since", "yesterday"],
                 ["get", "ops", "--wait", "--timeout", "soon"],
                 ["claim", "ops", "--timeout", "x"],
                 ["send", "bob", "hi", "--wait-ack", "soon"],
                 ["get", "ops", "--bogus"]):
        for fast in ("1", "0"):
            a.env["AWP_FASTPATH"] = fast
            r = a.run(*args)
            assert r.returncode == 2, (args, fast, r.stderr)
    a.env.pop("AWP_FASTPATH")


def test_up_that_cannot_listen_stops_the_daemon_it_started(homes):
    import socket

    a = homes("a")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = a.run("up", "--listen", f"tcp:127.0.0.1:{port}", "--no-tailcat")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "nothing listens" in r.stderr and "the daemon this started is stopped again" in \
        r.stderr, r.stderr
    assert a.run("status").returncode == 3  # nothing left running
