"""The board between real daemons: relay, partitions, catch-up, and hostile records."""

from __future__ import annotations

import sqlite3

from nodes import wait_for
from rawpeer import RawPeer

from awp.localapi.client import ApiFailure
from awp.wire import board as wb
from awp.wire.canonical import canonical_bytes
from awp.wire.keys import Identity
from awp.wire.timefmt import now_ms


def _post(node, topic: str, text: str, **kw) -> dict:
    return node.api("POST", "/v1/board/post",
                    {"topic": topic, "parts": [{"k": "text", "text": text}], **kw})["post"]


def _texts(node, topic: str) -> list[str]:
    return [p["text"] for p in node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["posts"]]


def _rows(node, topic: str) -> list[tuple]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return con.execute("SELECT hash, kind FROM board_records WHERE topic = ?",
                           (topic,)).fetchall()


def _fails(node, path: str, body: dict) -> str:
    """The error code of a request that must fail."""
    try:
        node.api("POST", path, body)
    except ApiFailure as e:
        return e.code or ""
    raise AssertionError(f"{path} {body} succeeded")


def _open_topic(owner, name: str = "ops", **policy) -> str:
    owner.api("POST", "/v1/board/topic", {"name": name, "read": "open", "post": "open", **policy})
    return f"{owner.key}/{name}"


def _subscribed_pair(make_node, **policy):
    """a and b connected; a's open topic, which b subscribes to: ``(a, b, topic)``."""
    a, b = make_node("a").start(), make_node("b").start()
    a.connect(b)
    topic = _open_topic(a, **policy)
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    return a, b, topic


def test_a_post_crosses_a_relay_that_subscribes_exactly_once(make_node):
    a, b, c = (make_node(x).start() for x in "abc")
    a.connect(b)
    b.connect(c)
    topic = _open_topic(a)
    for n in (b, c):
        assert n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})["topic"]["known"]
    p = _post(c, topic, "from the far end")
    wait_for(lambda: "from the far end" in _texts(a, topic), 10, "a gets c's post through b")
    _post(a, topic, "and back")
    wait_for(lambda: "and back" in _texts(c, topic), 10, "c gets a's post through b")
    for n in (a, b, c):
        hashes = [h for h, _k in _rows(n, topic)]
        assert len(hashes) == len(set(hashes)) == 2
    with sqlite3.connect(a.home + "/awp.db") as con:
        hops = con.execute("SELECT hops FROM board_records WHERE hash = ?", (p["hash"],)).fetchone()
    assert hops == (1,)  # c -> b (0) -> a (1)


def test_a_host_that_does_not_subscribe_does_not_relay(make_node):
    a, b, c = (make_node(x).start() for x in "abc")
    a.connect(b)
    b.connect(c)
    topic = _open_topic(a)
    c.api("POST", "/v1/board/subscribe", {"topic": topic})
    _post(a, topic, "not for b")
    # c is subscribed but only reachable through b, which is not: nothing arrives, and
    # b holds nothing of the topic
    a.api("POST", "/v1/board/wait", {"topics": [topic], "timeout": 0.5, "mine": False})
    assert _texts(c, topic) == [] and _rows(b, topic) == []


def test_partition_and_heal_loses_nothing_and_duplicates_nothing(make_node):
    a, b, topic = _subscribed_pair(make_node)
    _post(a, topic, "before")
    wait_for(lambda: _texts(b, topic) == ["before"], 10, "b has the first post")
    b.stop()  # the partition: each side goes on posting
    for i in range(40):
        _post(a, topic, f"a{i}")
    b.start()
    # b cannot reach a until it dials: it posts meanwhile
    for i in range(40):
        _post(b, topic, f"b{i}")
    b.connect(a)
    want = {"before", *(f"a{i}" for i in range(40)), *(f"b{i}" for i in range(40))}
    for n in (a, b):
        wait_for(lambda n=n: set(_texts(n, topic)) == want, 20, f"{n.name} healed")
        assert len(_texts(n, topic)) == 81
        assert len(_rows(n, topic)) == 81


def test_an_offline_host_catches_up_by_digest_moving_little_more_than_the_posts(make_node):
    a, b, topic = _subscribed_pair(make_node, keep=100_000)
    for i in range(50):
        _post(a, topic, f"early {i}")
    wait_for(lambda: len(_rows(b, topic)) == 50, 10, "b has the early posts")
    b.kill()  # kill -9: nothing of the board may be lost by it
    for i in range(400):
        _post(a, topic, f"late {i} " + "x" * 200)
    with sqlite3.connect(a.home + "/awp.db") as con:
        missing = con.execute("SELECT sum(length(raw)) FROM board_records WHERE topic = ?"
                              " AND seq > (SELECT min(seq) + 49 FROM board_records"
                              " WHERE topic = ?)", (topic, topic)).fetchone()[0]
    b.start()
    b.connect(a)
    wait_for(lambda: len(_rows(b, topic)) == 450, 20, "b caught up")
    moved = b.api("GET", "/v1/status")["board"]["bytes_in"]
    assert moved < 2 * missing, (moved, missing)
    assert len(set(_texts(b, topic))) == 450


def test_grants_decide_who_reads_and_posts_and_revocation_applies_from_then_on(make_node):
    a, b = make_node("a").start(), make_node("b").start()
    a.connect(b)
    a.api("POST", "/v1/board/topic", {"name": "team"})
    topic = f"{a.key}/team"
    b.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 2})
    _post(a, topic, "secret")
    # not granted: b has the topic document (it says b may not read) but no post
    wait_for(lambda: b.api("POST", "/v1/board/get", {"topic": topic})["topic"]["known"], 10,
             "b has the document")
    assert _rows(b, topic) == []
    assert _fails(b, "/v1/board/post", {"topic": topic,
                                        "parts": [{"k": "text", "text": "hi"}]}) == "forbidden"
    g = a.api("POST", "/v1/board/grant", {"topic": "team", "peer": b.key, "what": "post"})
    assert g["member"]  # written into the topic document, which b holds
    wait_for(lambda: "secret" in _texts(b, topic), 10, "b reads once granted")
    _post(b, topic, "granted post")
    wait_for(lambda: "granted post" in _texts(a, topic), 10, "a takes b's post")
    a.api("POST", "/v1/board/revoke", {"topic": "team", "peer": b.key})
    wait_for(lambda: b.api("POST", "/v1/board/get", {"topic": topic})["topic"]["policy"]
             ["members"] == [], 10, "b has the new topic document")
    assert _fails(b, "/v1/board/post", {"topic": topic,
                                        "parts": [{"k": "text", "text": "late"}]}) == "forbidden"
    assert "granted post" in _texts(a, topic)  # what was posted before stays


def _hostile_lines(me: Identity, topic: str, owner: Identity) -> list[dict]:
    t0 = now_ms()
    good = wb.make_post(me, topic, [{"k": "text", "text": "ok"}], t0)
    forged = dict(good.doc, parts=[{"k": "text", "text": "changed after signing"}])
    other = wb.make_post(me, f"{owner.key}/elsewhere", [{"k": "text", "text": "x"}], t0)
    future = wb.make_post(me, topic, [{"k": "text", "text": "tomorrow"}], t0 + 86_400_000)
    fake_owner = {"k": "hide", "topic": topic, "author": owner.key, "ts": good.doc["ts"],
                  "of": good.hash}
    fake_owner["sig"] = me.sign(canonical_bytes(fake_owner))  # not the owner's signature
    return [
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": [forged]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": [other.doc]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": [future.doc]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": [fake_owner]},
        {"t": "board-posts", "topic": topic, "hops": -1, "recs": [good.doc]},
        {"t": "board-posts", "topic": topic, "hops": 0, "recs": "not a list"},
        {"t": "board-digest", "topic": topic, "floor": "x", "ranges": [{"lo": 1}] * 300},
        {"t": "board-want", "topic": topic, "ids": ["zz"] * 5000},
        {"t": "board-sub", "topics": [{"topic": "bad"}] * 1000, "drop": 5},
        {"t": "board-topic", "hops": 0, "doc": {"k": "topic", "topic": topic, "seq": 99}},
        {"t": "board-claim", "topic": topic, "op": "claim"},
    ]


def test_hostile_board_lines_are_dropped_and_the_connection_stays_usable(make_node):
    a = make_node("a").start()
    topic = _open_topic(a)
    me = Identity.generate()
    owner = Identity.generate()
    with RawPeer(a.address, me) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
        for line in _hostile_lines(me, topic, owner):
            p.send_line(line)
        assert p.ping()["t"] == "pong"
        # only now a good one, which is taken
        good = wb.make_post(me, topic, [{"k": "text", "text": "finally"}], now_ms())
        p.send_line({"t": "board-posts", "topic": topic, "hops": 0, "recs": [good.doc]})
        wait_for(lambda: _texts(a, topic) == ["finally"], 10, "the good post is taken")
    assert len(_rows(a, topic)) == 1


def test_a_flooding_author_is_held_to_the_topic_rate(make_node):
    a = make_node("a").start()
    topic = _open_topic(a, rate=5)
    me = Identity.generate()
    t0 = now_ms()
    recs = [wb.make_post(me, topic, [{"k": "text", "text": f"flood {i}"}], t0 + i).doc
            for i in range(50)]
    with RawPeer(a.address, me) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
        p.send_line({"t": "board-posts", "topic": topic, "hops": 0, "recs": recs})
        assert p.ping()["t"] == "pong"
    wait_for(lambda: len(_rows(a, topic)) == 5, 10, "five kept")
    assert a.api("GET", "/v1/status")["board"]["records_refused"] == 45


def _with_limits(make_node, name: str, **limits):
    return make_node(name).with_limits(**limits).start()


def test_subscriptions_are_bounded_by_limits(make_node):
    a = _with_limits(make_node, "a", board_subscriptions=2)
    _open_topic(a, "one")
    _open_topic(a, "two")
    assert _fails(a, "/v1/board/topic", {"name": "three"}) == "too_many"
    other = Identity.generate().key
    assert _fails(a, "/v1/board/subscribe", {"topic": f"{other}/x"}) == "too_many"


def test_asking_for_records_again_and_again_is_served_within_a_budget(make_node):
    a = _with_limits(make_node, "a", board_serve_bytes="16KiB")
    topic = _open_topic(a)
    hashes = [_post(a, topic, f"{i} " + "y" * 1500)["hash"] for i in range(20)]
    me = Identity.generate()
    got = 0
    with RawPeer(a.address, me) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
        for _ in range(10):
            p.send_line({"t": "board-want", "topic": topic, "ids": hashes})
        pong = p.send_line({"t": "ping"})
        while True:
            line = p.recv_line(10)
            assert line is not None
            if line["t"] == "board-posts":
                got += len(line["recs"])
            if line["t"] == "pong" and line.get("re") == pong["id"]:
                break
    # 200 records asked for, about 1.7 KB each: a 16 KiB budget serves nine of them
    assert 5 <= got <= 10
    assert a.api("GET", "/v1/status")["board"]["asks_refused"] >= 9


def test_retention_keeps_the_same_records_on_every_host(make_node):
    a, b, topic = _subscribed_pair(make_node, keep=5)
    for i in range(8):
        _post(a, topic, f"p{i}")
    newest = [f"p{i}" for i in range(3, 8)]
    for n in (a, b):
        wait_for(lambda n=n: _texts(n, topic) == newest, 10, f"{n.name} keeps the newest 5")
    assert sorted(_rows(a, topic)) == sorted(_rows(b, topic))
    # a new policy keeps less, and every host applies it when the document arrives
    a.api("POST", "/v1/board/topic", {"name": "ops", "keep": 3})
    for n in (a, b):
        wait_for(lambda n=n: _texts(n, topic) == newest[-3:], 10, f"{n.name} keeps 3")


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def _peak_queued_while_never_read(a, make_lines, what: str) -> int:
    """A raw peer with a tiny receive buffer sends ``make_lines(peer)`` and never
    reads again; the highest ``queued_bytes`` seen on ``a`` until it read them all."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", a.port))
    with RawPeer(a.address, Identity.generate(), sock=sock) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        before = a.api("GET", "/v1/status")["board"]["lines_in"]
        lines = make_lines(p)
        for line in lines:
            p.send_line(line)
        peak = [0]

        def all_read() -> bool:
            board = a.api("GET", "/v1/status")["board"]
            peak[0] = max(peak[0], board["queued_bytes"])
            return board["lines_in"] >= before + len(lines)

        wait_for(all_read, 90, f"every {what} read", interval=0.2)
        return peak[0]


def test_board_sub_answers_stay_within_the_link_bound(make_node):
    """A peer that stops reading and sends board-sub after board-sub, each
    listing every topic we hold: each asks for a topic document and a digest
    per topic, and those answers were queued past ``board_link_bytes`` (+62 MiB
    for 16 connections in 40 s).  They count against the bound like records."""

    bound = 64 * 1024
    a = _with_limits(make_node, "a", board_link_bytes=bound, write_timeout="120s")
    topics = [_open_topic(a, f"t{i}") for i in range(8)]
    entries = [{"topic": t} for t in topics]
    rss0 = _rss_mib(a.proc.pid)

    def subs(p) -> list[dict]:  # 400, each asking for 16 answers, about 3.6 KB
        line = p.envelope({"t": "board-sub", "topics": entries, "drop": []})
        return [{**line, "id": p.ids.next()} for _ in range(400)]

    peak = _peak_queued_while_never_read(a, subs, "board-sub")
    assert peak <= bound + 64 * 1024, peak  # the bound and the line that crossed it
    assert _rss_mib(a.proc.pid) - rss0 < 40, (rss0, _rss_mib(a.proc.pid))
    assert a.proc.poll() is None


def test_queue_answers_stay_within_the_link_bound(make_node):
    """A peer that stops reading and sends claim after claim: each is answered with a
    board-lease line (a lease, or why not), and those answers went past
    ``board_link_bytes``.  They count against the bound like records; a dropped
    answer costs the claimant only a retry (the same req gets the same decision)."""

    bound = 16 * 1024
    a = _with_limits(make_node, "a", board_link_bytes=bound, write_timeout="120s",
                     board_award_window=0, board_claims_per_minute=100000)
    topic = _open_topic(a, "jobs", queue=True)
    for i in range(4):
        _post(a, topic, f"job {i}")

    def claims(p) -> list[dict]:  # each answered with about 200 bytes: 2 MB in all
        return [p.envelope({"t": "board-claim", "topic": topic, "op": "claim",
                            "req": f"r{i}", "id": p.ids.next()}) for i in range(10000)]

    peak = _peak_queued_while_never_read(a, claims, "board-claim")
    assert peak <= bound + 64 * 1024, peak  # the bound and the line that crossed it
    assert a.proc.poll() is None
