"""A thread is (peer, id), and a peer name never passes for another peer's.

Thread ids are chosen by whoever opens a thread, so a third peer can send a
line with the id two others use; names are what peers say they are called,
so another key can claim "builder " next to "builder". Neither may merge into
or shadow what the user meant.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading

import pytest
from nodes import ROOT, wait_for
from rawpeer import RawPeer

from awp.localapi.client import ApiFailure
from awp.wire.keys import short_key


def awp(node, *args: str) -> subprocess.CompletedProcess:
    """The real CLI against ``node``'s home."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("AWP_"):
            env.pop(k)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "awp", args[0], "--home", node.home, *args[1:]],
                          capture_output=True, text=True, timeout=90, env=env, cwd=ROOT)


def texts(records: list[dict]) -> list[str]:
    return [p.get("text") for r in records if r["t"] == "msg" for p in r["line"]["parts"]]


@pytest.fixture
def trio_nodes(make_node):
    """A talks with B on one thread; C is connected to A too."""
    a, b, c = make_node("a").start(), make_node("b").start(), make_node("c").start()
    a.connect(b)
    c.connect(a)
    th = a.send(b.key, "A to B", subject="the A-B task")["th"]
    wait_for(lambda: b.inbound(th=th), 20, "B has A's message")
    b.send(None, "B to A", th=th)
    wait_for(lambda: texts(a.inbound(th=th)) == ["B to A"], 20, "A has B's reply")
    return a, b, c, th


def test_third_peer_using_a_thread_id_gets_its_own_thread(trio_nodes):
    a, b, c, th = trio_nodes
    c.send(a.key, "C pretends to be in the A-B thread", th=th)
    wait_for(lambda: a.inbound(peer=c.key), 20, "A has C's line")

    # A bare id used by two peers is refused, naming both and how to pick one.
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/read", {"th": th, "mark": False})
    assert e.value.status == 409 and e.value.code == "ambiguous_thread"
    for key in (b.key, c.key):
        assert short_key(key) in e.value.message
    assert f"awp read {th} -p " in e.value.message
    r = awp(a, "read", th)
    assert r.returncode == 1 and "ambiguous" not in r.stdout
    assert "used by 2 peers" in r.stderr and short_key(c.key) in r.stderr, r.stderr

    # Naming the peer shows that conversation only.
    mine = a.api("POST", "/v1/read", {"th": th, "peer": b.key, "mark": False})["records"]
    assert {x["peer"] for x in mine} == {b.key}
    assert texts(mine) == ["A to B", "B to A"]
    r = awp(a, "read", th, "-p", short_key(b.key), "--no-mark")
    assert r.returncode == 0 and "B to A" in r.stdout and "C pretends" not in r.stdout
    theirs = a.api("POST", "/v1/read", {"th": th, "peer": c.key, "mark": False})["records"]
    assert texts(theirs) == ["C pretends to be in the A-B thread"]

    # The thread list keeps two rows; replying or setting a state by bare id refuses.
    rows = [t for t in a.api("GET", "/v1/threads") if t["th"] == th]
    assert sorted(t["peer"] for t in rows) == sorted([b.key, c.key])
    assert next(t for t in rows if t["peer"] == b.key)["subject"] == "the A-B task"
    for path, body in (("/v1/send", {"th": th, "parts": [{"k": "text", "text": "x"}]}),
                       ("/v1/state", {"th": th, "state": "done"}),
                       ("/v1/private", {"th": th}),
                       ("/v1/inbox", {"th": th, "mark": False})):
        with pytest.raises(ApiFailure) as e:
            a.api("POST", path, body)
        assert e.value.code == "ambiguous_thread", path
    with pytest.raises(ApiFailure) as e:
        a.api("GET", "/v1/events", th=th)  # awp tail -t
    assert e.value.code == "ambiguous_thread" and "awp tail -t" in e.value.message
    r = awp(a, "state", th, "done")
    assert r.returncode == 1 and f"awp state {short_key(b.key)} {th} STATE" in r.stderr
    assert awp(a, "state", short_key(b.key), th, "done").returncode == 0
    assert next(t for t in a.api("GET", "/v1/threads", peer=b.key) if t["th"] == th)[
        "mine"] == "done"
    assert next(t for t in a.api("GET", "/v1/threads", peer=c.key) if t["th"] == th)[
        "mine"] == "open"

    # A thread id spelled like a peer's name does not shadow the peer.
    c.send(a.key, "C's thread named after B", th="b")
    wait_for(lambda: a.inbound(th="b"), 20, "A has C's thread 'b'")
    r = awp(a, "read", "b", "--no-mark")
    assert r.returncode == 1 and "both a peer and a thread id" in r.stderr, r.stdout
    r = awp(a, "read", "-p", "b", "--no-mark")
    assert r.returncode == 0 and "B to A" in r.stdout and "named after B" not in r.stdout


def test_wait_on_a_thread_is_not_woken_by_another_peer(trio_nodes):
    a, b, c, th = trio_nodes
    a.api("POST", "/v1/read", {"th": th})  # B's reply is read
    result: dict = {}

    def waiter() -> None:
        try:
            result["res"] = a.api("POST", "/v1/wait", {"th": th, "timeout": 60})
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            result["err"] = e

    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: a.api("GET", "/v1/activity").get("waits"), 20, "A blocked in wait")
    c.send(a.key, "C's line in B's thread", th=th)
    wait_for(lambda: a.inbound(peer=c.key), 20, "A has C's line")
    assert t.is_alive() and not result, result
    b.send(None, "B's next line", th=th)
    t.join(60)
    assert "err" not in result, result
    res = result["res"]
    assert not res["timed_out"] and res["peer"] == b.key
    assert texts(res["records"]) == ["B's next line"]
    # C's line is still unread, in C's own thread.
    left = a.api("POST", "/v1/inbox", {"th": th, "peer": c.key, "mark": False})["records"]
    assert texts(left) == ["C's line in B's thread"]
    # A wait by bare id, now that two peers use it, says so instead of picking.
    r = awp(a, "wait", "-t", th, "--timeout", "1s")
    assert r.returncode == 1 and "used by 2 peers" in r.stderr, r.stderr


def test_lookalike_names_never_merge_or_shadow(make_node):
    a = make_node("a").start()
    b = make_node("b")
    b.name = "builder"
    b.start()
    b.connect(a)
    assert awp(a, "send", "builder", "hi").returncode == 0
    with RawPeer(a.address, name="Builder \u200b") as evil, \
            RawPeer(a.address, name="\u202eredliub") as bidi:
        assert evil.handshake()["t"] == "resume"
        evil.resume()
        assert bidi.handshake()["t"] == "resume"
        bidi.resume()
        peers = {p["key"]: p for p in a.api("GET", "/v1/peers")}
        assert peers[evil.key]["name"] == "Builder"            # normalised, not "Builder \u200b"
        assert peers[bidi.key]["name"] == "redliub"            # no bidi override kept
        assert peers[evil.key]["lookalike"] and peers[b.key]["lookalike"]

        r = awp(a, "send", "builder", "who gets this?")
        assert r.returncode == 1, r.stdout
        assert "look-alike" in r.stderr
        assert short_key(b.key) in r.stderr and short_key(evil.key) in r.stderr
        r = awp(a, "peers")
        assert r.returncode == 0
        lines = [x for x in r.stdout.splitlines() if "uilder" in x]
        assert len(lines) == 2, r.stdout
        assert any(short_key(b.key) in x for x in lines)
        assert any(short_key(evil.key) in x for x in lines)
        assert all("look-alike" in x for x in lines), r.stdout
        assert "\u200b" not in r.stdout and "\u202e" not in r.stdout

        # A record from each shows which key it came from.
        sent = evil.msg("from the look-alike", th="thr_evil0001")
        evil.expect("ack", re=sent["id"])
        rec = wait_for(lambda: a.inbound(peer=evil.key), 20, "A has the look-alike's line")[0]
        assert rec["peer_name"] == f"Builder ({short_key(evil.key)})"
        # An alias or a key prefix still picks exactly one.
        assert awp(a, "alias", short_key(b.key), "realb").returncode == 0
        r = awp(a, "send", "--json", "realb", "to the real one")
        assert r.returncode == 0 and json.loads(r.stdout)["peer"] == b.key


def _mirrored(node) -> list[tuple]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return con.execute("SELECT of, th FROM mirrors").fetchall()


def test_private_from_a_third_peer_withdraws_only_its_own_thread(make_node):
    """C making "its" copy of an id private must not wipe the host's copy of A-B."""
    host, a, b = make_node("host").start(), make_node("a").start(), make_node("b").start()
    a.connect(host)
    a.connect(b)
    a.api("POST", "/v1/share", {"hosts": [host.key]})
    th = a.send(b.key, "A-B, shared with the host")["th"]
    wait_for(lambda: (b.key, th) in _mirrored(host), 20, "the host has A-B")
    with RawPeer(a.address, name="c") as c:
        assert c.handshake()["t"] == "resume"
        c.resume()
        sent = c.msg("C uses the same id", th=th)
        c.expect("ack", re=sent["id"])
        wait_for(lambda: (c.key, th) in _mirrored(host), 20, "the host has C's copy")
        sent = c.send_line({"t": "private", "th": th})
        c.expect("ack", re=sent["id"])
        wait_for(lambda: (c.key, th) not in _mirrored(host), 20, "the host forgets C's copy")
    assert (b.key, th) in _mirrored(host)
    rows = {t["peer"]: t for t in a.api("GET", "/v1/threads") if t["th"] == th}
    assert rows[c.key]["private"] and not rows[b.key]["private"]
