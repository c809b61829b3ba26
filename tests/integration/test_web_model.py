"""The rules behind the web API, without processes: host check, statuses,
links, threads, activity items."""

from __future__ import annotations

import pytest

from awp.web import activity, model
from awp.web.server import host_allowed, is_loopback_host, normalize_allowed, parse_listen
from awp.wire.timefmt import format_ts

SELF = "ed25519:" + "A" * 43
PEER = "ed25519:" + "B" * 43
FAR = "ed25519:" + "C" * 43
GHOST = "ed25519:" + "D" * 43
NOW = 1_800_000_000_000


@pytest.mark.parametrize("host,ok", [
    ("localhost", True), ("localhost:7788", True), ("a.b.localhost", True), ("127.0.0.1", True),
    ("127.9.9.9:80", True), ("[::1]:7788", True), ("[::1]", True), ("LocalHost.", True),
    ("evil.example", False), ("localhost.evil.example", False), ("", False), (None, False),
    ("[::1", False), ("localhost:x", False), ("192.168.1.2", False), ("proxy.internal", True),
    ("proxy.internal:443", True),
])
def test_host_check(host, ok):
    assert host_allowed(host, normalize_allowed(["proxy.internal"])) is ok


def test_listen_addresses():
    assert parse_listen("127.0.0.1:7788") == ("127.0.0.1", 7788)
    assert parse_listen("[::1]:80") == ("::1", 80)
    assert parse_listen(":9000") == ("0.0.0.0", 9000)
    assert parse_listen("8080") == ("127.0.0.1", 8080)
    for bad in ("nohost", "1.2.3.4:99999", "[::1]80"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    assert is_loopback_host("127.0.0.1") and is_loopback_host("::1")
    assert is_loopback_host("localhost") and not is_loopback_host("0.0.0.0")


def _snap(**kw):
    snap = {
        "now": NOW,
        "self": {"key": SELF, "name": "me@box", "version": "0.5.0", "host": "box",
                 "presence": True, "address": "tcp:127.0.0.1:1", "listeners": [],
                 "active": NOW - 60_000, "waiting": False},
        "counts": {"unread": 0, "notices": 0, "queued": 0},
        "peers": [], "presence": [], "threads": [], "mirrors": [],
    }
    snap.update(kw)
    return snap


def _doc(origin, name, age_ms, **kw):
    doc = {"origin": origin, "name": name, "seq": 1, "ts": format_ts(NOW - age_ms),
           "peers": [], "threads": [], "version": "0.5.0", "harness": "codex",
           "model": "gpt-5.5", "host": "far", "waiting": False, "outbox": 0, "unread": 0}
    doc.update(kw)
    return {"origin": origin, "name": name, "doc": doc, "doc_ts": NOW - age_ms,
            "received": NOW - age_ms, "via": PEER, "hops": 2}


def test_statuses_links_and_unreachable():
    peer = {"key": PEER, "name": "claude-code@peer", "up": False, "last_seen": NOW - 5000,
            "unreachable": "connection refused", "rtt_ms": None, "transport": ""}
    st = model.build_state(_snap(
        peers=[peer],
        presence=[_doc(FAR, "far@x", 200_000, peers=[{"key": GHOST, "name": "ghost",
                                                      "up": True}])]))
    ag = {a["key"]: a for a in st["agents"]}
    assert ag[SELF]["status"] == "self" and ag[SELF]["sharing"] is True
    assert ag[PEER]["status"] == "offline" and ag[PEER]["unreachable"] == "connection refused"
    assert ag[PEER]["harness"] == "claude"  # guessed from the name
    assert ag[FAR]["status"] == "stale" and ag[FAR]["hops"] == 2 and ag[FAR]["via"] == PEER
    # A stale agent's "connected" claims count for nothing.
    assert ag[GHOST]["status"] == "offline"
    link = next(x for x in st["links"] if {x["a"], x["b"]} == {SELF, PEER})
    assert link["up"] is False and link["error"] == "connection refused"
    assert all(x["a"] < x["b"] for x in st["links"])

    fresh = model.build_state(_snap(presence=[_doc(FAR, "far@x", 10_000, peers=[
        {"key": GHOST, "name": "ghost", "up": True, "rtt": 7}])]))
    ag = {a["key"]: a for a in fresh["agents"]}
    assert ag[FAR]["status"] == "online" and ag[GHOST]["status"] == "online"
    assert ag[GHOST]["name"] == "ghost"
    assert fresh["links"][0]["rtt_ms"] == 7 and fresh["links"][0]["up"] is True
    gone = model.build_state(_snap(presence=[_doc(FAR, "far@x", 11 * 60_000)]))
    assert FAR not in {a["key"] for a in gone["agents"]}


def test_names_are_cleaned_and_lookalikes_marked():
    peer = {"key": PEER, "name": "builder", "up": True}
    st = model.build_state(_snap(
        peers=[peer],
        presence=[_doc(FAR, "Builder\u200b \u202e", 10_000,
                       peers=[{"key": GHOST, "name": "gh\u0000ost\u2066", "up": True}])]))
    ag = {a["key"]: a for a in st["agents"]}
    assert ag[FAR]["name"] == "Builder" and ag[GHOST]["name"] == "ghost"
    assert ag[PEER]["lookalike"] and ag[FAR]["lookalike"] and not ag[GHOST]["lookalike"]


def test_threads_from_every_source():
    local = {"th": "thr_l", "peer": PEER, "subject": "local", "mine": "working",
             "theirs": "open", "my_note": "n", "their_note": "", "updated": NOW - 1000,
             "unread": 2}
    far_thread = {"th": "thr_g", "peer": GHOST, "subject": "gossip", "mine": "done",
                  "theirs": "working", "updated": format_ts(NOW - 2000)}
    mirror = {"sharer": PEER, "th": "thr_m", "of": FAR, "of_name": "far", "subject": "shared",
              "last_at": NOW - 3000, "sharer_state": "waiting", "of_state": ""}
    st = model.build_state(_snap(threads=[local], mirrors=[mirror],
                                 presence=[_doc(FAR, "far@x", 5000, threads=[far_thread])]))
    by = {t["th"]: t for t in st["threads"]}
    assert [t["th"] for t in st["threads"]] == ["thr_l", "thr_g", "thr_m"]  # newest first
    t = by["thr_l"]
    assert t["local"] and t["peer"] == PEER and t["unread"] == 2
    assert (t["a"], t["a_state"], t["b"], t["b_state"]) == (SELF, "working", PEER, "open")
    g = by["thr_g"]
    assert not g["local"] and not g["shared_by"] and "peer" not in g
    assert (g["a"], g["a_state"], g["b"], g["b_state"]) == (FAR, "done", GHOST, "working")
    m = by["thr_m"]
    assert m["shared_by"] == PEER and (m["a"], m["a_state"]) == (PEER, "waiting")
    assert m["b_state"] == "open"
    ag = {a["key"]: a for a in st["agents"]}
    assert ag[SELF]["working"] and ag[GHOST]["working"] and not ag[FAR]["working"]
    assert st["stats"]["threads"] == 3 and st["stats"]["working"] == 2


def test_activity_items():
    rec = {"seq": 5, "dir": "in", "t": "msg", "id": "x", "th": "thr_1", "peer": PEER,
           "ts": NOW, "at": NOW, "line": {"t": "msg", "subject": "S",
                                          "parts": [{"k": "text", "text": "a\n b"},
                                                    {"k": "blob", "name": "f.png"}]}}
    item = activity.activity_from_record(rec, SELF, "")
    assert item["kind"] == "thread" and item["from"] == PEER and item["to"] == SELF
    assert item["text"] == "a b [file f.png]" and item["subject"] == "S"
    out = dict(rec, dir="out", t="state", line={"t": "state", "state": "done", "note": "ok"})
    item = activity.activity_from_record(out, SELF, "S")
    assert (item["kind"], item["from"], item["state"], item["text"]) == ("state", SELF, "done",
                                                                         "ok")
    assert activity.activity_from_record(dict(rec, t="notice", dir="notice", line={
        "t": "notice", "kind": "bye", "text": "bye"}), SELF)["kind"] == "bye"
    assert activity.activity_from_hint({"kind": "peer", "peer": PEER, "up": True}, {"self": SELF},
                                    NOW)["kind"] == "connected"
    assert activity.activity_from_hint({"kind": "presence", "origin": FAR, "left": True}, None,
                                    NOW)["kind"] == "left"
    old = {"threads": [{"id": "i", "th": "t", "a": FAR, "b": GHOST, "a_state": "open",
                        "b_state": "open", "local": False, "shared_by": ""}]}
    new = {"threads": [dict(old["threads"][0], b_state="done")]}
    (item,) = activity.activity_from_diff(old, new, NOW)
    assert item["kind"] == "state" and item["from"] == GHOST and item["local"] is False


def test_hosts_seen_only_on_the_board_are_agents_with_their_path():
    """An owner, author or worker this host never met, nor heard in presence, is listed
    with what the board says of it, and drawn linked to the neighbour that brought it."""
    topic = {"id": f"{GHOST}/jobs", "label": "ghost/jobs"}
    seen = [
        {"key": GHOST, "name": "ghost", "name_source": "topic document", "roles": ["owner"],
         "topics": [topic], "last": NOW - 10_000, "via": PEER, "hops": 2},
        {"key": FAR, "name": "far@x", "name_source": "presence", "roles": ["worker"],
         "topics": [topic], "last": NOW - 400_000, "via": "", "hops": None},
        {"key": PEER, "name": "builder", "name_source": "met", "roles": ["author"],
         "topics": [topic], "last": NOW, "via": PEER, "hops": 1},
        {"key": SELF, "roles": ["owner"], "topics": []},
    ]
    peer = {"key": PEER, "name": "builder", "up": True, "rtt_ms": 3, "transport": "tcp"}
    st = model.build_state(_snap(peers=[peer], board_hosts=seen))
    ag = {a["key"]: a for a in st["agents"]}
    assert ag[GHOST]["status"] == "board" and ag[GHOST]["name"] == "ghost"
    assert ag[GHOST]["heard"] == "topic document"  # a name heard of, never met
    assert ag[GHOST]["board"]["roles"] == ["owner"]
    assert ag[GHOST]["board"]["topics"] == [topic]
    assert ag[FAR]["status"] == "board" and ag[FAR]["board"]["roles"] == ["worker"]
    # a met peer keeps its own status; the board only adds its roles
    assert ag[PEER]["status"] == "connected" and ag[PEER]["heard"] == ""
    assert ag[PEER]["board"]["roles"] == ["author"]
    assert ag[SELF]["status"] == "self" and ag[SELF]["board"] is None
    via = next(x for x in st["links"] if {x["a"], x["b"]} == {PEER, GHOST})
    assert via["board"] is True and via["up"] is True  # its record came 10 s ago
    assert not any(GHOST in (x["a"], x["b"]) and SELF in (x["a"], x["b"]) for x in st["links"])
    assert [a["status"] for a in st["agents"]] == ["self", "connected", "board", "board"]


def test_board_posts_and_queue_changes_are_activity():
    post = {"seq": 3, "topic": f"{GHOST}/jobs", "label": "ghost/jobs", "kind": "post",
            "author": FAR, "ts": NOW, "of": "", "parent": "", "text": "job one"}
    item = activity.activity_from_board(post)
    assert item["kind"] == "post" and item["from"] == FAR and item["text"] == "job one"
    assert item["topic"] == f"{GHOST}/jobs" and item["subject"] == "ghost/jobs"
    reply = activity.activity_from_board({**post, "parent": "a" * 32, "text": "ok"})
    assert reply["text"] == "reply: ok"
    lease = {**post, "kind": "lease", "state": "done", "holder": PEER, "of": "b" * 32}
    item = activity.activity_from_board(lease)
    assert item["kind"] == "queue" and item["from"] == PEER and item["state"] == "done"
    assert item["text"] == "done item " + "b" * 10
    assert activity.activity_from_board({**post, "kind": "stamp"}) is None


def test_a_peers_identity_shows_verified_rotated_and_certified():
    old = "ed25519:" + "O" * 43
    op = {"op": "ed25519:" + "P" * 43, "name": "team", "status": "trusted",
          "exp": "2027-03-01T00:00:00.000Z", "device_name": "ci-7"}
    peers = [
        {"key": PEER, "name": "a", "up": True, "verified": PEER, "rotated_from": [],
         "operator": op},
        {"key": FAR, "name": "b", "up": False, "verified": old, "rotated_from": [old],
         "operator": None, "warning": "another key answers at its address"},
        {"key": GHOST, "name": "c", "up": False},
    ]
    ag = {a["key"]: a for a in model.build_state(_snap(peers=peers))["agents"]}
    assert ag[PEER]["verified"] == "verified" and ag[PEER]["operator"]["name"] == "team"
    assert ag[PEER]["operator"]["status"] == "trusted"
    assert ag[FAR]["verified"] == "carried" and ag[FAR]["rotated_from"] == [old]
    assert ag[FAR]["identity_warning"] == "another key answers at its address"
    assert ag[GHOST]["verified"] == "" and ag[GHOST]["operator"] is None
    assert ag[GHOST]["rotated_from"] == []
