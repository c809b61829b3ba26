"""Presence across a chain of daemons, forged documents, sharing and private."""

from __future__ import annotations

import sqlite3
import time

from nodes import wait_for
from rawpeer import RawPeer

from awp.wire.keys import Identity
from awp.wire.presence import sign_doc
from awp.wire.timefmt import format_ts, now_ms


def _presence(node) -> dict[str, tuple[int, int]]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return {o: (seq, hops) for o, seq, hops in
                con.execute("SELECT origin, seq, hops FROM presence")}


def _mirrors(node) -> list[tuple]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return con.execute("SELECT sharer, th, dir, line FROM mirrors").fetchall()


def test_presence_crosses_a_chain_of_four(make_node):
    ns = [make_node(x, extra=["--presence"]).start() for x in "abcd"]
    for x, y in zip(ns, ns[1:], strict=False):
        x.connect(y)
    a, _b, _c, d = ns
    seen = wait_for(lambda: _presence(d).get(a.key), 20, "d sees a")
    assert seen[1] == 2  # relayed by b (hops 1) and c (hops 2): three links away
    # a change on the far end reaches d as a newer document
    before = seen[0]
    a.send(ns[1].key, "something changed", subject="news")
    wait_for(lambda: _presence(d)[a.key][0] > before, 20, "newer doc reaches d")


def test_non_publishing_node_still_relays(make_node):
    a = make_node("a", extra=["--presence"]).start()
    b = make_node("b").start()  # does not publish
    c = make_node("c").start()
    a.connect(b)
    b.connect(c)
    wait_for(lambda: a.key in _presence(c), 20, "c sees a through b")
    assert b.key not in _presence(c) and b.key not in _presence(a)


def _doc(ident: Identity, seq: int, ts_ms: int, **extra) -> str:
    doc = {"origin": ident.key, "name": "raw", "seq": seq, "ts": format_ts(ts_ms),
           "peers": [], "threads": [], "version": "x", "harness": "", "model": "", "host": "h",
           "waiting": False, "outbox": 0, "unread": 0, **extra}
    return sign_doc(ident, doc)


def test_forged_old_future_oversized_and_malformed_docs_are_dropped(make_node):
    a = make_node("a").start()
    me = Identity.generate()
    with RawPeer(a.address, me) as p:
        p.handshake()
        now = now_ms()
        good = _doc(me, 5, now)
        import json

        tampered = json.loads(good)
        tampered["name"] = "evil"
        bad_lines = [
            {"t": "presence", "hops": 0, "doc": tampered},
            {"t": "presence", "hops": 0, "doc": json.loads(_doc(me, 6, now - 11 * 60_000))},
            {"t": "presence", "hops": 0, "doc": json.loads(_doc(me, 7, now + 6 * 60_000))},
            {"t": "presence", "hops": 0, "doc": json.loads(_doc(me, 8, now, about="x" * 70_000))},
            {"t": "presence", "hops": 0, "doc": "not an object"},
            {"t": "presence", "hops": "zero", "doc": json.loads(good)},
        ]
        for line in bad_lines:
            p.send_line(line)
        assert p.ping()["t"] == "pong"
        assert me.key not in _presence(a)
        # the genuine one is kept, a replay of an older seq is not
        p.send_line({"t": "presence", "hops": 0, "doc": json.loads(good)})
        assert p.ping()["t"] == "pong"
        wait_for(lambda: _presence(a).get(me.key) == (5, 0), 5, "good doc stored")
        p.send_line({"t": "presence", "hops": 0, "doc": json.loads(_doc(me, 4, now))})
        assert p.ping()["t"] == "pong"
        assert _presence(a)[me.key][0] == 5


def test_relay_forwards_the_origin_bytes_and_old_peers_get_none(make_node):
    a = make_node("a").start()
    origin = Identity.generate()
    old = RawPeer(a.address, name="old")  # predates presence: no presence cap
    watcher = RawPeer(a.address, name="watcher")
    src = RawPeer(a.address, origin, name="src")
    try:
        assert old.handshake()["t"] == "resume"
        assert watcher.handshake(caps=["chat", "presence"])["t"] == "resume"
        assert src.handshake(caps=["chat", "presence"])["t"] == "resume"
        # a doc whose bytes our own writer would not produce (spaces, key order)
        raw = _doc(origin, 9, now_ms(), about="<&> é").replace('","', '", "')
        src.send_line(('{"t":"presence","id":"' + src.ids.next() + '","ts":"'
                       + format_ts(now_ms()) + '","hops":0,"doc":' + raw + "}").encode())
        got = watcher.recv_until(lambda x: x.get("t") == "presence", 10)
        assert got["hops"] == 1
        assert watcher.received[-1].endswith(b'"doc":' + raw.encode() + b"}")
        old.ping()
        assert not [x for x in old.skipped if x.get("t") == "presence"]
        assert not [x for x in old.received if b'"presence"' in x[:40]]
    finally:
        for p in (old, watcher, src):
            p.close()


def test_sharing_notice_mirror_private_and_withdraw(make_node):
    host = make_node("host").start()
    sharer = make_node("sharer").start()
    other = make_node("other").start()
    sharer.connect(host)
    sharer.connect(other)
    sharer.api("POST", "/v1/share", {"hosts": ["host"]})
    # the other party learns about it on its next connection
    other.stop()
    other.start()
    sharer.connect(other)
    notice = wait_for(lambda: [r for r in other.api("POST", "/v1/inbox", {"mark": False})[
        "records"] if r["dir"] == "notice" and "shares its conversations" in r["line"]["text"]],
        10, "sharing notice")
    assert host.key[8:18] in notice[0]["line"]["text"]
    r = sharer.send(other.key, "shared hello", subject="shared task")
    other.send(None, "reply from other", th=r["th"])
    rows = wait_for(lambda: len(_mirrors(host)) >= 2 and _mirrors(host), 10, "mirrored both ways")
    assert {x[2] for x in rows} == {"in", "out"}
    # never in the host's own inbox
    assert host.inbound() == []
    # files are described, never copied
    other.api("POST", "/v1/private", {"th": r["th"]})
    wait_for(lambda: not _mirrors(host), 10, "host forgets the thread")
    sharer.send(other.key, "after private", th=r["th"])
    assert not _mirrors(host)
    # stop sharing: the other party is told on the next connection
    sharer.api("POST", "/v1/share", {"stop": True})
    other.stop()
    other.start()
    sharer.connect(other)
    wait_for(lambda: [x for x in other.api("POST", "/v1/inbox", {"mark": False})["records"]
                      if "stopped sharing" in x["line"].get("text", "")], 10, "stop notice")


def test_batched_presence_in_and_out(make_node):
    """A batch line is taken apart doc by doc; relays batch for peers that say
    presence-batch and send one line per document to peers that do not."""
    a = make_node("a").start()
    src_id, far1, far2, forger = (Identity.generate() for _ in range(4))
    src = RawPeer(a.address, src_id, name="src")
    batcher = RawPeer(a.address, name="batcher")
    single = RawPeer(a.address, name="single")
    try:
        assert batcher.handshake(caps=["chat", "presence", "presence-batch"])["t"] == "resume"
        assert single.handshake(caps=["chat", "presence"])["t"] == "resume"
        assert src.handshake(caps=["chat", "presence", "presence-batch"])["t"] == "resume"
        now = now_ms()
        d0, d1, d2 = _doc(src_id, 3, now), _doc(far1, 4, now), _doc(far2, 5, now)
        tampered = _doc(forger, 6, now).replace('"name":"', '"name":"x')
        line = ('{"t":"presence","id":"' + src.ids.next() + '","ts":"' + format_ts(now)
                + '","hops":0,"doc":' + d0 + ',"more":[{"hops":1,"doc":' + d1 + '},'
                + '{"hops":2,"doc":' + tampered + '},{"hops":2,"doc":' + d2 + "}]}")
        src.send_line(line.encode())
        wait_for(lambda: {src_id.key, far1.key, far2.key} <= set(_presence(a)), 10,
                 "the three good documents stored")
        assert forger.key not in _presence(a)
        assert _presence(a)[far2.key] == (5, 2)
        got = batcher.recv_until(lambda x: x.get("t") == "presence", 10)
        carried = [(got["hops"], got["doc"]["origin"])] + [
            (m["hops"], m["doc"]["origin"]) for m in got.get("more", [])]
        assert sorted(carried) == sorted([(1, src_id.key), (2, far1.key), (3, far2.key)])
        raw = batcher.received[-1]
        for d in (d0, d1, d2):  # the origins' exact bytes
            assert d.encode() in raw
        seen = set()
        while len(seen) < 3:
            one = single.recv_until(lambda x: x.get("t") == "presence", 10)
            assert "more" not in one
            seen.add(one["doc"]["origin"])
        assert seen == {src_id.key, far1.key, far2.key}
    finally:
        for p in (src, batcher, single):
            p.close()


def _lines_to(node, key: str) -> int:
    return node.api("GET", "/v1/status")["presence"]["lines_by_peer"].get(key, 0)


def test_an_agent_busy_on_the_board_costs_no_presence_line_per_call(make_node):
    """Posts and waits mark the agent active; that must not sign a document per call."""
    a = make_node("a", extra=["--presence"]).start()
    b = make_node("b").start()
    a.connect(b)
    wait_for(lambda: a.key in _presence(b), 20, "b has a's document")
    a.api("POST", "/v1/board/topic", {"name": "busy", "read": "open", "post": "open"})
    topic = f"{a.key}/busy"
    start = _lines_to(a, b.key)
    cursor = a.api("POST", "/v1/board/wait", {"topics": [topic], "timeout": 0})["cursor"]
    # 24 s of an agent at work: a post every 3 s, every other one followed by a
    # 2.5 s wait, so each document read after a post's event finds the agent
    # in another state than the one before.
    for i in range(8):
        a.api("POST", "/v1/board/post", {"topic": topic,
                                         "parts": [{"k": "text", "text": f"step {i}"}]})
        if i % 2:
            cursor = a.api("POST", "/v1/board/wait",
                           {"topics": [topic], "after": cursor, "timeout": 2.5})["cursor"]
            time.sleep(0.5)
        else:
            time.sleep(3)
    sent = _lines_to(a, b.key) - start
    # Activity rides the heartbeat (every 60 s): at most one, and the link's slack.
    assert sent <= 2, sent
