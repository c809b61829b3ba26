"""The board through the real ``awp`` executable, as a user would drive it.

Two and three homes, each with its daemon started on demand: create a topic,
grant a peer, post, reply, get, subscribe, edit, delete, hide, files, revoke,
and an open topic reached through a relay.  The work queue is in
``test_board_queue_cli.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from nodes import wait_for
from test_cli_support import ROOT, cli_root_fixture, homes_fixture  # noqa: F401

from awp.localapi.client import LocalClient

POSTED = re.compile(r"(posted|replied) ([0-9a-f]{10})(?: to ([0-9a-f]{10}))? on (\S+); (.*)")


def start(home, *args: str) -> subprocess.Popen:
    """Run ``awp ARGS`` for ``home`` in the background (a subscribe, a waiting get)."""
    argv = [sys.executable, "-m", "awp", args[0], "--home", home.path, *args[1:]]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=home.env, cwd=ROOT)


def subscribing(home, *args: str) -> subprocess.Popen:
    """``awp subscribe ARGS`` in the background, returned once it is subscribed.

    subscribe takes its cursor before subscribing and says so on stderr after,
    so a post made once this returns is one it must print.
    """
    p = start(home, "subscribe", *args)
    p.early = []  # type: ignore[attr-defined]
    while True:
        line = p.stderr.readline()  # type: ignore[union-attr]
        assert line, f"subscribe ended early: {p.early}"  # type: ignore[attr-defined]
        p.early.append(line)  # type: ignore[attr-defined]
        if line.startswith("subscribed to"):
            return p


def finish(p: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, "".join(getattr(p, "early", [])) + err


def posted(r: subprocess.CompletedProcess) -> str:
    m = POSTED.fullmatch(r.stdout.strip())
    assert m, r.stdout
    return m.group(2)


def pair(homes):
    """alice and bob, bob connected to alice."""
    a, b = homes("a"), homes("b")
    a.ok("up", "--name", "alice")
    b.ok("up", "--name", "bob")
    b.ok("connect", a.address)
    return a, b


def subscribed(home, topic: str) -> None:
    """Subscribe ``home`` to ``topic`` and wait until it holds the owner's document."""
    r = home.run("subscribe", topic, "--once", "--timeout", "0s")
    assert r.returncode in (0, 2), r.stderr

    def known():
        t = json.loads(home.ok("topic", "show", topic, "--json").stdout)
        return t["known"] and t["subscribed"]

    wait_for(known, 20, f"{topic} known on {home.path}", interval=0.2)


def test_topic_grant_post_reply_get_subscribe_edit_delete_hide(homes):
    a, b = pair(homes)

    r = a.ok("topic", "create", "ops", "--title", "Deploys and incidents")
    assert r.stdout.splitlines() == ["created topic alice/ops: read grant, post grant",
                                     "let a peer post: awp topic grant ops PEER"]
    assert a.ok("topic", "create", "ops").stdout.startswith("topic alice/ops exists already")

    # No grant yet: bob may neither read nor post, and is told so.
    r = b.run("post", "alice/ops", "hello?")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("awp post: no grant to post to alice/ops"), r.stderr

    r = a.ok("topic", "grant", "ops", "bob")
    assert re.fullmatch(r"granted post on ops to bob until \S+Z: it travels with the topic to"
                        r" every subscriber over any path of readers \(1 linked now; a relay"
                        r" that may not read the topic never carries it\)\n", r.stdout), r.stdout
    r = b.ok("post", "alice/ops", "deploy", "is", "green")
    assert "sent to alice" in r.stdout
    first = posted(r)
    res = json.loads(b.ok("post", "alice/ops", "-", "--json", input="from stdin\n").stdout)
    # The answer names whom the post went to (the CLI asks for no peer list).
    alice_key = json.loads(a.ok("status", "--json").stdout)["key"]
    assert res["sent_to"] == [alice_key] and res["names"] == {alice_key: "alice"}

    # The owner sees bob's posts, oldest first.
    wait_for(lambda: "from stdin" in a.ok("get", "ops").stdout, 20, "bob's posts at alice")
    lines = a.ok("get", "ops").stdout.splitlines()
    assert re.fullmatch(rf"{first}  bob  (just now|\d+s ago)", lines[0]), lines
    assert lines[1] == "  deploy is green" and lines[-1] == "  from stdin"

    # A reply sits under its parent, on both sides.
    r = a.ok("reply", first[:6], "thanks", "bob")
    m = POSTED.fullmatch(r.stdout.strip())
    assert m and m.group(1) == "replied" and m.group(3) == first and m.group(4) == "alice/ops"
    assert m.group(5) == "sent to bob", r.stdout
    reply = m.group(2)

    def bob_view():
        out = b.ok("get", "alice/ops").stdout
        return out if "thanks bob" in out else None

    lines = wait_for(bob_view, 20, "the reply at bob").splitlines()
    i = lines.index("  deploy is green")
    assert re.fullmatch(rf"{first}  bob \(you\)  .*", lines[i - 1])
    assert re.fullmatch(rf"  {reply}  alice  .*", lines[i + 1]) and lines[i + 2] == "    thanks bob"

    # --thread: the post and its replies only; --json: the API's shape.
    res = json.loads(b.ok("get", "alice/ops", "--thread", first, "--json").stdout)
    assert [p["id"] for p in res["posts"]] == [first, reply]
    assert res["topic"]["label"] == "alice/ops" and res["posts"][1]["parent"].startswith(first)
    assert res["posts"][0]["mine"] is True and res["posts"][1]["author_name"] == "alice"

    # topics on both sides.
    rows = [r.split() for r in a.ok("topics").stdout.splitlines()]
    assert rows[0][:4] == ["TOPIC", "SUBSCRIBED", "POSTS", "UNREAD"]
    assert rows[1][:2] == ["alice/ops", "owner"] and rows[1][4:7] == ["grant", "grant", "-"]
    row = next(r for r in b.ok("topics").stdout.splitlines() if r.startswith("alice/ops"))
    assert row.split()[:2] == ["alice/ops", "yes"] and row.endswith("Deploys and incidents")

    # subscribe --once: exit 0 with what arrived, exit 2 when nothing does.
    waiting = subscribing(b, "alice/ops", "--once", "--timeout", "30s")
    a.ok("post", "ops", "rollout at 14:00")
    code, out, err = finish(waiting)
    assert code == 0, err
    assert re.match(r"alice/ops  [0-9a-f]{10}  alice  ", out) and "  rollout at 14:00" in out
    assert "subscribed to alice/ops" in err
    r = b.run("subscribe", "alice/ops", "--once", "--timeout", "1s")
    assert r.returncode == 2 and r.stdout == "" and "nothing new after 1s" in r.stderr

    # --json: one post object a line.
    waiting = subscribing(b, "alice/ops", "--once", "--timeout", "30s", "--json")
    a.ok("post", "ops", "as json")
    code, out, err = finish(waiting)
    assert code == 0, err
    objs = [json.loads(ln) for ln in out.splitlines()]
    assert [o["text"] for o in objs] == ["as json"] and objs[0]["label"] == "alice/ops"

    # edit: every host shows the new text, marked edited.
    assert b.ok("edit", first, "deploy is green (all regions)").stdout.startswith(
        f"edited {first} (record ")

    def edited_at_alice():
        out = a.ok("get", "ops").stdout
        return out if "all regions" in out else None

    out = wait_for(edited_at_alice, 20, "the edit at alice")
    assert re.search(rf"{first}  bob  \S+ ago  edited\n  deploy is green \(all regions\)", out)

    # delete (bob's own post) and hide (alice's power over her topic).
    doomed = posted(b.ok("post", "alice/ops", "oops, wrong topic"))
    wait_for(lambda: "oops" in a.ok("get", "ops").stdout, 20, "the doomed post at alice")
    assert b.ok("delete", doomed).stdout.startswith(f"deleted {doomed}")
    wait_for(lambda: "oops" not in a.ok("get", "ops").stdout, 20, "the delete at alice")
    r = a.run("delete", first)
    assert r.returncode == 1 and "only its author" in r.stderr
    assert a.ok("hide", first).stdout.startswith(f"hid {first}")
    wait_for(lambda: "all regions" not in b.ok("get", "alice/ops").stdout, 20, "the hide at bob")
    # The reply stays, now naming the parent it no longer sits under.
    assert re.search(rf"{reply}  alice  \S+ ago  re {first}", b.ok("get", "alice/ops").stdout)


def test_files_ride_inside_posts_and_save_safely(homes, cli_root):
    a, b = pair(homes)
    a.ok("topic", "create", "drop", "--open")
    subscribed(b, "alice/drop")
    small = os.path.join(cli_root, "report.txt")
    with open(small, "wb") as f:
        f.write(os.urandom(30_000))
    big = os.path.join(cli_root, "big.bin")
    with open(big, "wb") as f:
        f.write(os.urandom(60_000))

    r = b.run("post", "alice/drop", "too big", "--file", big)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("awp post: --file big.bin (58.6 KiB): the post would be about")
    assert "awp send --file" in r.stderr
    pid = posted(b.ok("post", "alice/drop", "the report", "--file", small))

    inbox = os.path.join(cli_root, "in")
    os.makedirs(inbox)
    with open(os.path.join(inbox, "report.txt"), "w") as f:
        f.write("already here")

    def saved():
        out = a.ok("get", "drop", "--save", inbox).stdout
        return out if "file report.txt" in out else None

    out = wait_for(saved, 20, "the file at alice")
    assert f"{pid}  bob" in out
    m = re.search(r"  file report\.txt \(29\.3 KiB, text/plain\): (\S+)", out)
    assert m, out
    with open(m.group(1), "rb") as f, open(small, "rb") as g:
        assert f.read() == g.read()
    assert os.path.dirname(m.group(1)) == inbox
    with open(os.path.join(inbox, "report.txt")) as f:
        assert f.read() == "already here"  # never overwritten
    res = json.loads(a.ok("get", "drop", "--save", inbox, "--json").stdout)
    (s,) = res["saved"]
    assert s["name"] == "report.txt" and s["path"].startswith(inbox + os.sep)
    part = res["posts"][0]["parts"][1]
    assert part["k"] == "file" and part["size"] == 30_000 and part["mime"] == "text/plain"

    # A topic's own max_post is checked before the daemon is asked.
    a.ok("topic", "set", "drop", "--max-post", "16KiB")
    wait_for(lambda: "16.0 KiB a post" in b.ok("topic", "show", "alice/drop").stdout, 20,
             "the new policy at bob")
    r = b.run("post", "alice/drop", "again", "--file", small)
    assert r.returncode == 1 and "over the 16.0 KiB a post on alice/drop may have" in r.stderr
    r = b.run("post", "alice/drop", "y" * 20_000)  # a big text post: checked here too
    assert r.returncode == 1 and "over the 16.0 KiB a post on alice/drop may have" in r.stderr
    # A small text post goes straight to the daemon, whose refusal says as much.
    a.ok("topic", "set", "drop", "--max-post", "1KiB")
    wait_for(lambda: "1.0 KiB a post" in b.ok("topic", "show", "alice/drop").stdout, 20,
             "the smaller max_post at bob")
    before = b.ok("get", "alice/drop", "-n", "0", "--json").stdout.count('"hash"')
    r = b.run("post", "alice/drop", "y" * 2_000)
    assert r.returncode == 1 and "larger than the topic's max_post" in r.stderr, r.stderr
    assert "send big files with awp send --file" in r.stderr
    assert b.ok("get", "alice/drop", "-n", "0", "--json").stdout.count('"hash"') == before


def test_get_since_and_wait(homes):
    a, b = pair(homes)
    a.ok("topic", "create", "news", "--open")
    subscribed(b, "alice/news")
    a.ok("post", "news", "old news")
    wait_for(lambda: "old news" in b.ok("get", "alice/news").stdout, 20, "old news at bob")

    r = b.run("get", "alice/news", "--since", "2026-01-01T00:00:00Z", "-n", "0")
    assert r.returncode == 0 and "old news" in r.stdout
    r = b.run("get", "alice/news", "--since", "yesterday")
    assert r.returncode == 2 and "neither a duration" in r.stderr

    # Nothing since now: --wait waits for the next post, or exits 2.
    waiting = start(b, "get", "alice/news", "--since", "0s", "--wait", "--timeout", "30s")
    # Post once bob's daemon counts a waiter (its cursor is taken by then).
    bob_api = LocalClient(os.path.join(b.path, "awp.sock"))
    wait_for(lambda: bob_api.get("/v1/activity")["waits"] > 0, 20, "get --wait waiting")
    a.ok("post", "news", "fresh news")
    code, out, err = finish(waiting)
    assert code == 0, err
    assert "fresh news" in out and "old news" not in out
    r = b.run("get", "alice/news", "--since", "0s", "--wait", "--timeout", "1s")
    assert r.returncode == 2 and "nothing new on alice/news after 1s" in r.stderr
    # awp subscribe follows for --timeout, then ends: 2 when nothing came
    r = b.run("subscribe", "alice/news", "--timeout", "1s")
    assert r.returncode == 2 and "nothing new after 1s" in r.stderr, r.stderr


def test_revoke_stops_new_posts_and_ban(homes):
    a, b = pair(homes)
    a.ok("topic", "create", "ops")
    a.ok("topic", "create", "lobby", "--open")
    a.ok("topic", "create", "hall", "--open")  # where bob leaves markers
    a.ok("topic", "grant", "ops", "bob")
    for t in ("ops", "lobby", "hall"):
        subscribed(b, f"alice/{t}")
    posted(b.ok("post", "alice/ops", "before revoke"))
    wait_for(lambda: "before revoke" in a.ok("get", "ops").stdout, 20, "the post at alice")

    def marker(text: str) -> None:
        """Bob posts on an open topic; once alice has it, his earlier lines were read."""
        b.ok("post", "alice/hall", text)
        wait_for(lambda: text in a.ok("get", "hall").stdout, 20, f"{text!r} at alice")

    r = a.ok("topic", "revoke", "ops", "bob")
    assert r.stdout == ("revoked bob on alice/ops; nothing new of theirs is taken, whatever"
                        " time it claims\n"), r.stdout
    r = a.run("topic", "revoke", "ops", "bob")
    assert r.returncode == 1 and r.stderr.startswith("awp topic revoke: ")
    # The new topic document reaches bob too: his daemon refuses to post under the
    # revoked grant, and alice would not take such a post anyway.
    wait_for(lambda: json.loads(b.ok("topic", "show", "alice/ops", "--json").stdout)
             ["policy"]["members"] == [], 20, "the revocation at bob")
    r = b.run("post", "alice/ops", "after revoke")
    assert r.returncode == 1 and r.stderr.startswith("awp post: no grant to post to alice/ops")
    marker("marker 1")
    out = a.ok("get", "ops").stdout
    assert "before revoke" in out and "after revoke" not in out

    # Banned: even an open topic refuses the key.
    r = a.ok("topic", "ban", "lobby", "bob")
    assert r.stdout == "banned bob from alice/lobby\n"
    t = json.loads(a.ok("topic", "show", "lobby", "--json").stdout)
    assert t["policy"]["banned"] == [json.loads(b.ok("status", "--json").stdout)["key"]]
    assert "  banned     bob\n" in a.ok("topic", "show", "lobby").stdout  # by name
    b.run("post", "alice/lobby", "while banned")
    marker("marker 2")
    assert "while banned" not in a.ok("get", "lobby").stdout
    assert a.ok("topic", "ban", "lobby", "bob", "--unban").stdout == (
        "unbanned bob on alice/lobby\n")
    wait_for(lambda: b.run("post", "alice/lobby", "welcome back").returncode == 0, 20,
             "bob posting again")
    wait_for(lambda: "welcome back" in a.ok("get", "lobby").stdout, 20, "bob's post at alice")


def test_open_topic_through_a_relay_to_a_third_daemon(homes):
    a, b = pair(homes)
    c = homes("c")
    c.ok("up", "--name", "carol")
    c.ok("connect", b.address)  # carol knows only bob
    akey = json.loads(a.ok("status", "--json").stdout)["key"]
    topic = f"{akey}/lobby"

    r = a.ok("topic", "create", "lobby", "--open", "--title", "Anyone")
    assert r.stdout == "created topic alice/lobby: read open, post open\n"
    a.ok("post", "lobby", "welcome")
    b.ok("subscribe", "alice/lobby", "--once", "--timeout", "20s")  # the relay, and the backlog
    # Carol names the topic by its owner's key; the backlog comes through bob.
    code, out, err = finish(start(c, "subscribe", topic, "--once", "--timeout", "30s"))
    assert code == 0, err
    assert "welcome" in out

    waiting = subscribing(c, topic, "--once", "--timeout", "30s")
    a.ok("post", "lobby", "live through bob")
    code, out, err = finish(waiting)
    assert code == 0, err
    assert "live through bob" in out

    # Carol posts; alice, who has never met her, gets it through bob.
    pid = posted(c.ok("post", topic, "hi from carol"))
    wait_for(lambda: "hi from carol" in a.ok("get", "lobby").stdout, 20, "carol's post at alice")
    # Alice has never met carol: the post names her by her key.
    ckey = json.loads(c.ok("status", "--json").stdout)["key"]
    assert re.search(rf"{pid}  {re.escape(ckey[8:18])}  ", a.ok("get", "lobby").stdout)
    rows = [r.split() for r in c.ok("topics").stdout.splitlines()[1:]]
    assert rows and rows[0][1:7] == ["yes", rows[0][2], rows[0][3], "open", "open", "-"]
    r = c.ok("unsubscribe", topic)
    assert r.stdout.startswith("unsubscribed from ")
    assert json.loads(c.ok("topic", "show", topic, "--json").stdout)["subscribed"] is False


def test_subscribe_once_waits_in_the_subscribe_request(homes):
    """``POST /v1/board/subscribe`` with ``wait`` also waits for posts past its cursor, as
    ``/v1/board/wait`` would, and ``brief`` answers only which topic and whether its
    document is here: ``awp subscribe TOPIC --once`` with a short wait is one request."""
    from awp.localapi.client import LocalClient

    a, b = pair(homes)
    a.ok("topic", "create", "ops", "--open")
    first = posted(a.ok("post", "ops", "standup at ten"))
    bob = LocalClient.for_home(b.path)
    res = bob.post("/v1/board/subscribe", {"topic": "alice/ops", "timeout": 5, "brief": True,
                                           "wait": 20})
    assert res["subscribed"] is True and isinstance(res["cursor"], int)
    assert set(res["topic"]) == {"topic", "label", "known", "subscribed"}
    assert res["topic"]["label"] == "alice/ops" and res["topic"]["known"] is True
    got = res["wait"]  # the owner's backlog, arrived after the cursor
    assert got["timed_out"] is False and [p["id"] for p in got["posts"]] == [first]
    assert got["cursor"] > res["cursor"]
    # Nothing new past the cursor: an empty wait, timed out, on the same answer.
    res = bob.post("/v1/board/subscribe", {"topic": "alice/ops", "wait": 0})
    assert res["wait"] == {"posts": [], "cursor": res["wait"]["cursor"], "timed_out": True}
    assert "policy" in res["topic"]  # without brief: the full topic object, as before
    assert "wait" not in bob.post("/v1/board/subscribe", {"topic": "alice/ops"})

    r = b.run("subscribe", "alice/ops", "--once", "--timeout", "0s")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "subscribed to alice/ops\nnothing new after 0s\n"
    second = posted(a.ok("post", "ops", "moved to eleven"))
    wait_for(lambda: second in b.ok("get", "alice/ops").stdout, 20, "the post at bob")
    r = b.run("subscribe", "alice/ops", "--once", "--timeout", "1s")
    assert (r.returncode, r.stderr) == (2, "subscribed to alice/ops\nnothing new after 1s\n")
