"""Three daemons in a line, driven only through the ``awp`` executable (issue 19).

alice owns a topic, bob relays it (he is linked to both), carol is two hops
from alice and knows only bob.  Nobody ever types ``awp connect`` to repair a
link: links with business are kept and redialled by the daemons themselves.

The ``line`` fixture builds the line; tests of other parts of issue 19 (grants
by key over the mesh, claims two hops away) can sit beside these.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest
from nodes import wait_for
from test_board_cli import posted, subscribed
from test_board_queue_cli import queue_rows
from test_cli_support import Home, cli_root_fixture, homes_fixture  # noqa: F401


@dataclass
class Line:
    alice: Home
    bob: Home
    carol: Home
    keys: dict[str, str]  # name -> key
    topic: str  # alice's open topic, by key (carol has never met alice)


def key_of(home: Home) -> str:
    return json.loads(home.ok("status", "--json").stdout)["key"]


def state(home: Home, key: str) -> str:
    """The STATE column ``awp peers`` shows for ``key``."""
    for p in json.loads(home.ok("peers", "--json").stdout):
        if p["key"] == key:
            return p["state"]
    return "unknown"


def held(home: Home, topic: str) -> set[str]:
    """Texts of the posts ``home`` holds in ``topic`` (``awp get --json``)."""
    out = json.loads(home.ok("get", topic, "-n", "0", "--json").stdout)
    return {p["text"] for p in out["posts"]}


@pytest.fixture(name="line")
def line_fixture(homes) -> Line:
    a, b, c = homes("a"), homes("b"), homes("c")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    c.ok("up", "--name", "carol")
    b.ok("connect", a.address)
    c.ok("connect", b.address)  # carol knows only bob
    keys = {"alice": key_of(a), "bob": key_of(b), "carol": key_of(c)}
    a.ok("topic", "create", "ops", "--open")
    topic = f"{keys['alice']}/ops"
    subscribed(b, "alice/ops")
    subscribed(c, topic)
    posted(a.ok("post", "ops", "first"))
    wait_for(lambda: "first" in held(c, topic), 30, "the first post at carol", interval=0.3)
    return Line(a, b, c, keys, topic)


def test_a_relay_killed_and_restarted_heals_by_itself(line):
    a, b, c, k = line.alice, line.bob, line.carol, line.keys
    b.kill()  # kill -9
    wait_for(lambda: state(c, k["bob"]) != "connected (out)", 20, "carol sees bob gone",
             interval=0.3)
    meanwhile = [f"while bob was down {i}" for i in range(5)]
    for text in meanwhile:
        posted(a.ok("post", "ops", text))
    b.ok("up")  # the same home and address; no awp connect anywhere
    started = time.monotonic()
    wait_for(lambda: set(meanwhile) <= held(c, line.topic), 60,
             "the posts made while bob was down at carol", interval=0.3)
    healed = time.monotonic() - started
    assert state(b, k["alice"]).startswith("connected")
    assert state(b, k["carol"]).startswith("connected")
    # Live posts flow through the healed relay too.
    posted(a.ok("post", "ops", "after the restart"))
    wait_for(lambda: "after the restart" in held(c, line.topic), 30, "a live post at carol",
             interval=0.3)
    assert healed < 30, healed


def test_a_leaf_that_restarts_redials_its_former_neighbour(line):
    """carol's only link is to bob, whose topic she does not subscribe to (it is
    alice's): the link is business because it carries the topic, and carol's
    store remembers it across kill -9.  bob could only dial carol back after
    the 15 s dial-back grace, so a link within 10 s, dialed by carol, is hers."""
    a, b, c, k = line.alice, line.bob, line.carol, line.keys
    c.kill()
    wait_for(lambda: state(b, k["carol"]) != "connected (in)", 20, "bob sees carol gone",
             interval=0.3)
    posted(a.ok("post", "ops", "while carol was down"))
    c.ok("up")
    started = time.monotonic()
    wait_for(lambda: state(c, k["bob"]) == "connected (out)", 20, "carol redials bob",
             interval=0.2)
    assert time.monotonic() - started < 10
    assert state(b, k["carol"]) == "connected (in)"
    wait_for(lambda: "while carol was down" in held(c, line.topic), 30,
             "the missed post at carol", interval=0.3)


def test_bye_parks_until_connect_and_then_the_link_is_kept_again(line):
    a, b, c, k = line.alice, line.bob, line.carol, line.keys
    assert c.ok("bye", "bob").stdout == "said bye to bob\n"
    wait_for(lambda: state(c, k["bob"]) == "said bye", 15, "carol parks bob", interval=0.3)
    wait_for(lambda: state(b, k["carol"]) == "said bye", 15, "bob parks carol", interval=0.3)
    posted(a.ok("post", "ops", "while parked"))
    # Parked: the subscription through bob does not bring carol back on its own
    # (each side would redial within 1.5 s otherwise).
    time.sleep(3)
    assert state(c, k["bob"]) == "said bye" and state(b, k["carol"]) == "said bye"
    assert "while parked" not in held(c, line.topic)

    c.ok("connect", "bob")  # by name: the park ends
    wait_for(lambda: "while parked" in held(c, line.topic), 30, "the post at carol",
             interval=0.3)
    assert state(c, k["bob"]) == "connected (out)"
    assert state(b, k["carol"]) == "connected (in)"  # a new connection ended bob's park too

    # The link is kept again: when bob dies, carol redials him.
    b.kill()
    wait_for(lambda: state(c, k["bob"]) == "reconnecting", 20, "carol redialing bob",
             interval=0.3)
    bob = next(p for p in json.loads(c.ok("peers", "--json").stdout) if p["key"] == k["bob"])
    assert bob.get("kept_for") == "relay", bob  # the link carries alice's topic
    b.ok("up")
    wait_for(lambda: state(c, k["bob"]).startswith("connected"), 30, "carol and bob linked",
             interval=0.3)


def test_a_kept_complete_reaches_the_owner_back_from_kill_9(line):
    """bob said bye to alice once and connected again; later he holds a lease when
    alice dies.  His complete is kept, and goes when she is back, with no awp
    connect: the item is done once, and the lease never expires."""
    a, b, k = line.alice, line.bob, line.keys
    b.ok("bye", "alice")
    wait_for(lambda: state(b, k["alice"]) == "said bye", 15, "bob parks alice", interval=0.3)
    b.ok("connect", "alice")
    a.ok("topic", "create", "jobs", "--queue", "--open", "--lease", "2m")
    subscribed(b, "alice/jobs")
    item = posted(a.ok("post", "jobs", "the only job"))
    got = json.loads(b.ok("claim", "alice/jobs", "--json").stdout)
    assert got["state"] == "claimed" and got["item"]["id"] == item

    a.kill()
    wait_for(lambda: b.run("claim", "alice/jobs").returncode == 2, 20, "claims failing",
             interval=0.3)
    r = b.ok("complete", "alice/jobs", got["lease"])
    assert r.stdout.startswith(f"complete of lease {got['lease']} queued")
    a.ok("up")
    wait_for(lambda: queue_rows(a, "jobs")[item][1] == "done", 60,
             "the kept complete at alice", interval=0.5)
    row = queue_rows(a, "jobs")[item]
    assert row[1] == "done" and row[4] == "0"  # no attempt lost
    r = b.run("claim", "alice/jobs")
    assert r.returncode == 2 and "no open item" in r.stderr  # not handed out again
