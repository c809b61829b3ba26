"""A board work queue worked through the real ``awp`` executable by two claimants.

alice owns the queue; bob and carol claim from it at the same moment, finish,
fail and release items, and carol completes one while alice's daemon is down
(the claim fails as ``awp wait`` does on a timeout; the completion is kept
and delivered when alice is back).
"""

from __future__ import annotations

import json
import re

from nodes import wait_for
from test_board_cli import finish, posted, start, subscribed
from test_cli_support import cli_root_fixture, homes_fixture  # noqa: F401


def queue_rows(home, topic: str) -> dict[str, list[str]]:
    """``awp queue``'s table by item id: [status, holder, ..., attempts]."""
    lines = home.ok("queue", topic).stdout.split("\n\n")[0].splitlines()  # items, not workers
    assert lines[0].split() == ["ITEM", "STATUS", "HOLDER", "UNTIL", "ATTEMPTS", "TEXT"]
    return {ln.split()[0]: ln.split() for ln in lines[1:]}


def test_two_claimants_work_a_queue(homes):
    a, b, c = homes("a"), homes("b"), homes("c")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    c.ok("up", "--name", "carol")
    b.ok("connect", a.address)
    c.ok("connect", a.address)

    r = a.ok("topic", "create", "jobs", "--queue", "--lease", "2m", "--attempts", "3")
    assert r.stdout.startswith("created topic alice/jobs: read grant, post grant,"
                               " a work queue (leases of 120s)")
    a.ok("topic", "grant", "jobs", "bob")
    a.ok("topic", "grant", "jobs", "carol")
    subscribed(b, "alice/jobs")
    subscribed(c, "alice/jobs")
    items = [posted(a.ok("post", "jobs", f"job {i}")) for i in (1, 2)]

    # Both claim at once: each gets a different item, nobody gets one twice.
    pb = start(b, "claim", "alice/jobs", "--json")
    pc = start(c, "claim", "alice/jobs", "--json")
    (cb, ob, eb), (cc, oc, ec) = finish(pb), finish(pc)
    assert cb == 0 and cc == 0, eb + ec
    got_b, got_c = json.loads(ob), json.loads(oc)
    assert got_b["state"] == got_c["state"] == "claimed"
    assert sorted([got_b["item"]["id"], got_c["item"]["id"]]) == sorted(items)
    assert got_b["holder"] == json.loads(b.ok("status", "--json").stdout)["key"]

    # Nothing left: exit 2, as awp wait on a timeout.
    r = b.run("claim", "alice/jobs")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "awp claim: the queue alice/jobs has no open item\n"
    r = b.run("claim", "alice/jobs", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["state"] == "empty"

    rows = queue_rows(a, "jobs")
    assert rows[got_b["item"]["id"]][1:3] == ["claimed", "bob"]
    assert rows[got_c["item"]["id"]][1:3] == ["claimed", "carol"]
    # The answer names the holders and says who is asking: the table needs no other request.
    q = json.loads(a.ok("queue", "jobs", "--json").stdout)
    assert q["self"] == json.loads(a.ok("status", "--json").stdout)["key"]
    assert q["names"] == {got_b["holder"]: "bob", got_c["holder"]: "carol"}

    # bob finishes his; carol fails hers, which goes back with one attempt spent.
    r = b.ok("complete", "alice/jobs", got_b["lease"])
    assert r.stdout == f"completed {got_b['item']['id']} (lease {got_b['lease']})\n"
    r = c.ok("fail", "alice/jobs", got_c["lease"])
    assert r.stdout == f"failed {got_c['item']['id']} (lease {got_c['lease']})\n"
    r = c.run("complete", "alice/jobs", got_c["lease"])  # no longer hers
    assert r.returncode == 1 and r.stderr.startswith("awp complete: refused")
    rows = queue_rows(a, "jobs")
    assert rows[got_b["item"]["id"]][1] == "done"
    assert rows[got_c["item"]["id"]][1] == "open" and rows[got_c["item"]["id"]][4] == "1"

    # bob takes the failed item, in text this time, and gives it back untouched.
    r = b.ok("claim", "alice/jobs")
    lines = r.stdout.splitlines()
    m = re.fullmatch(r"claimed ([0-9a-f]{10}) \(posted by alice\): lease (\S+),"
                     r" until \d\d:\d\d:\d\dZ \(in (1m|2m|\d+s)\)", lines[0])
    assert m and m.group(1) == got_c["item"]["id"], r.stdout
    assert lines[1].strip().startswith("job ")
    assert lines[2] == f"  when done: awp complete alice/jobs {m.group(2)}  (or fail, release;" \
                       " renew for more time)"
    r = b.ok("release", "alice/jobs", m.group(2))
    assert r.stdout.startswith(f"released {m.group(1)}")
    assert queue_rows(a, "jobs")[m.group(1)][4] == "1"  # a release costs no attempt

    # carol claims it and renews.
    got = json.loads(c.ok("claim", "alice/jobs", "--json").stdout)
    assert got["item"]["id"] == m.group(1)
    r = c.ok("renew", "alice/jobs", got["lease"])
    assert r.stdout.startswith(f"renewed {m.group(1)}: lease ")

    # alice's daemon dies: nothing can be claimed (exit 2), but carol's completion is
    # kept and reaches alice when she is back.
    a.kill()
    wait_for(lambda: c.run("claim", "alice/jobs").returncode == 2, 20, "claims failing")
    r = c.run("claim", "alice/jobs")
    assert r.returncode == 2 and "not connected" in r.stderr and r.stderr.startswith("awp claim: ")
    r = c.ok("complete", "alice/jobs", got["lease"])
    assert r.stdout.startswith(f"complete of lease {got['lease']} queued: the owner is not"
                               " connected")
    a.ok("up")
    # No awp connect: the kept completion and the subscriptions are business with
    # alice, so both daemons redial her (and she redials them).
    wait_for(lambda: queue_rows(a, "jobs")[m.group(1)][1] == "done", 60,
             "carol's completion at alice", interval=0.5)
    wait_for(lambda: "not connected" not in b.run("claim", "alice/jobs").stderr, 30,
             "bob back at alice", interval=0.5)
    r = b.run("claim", "alice/jobs")
    assert r.returncode == 2 and "no open item" in r.stderr  # both done: nothing left


def test_a_queue_filled_from_a_file_of_lines(homes, tmp_path):
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    b.ok("connect", a.address)
    a.ok("topic", "create", "jobs", "--queue", "--open")
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"task {i}\n" for i in range(1500)) + "\n   \n")
    r = a.ok("post", "jobs", "--lines", str(tasks))
    assert r.stdout.startswith("posted 1500 of 1500 on jobs")
    assert a.run("post", "jobs", "--lines", str(tasks), "extra").returncode != 0
    subscribed(b, "alice/jobs")
    got = json.loads(b.ok("claim", "alice/jobs", "--json").stdout)
    assert got["item"]["text"] == "task 0"  # the oldest line first
    rows = queue_rows(a, "jobs")
    assert len(rows) == 1500


def test_the_table_reads_the_compact_answer_and_json_the_full_one(homes):
    """``awp queue`` asks for ``?compact=1``: one short row an item, the same facts as the
    full answer (``--json``), the text folded and cut, an edit's text shown."""
    from awp.localapi.client import LocalClient

    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    b.ok("connect", a.address)
    a.ok("topic", "create", "jobs", "--queue", "--open")
    long = "step  one\n" + "word " * 40
    first = posted(a.ok("post", "jobs", long))
    second = posted(a.ok("post", "jobs", "job two"))
    a.ok("edit", second, "job two, edited")
    subscribed(b, "alice/jobs")
    got = json.loads(b.ok("claim", "alice/jobs", "--json").stdout)
    assert got["item"]["id"] == first

    client = LocalClient.for_home(a.path)
    full = client.get("/v1/board/queue", topic="jobs")
    compact = client.get("/v1/board/queue", topic="jobs", compact=1)
    assert "rows" not in full and "items" not in compact
    assert compact["columns"] == ["id", "status", "holder", "until", "attempts", "text"]
    assert {k: compact[k] for k in ("topic", "arbiter", "workers", "self", "names")} == {
        k: full[k] for k in ("topic", "arbiter", "workers", "self", "names")}
    assert [r[:5] for r in compact["rows"]] == [
        [i["item"]["id"], i["status"], i["holder"], i["until"], i["attempts"]]
        for i in full["items"]]
    texts = {r[0]: r[5] for r in compact["rows"]}
    assert texts[first] == ("step one " + "word " * 40)[:79] + "…"
    assert texts[second] == "job two, edited"
    assert len(json.dumps(compact)) < len(json.dumps(full)) / 2

    rows = queue_rows(a, "jobs")
    assert rows[first][:3] == [first, "claimed", "bob"]
    assert rows[second] == [second, "open", "-", "-", "0", "job", "two,", "edited"]
    assert json.loads(a.ok("queue", "jobs", "--json").stdout)["items"] == full["items"]
