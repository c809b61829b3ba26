"""The board on a line of three daemons, driven only through the ``awp`` CLI.

alice owns the topic, bob relays, carol is two hops away and never meets
alice.  Permissions travel in the owner's topic document (its ``members``),
so alice grants and revokes carol by key; a claim on a work queue reaches
alice through bob and its answer comes back the same way.  The link healing
of the same line is ``test_mesh_line.py``'s.
"""

from __future__ import annotations

import json

from nodes import wait_for
from test_board_cli import posted
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401


def line(homes):
    """alice - bob - carol: bob dials alice, carol dials bob; carol never meets alice."""
    a, b, c = homes("a"), homes("b"), homes("c")
    for h, name in ((a, "alice"), (b, "bob"), (c, "carol")):
        h.ok("up", "--name", name)
    b.ok("connect", a.address)
    c.ok("connect", b.address)
    return a, b, c


def key_of(home) -> str:
    return json.loads(home.ok("status", "--json").stdout)["key"]


def policy(home, topic: str) -> dict:
    return json.loads(home.ok("topic", "show", topic, "--json").stdout).get("policy") or {}


def known(home, topic: str) -> None:
    """Subscribe ``home`` to ``topic`` and wait until it holds the owner's document."""
    r = home.run("subscribe", topic, "--once", "--timeout", "0s")
    assert r.returncode in (0, 2), r.stderr
    wait_for(lambda: policy(home, topic), 30, f"{topic}'s document at {home.path}",
             interval=0.2)


def test_grant_by_key_travels_over_the_mesh_and_revoke_reaches_two_hops(homes):
    a, b, c = line(homes)
    ckey = key_of(c)
    topic = f"{key_of(a)}/ops"
    a.ok("topic", "create", "ops")
    a.ok("post", "ops", "before carol")
    # bob relays: a relay must itself be allowed to read, and it is granted like anyone
    a.ok("topic", "grant", "ops", "bob", "--read")
    known(b, "alice/ops")
    known(c, topic)
    # alice has never met carol: she grants carol's key, and it reaches carol through bob
    r = a.ok("topic", "grant", "ops", ckey)
    assert "travels with the topic to every subscriber" in r.stdout, r.stdout
    wait_for(lambda: [m["key"] for m in policy(c, topic).get("members", [])] ==
             sorted([ckey, key_of(b)]), 30, "carol's membership at carol")
    # carol reads the backlog and posts; alice gets her post through bob
    wait_for(lambda: "before carol" in c.ok("get", topic).stdout, 30, "the backlog at carol")

    def head_clean():  # the owner's signed head reached carol through bob, and nothing is missing
        h = json.loads(c.ok("topic", "show", topic, "--json").stdout).get("head") or {}
        return h.get("ts") and h["missing"] == 0 and not h["policy_behind"]

    wait_for(head_clean, 30, "alice's head at carol, with no gap")
    pid = posted(c.ok("post", topic, "hi from carol"))
    wait_for(lambda: "hi from carol" in a.ok("get", "ops").stdout, 30, "carol's post at alice")
    assert pid in a.ok("get", "ops").stdout
    # a reader only: bob cannot post, and is told so
    r = b.run("post", "alice/ops", "bob tries")
    assert r.returncode == 1 and "no grant to post" in r.stderr, r.stderr

    # revoke by key: carol learns it two hops away and her daemon posts no more
    r = a.ok("topic", "revoke", "ops", ckey)
    assert r.stdout.startswith(f"revoked {ckey} on alice/ops"), r.stdout
    wait_for(lambda: ckey not in json.dumps(policy(c, topic)), 30, "the revocation at carol")
    r = c.run("post", topic, "after revoke")
    assert r.returncode == 1 and "no grant to post" in r.stderr, r.stderr


def test_a_relay_that_may_not_read_never_carries_posts(homes):
    a, b, c = line(homes)
    ckey = key_of(c)
    topic = f"{key_of(a)}/ops"
    a.ok("topic", "create", "ops")
    a.ok("post", "ops", "secret")
    known(b, "alice/ops")  # bob subscribes, but alice lets only carol read
    a.ok("topic", "grant", "ops", ckey)
    known(c, topic)
    # the document (policy, not content) reaches carol through bob; the posts do not
    wait_for(lambda: ckey in json.dumps(policy(c, topic)), 30, "carol's membership at carol")
    assert "secret" not in b.ok("get", "alice/ops").stdout
    assert "secret" not in c.ok("get", topic).stdout
    # carol's own post waits for alice's stamp; it is not handed to bob, who may not read
    assert json.loads(c.ok("post", topic, "from carol", "--json").stdout)["waiting"] is True
    a.ok("topic", "grant", "ops", "bob", "--read")
    # once bob may read, the posts travel: proof that it was bob's right that held them back
    wait_for(lambda: "secret" in c.ok("get", topic).stdout, 30, "the post at carol via bob")
    assert "secret" in b.ok("get", "alice/ops").stdout
    wait_for(lambda: "from carol" in a.ok("get", "ops").stdout, 30,
             "carol's post at alice, stamped, via bob")


def test_a_claim_two_hops_away_reaches_the_owner_and_its_answer_comes_back(homes):
    a, b, c = line(homes)
    topic = f"{key_of(a)}/jobs"
    a.ok("topic", "create", "jobs", "--queue", "--lease", "2m")
    a.ok("topic", "grant", "jobs", "bob", "--read")
    a.ok("topic", "grant", "jobs", key_of(c))
    known(b, "alice/jobs")
    known(c, topic)
    item = posted(a.ok("post", "jobs", "job one"))
    wait_for(lambda: "job one" in c.ok("get", topic).stdout, 30, "the item at carol")
    # carol has no link to alice: the claim goes through bob and the lease comes back
    got = json.loads(c.ok("claim", topic, "--json").stdout)
    assert got["state"] == "claimed" and got["item"]["id"] == item
    assert got["holder"] == key_of(c)
    r = c.ok("renew", topic, got["lease"])
    assert r.stdout.startswith(f"renewed {item}: lease ")
    r = c.ok("complete", topic, got["lease"])
    assert r.stdout == f"completed {item} (lease {got['lease']})\n", r.stdout
    # a retry of a complete the owner committed (its answer lost, say) is a success too
    assert c.ok("complete", topic, got["lease"]).stdout == r.stdout
    items, workers = a.ok("queue", "jobs").stdout.split("\n\n")[:2]  # items, then workers
    rows = {ln.split()[0]: ln.split() for ln in items.splitlines()[1:]}
    assert rows[item][1] == "done"
    # alice never met carol: the name carol signed in its ask names the worker (issue 38)
    assert "carol (heard of" in workers, workers
    r = c.run("claim", topic)
    assert r.returncode == 2 and "no open item" in r.stderr, r.stderr


def test_a_host_two_hops_away_calls_the_owner_by_its_signed_name(homes):
    """carol never met alice, yet holds alice's signed topic document: "alice/ops"
    names it, and the answer says the name is heard of, not met (issue 38)."""
    a, b, c = line(homes)
    akey = key_of(a)
    a.ok("topic", "create", "ops", "--open")
    a.ok("post", "ops", "hello from alice")
    known(b, "alice/ops")
    known(c, f"{akey}/ops")
    r = c.ok("get", "alice/ops")  # by name, on a host that never met alice
    assert "hello from alice" in r.stdout, r.stdout + r.stderr
    shown = json.loads(c.ok("topic", "show", "alice/ops", "--json").stdout)
    assert shown["topic"] == f"{akey}/ops"
    assert "heard of" in shown["owner_name"], shown["owner_name"]
    r = c.run("get", "nobody-by-that-name/ops")
    assert r.returncode != 0 and "unknown peer" in r.stderr
