"""Acks, dedup, resume/replay, bye, reconnection and one connection per peer.

The first half drives one daemon with a RawPeer (wire-facts sections 4 and 5,
conformance scenarios msg-ack, state-ack, dedup, bye); the second half runs
pairs of real daemons through restarts, dial-back, simultaneous open and bye.
"""

from __future__ import annotations

import threading
import time

import pytest
from nodes import wait_for
from rawpeer import RawListener, RawPeer, dumps

from awp.localapi.client import ApiFailure
from awp.wire.keys import Identity, auth_transcript

DELIVERY = 10.0  # deadline for anything the protocol should do "promptly"


def records(node, **body) -> list[dict]:
    return node.api("POST", "/v1/read", {"n": 1_000_000, "mark": False, **body})["records"]


def by_id(node, ident: str) -> list[dict]:
    return [r for r in records(node) if r["id"] == ident]


# -- acks and dedup (RawPeer -> daemon) --------------------------------------------------


def test_msg_is_acked_only_once_stored(node, peer):
    sent = peer.send_line({
        "t": "msg", "th": "thr_ack00001", "subject": "parts",
        "parts": [
            {"k": "text", "text": "hello"},
            {"k": "code", "text": "x = 1", "lang": "python"},
            {"k": "data", "mime": "application/json", "data": {"a": 1}},
        ],
    })
    ack = peer.expect("ack", 5, re=sent["id"])
    assert ack["th"] == "thr_ack00001"
    assert ack["re"] == sent["id"]
    # Right after the ack, not eventually: the ack follows the commit.
    recs = by_id(node, sent["id"])
    assert len(recs) == 1, recs
    assert recs[0]["dir"] == "in" and recs[0]["t"] == "msg"
    assert recs[0]["line"] == sent
    threads = node.api("GET", "/v1/threads")
    assert [t["subject"] for t in threads if t["th"] == "thr_ack00001"] == ["parts"]


def test_every_msg_of_a_burst_is_visible_at_its_ack(node, peer):
    sent = [peer.msg(f"burst {i}", th="thr_burst001") for i in range(20)]
    for s in sent:
        peer.expect("ack", 5, re=s["id"])
        assert by_id(node, s["id"]), f"acked {s['id']} but not in the store"
    # Acks come back in the order the lines were sent.
    acks = [x for x in peer.received if b'"t":"ack"' in x]
    assert len(acks) == 20


def test_state_is_acked_and_sets_their_state(node, peer):
    first = peer.msg("start", th="thr_state001")
    peer.expect("ack", 5, re=first["id"])
    st = peer.send_line({"t": "state", "th": "thr_state001", "state": "working",
                         "note": "on it"})
    ack = peer.expect("ack", 5, re=st["id"])
    assert ack["th"] == "thr_state001"
    (rec,) = by_id(node, st["id"])
    assert rec["t"] == "state"
    (th,) = [t for t in node.api("GET", "/v1/threads") if t["th"] == "thr_state001"]
    assert th["theirs"] == "working" and th["their_note"] == "on it"
    assert th["mine"] == "open"


def test_duplicate_line_is_acked_twice_and_stored_once(node, peer):
    line = peer.msg("only once", th="thr_dup00001")
    peer.expect("ack", 5, re=line["id"])
    peer.send_line(line)  # the very same line (same id) again
    ack2 = peer.expect("ack", 5, re=line["id"])
    assert ack2["th"] == "thr_dup00001"
    assert len(by_id(node, line["id"])) == 1
    assert len(node.inbound(th="thr_dup00001")) == 1


def test_duplicate_across_daemon_restart_is_stored_once(make_node):
    node = make_node("dd").start()
    ident = Identity.generate()
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        line = p.msg("before the crash", th="thr_crash001")
        p.expect("ack", 5, re=line["id"])
    node.kill()  # SIGKILL: the ack promised the line was durable
    node.start()
    with RawPeer(node.address, ident) as p:
        resume = p.handshake()
        # The daemon remembers what it has seen from us, across the crash.
        assert resume["seen"] == {"thr_crash001": line["id"]}, resume
        p.resume()
        p.send_line(line)
        p.expect("ack", 5, re=line["id"])
    assert len(by_id(node, line["id"])) == 1


# -- bye from a raw peer -----------------------------------------------------------------


def test_peer_bye_is_answered_and_parks(node, peer):
    bye = peer.send_line({"t": "bye", "reason": "done"})
    reply = peer.expect("bye", 5)
    assert reply["re"] == bye["id"]
    assert reply["reason"] == "done"
    start = time.monotonic()
    assert peer.closed(6), "daemon did not close within 6 s of bye"
    assert time.monotonic() - start < 6
    # Nothing but pings besides the bye.
    assert all(x["t"] == "ping" for x in peer.skipped), peer.skipped
    peer.close()
    wait_for(lambda: node.peer_state(peer.key) == "said bye", 6, "peer shown as said bye")
    notes = [r for r in node.api("POST", "/v1/inbox", {"mark": False})["records"]
             if r["dir"] == "notice" and r["peer"] == peer.key]
    assert len(notes) == 1 and notes[0]["line"]["kind"] == "bye", notes
    assert "done" in notes[0]["line"]["text"]


# -- resume and replay (daemon -> RawPeer) -----------------------------------------------


def _known_then_queue(node, ident: Identity, n: int = 3) -> tuple[str, list[dict]]:
    """Handshake once so the daemon knows the key, disconnect, queue n msgs."""
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
    wait_for(lambda: node.peer_state(ident.key) == "offline", 5, "raw peer offline")
    first = node.send(ident.key, "queued 0")
    assert first["status"] == "queued until the peer is reachable", first
    th = first["th"]
    sent = [first] + [node.send(ident.key, f"queued {i}", th=th) for i in range(1, n)]
    out = {r["id"]: r for r in records(node, th=th) if r["dir"] == "out"}
    assert [s["id"] for s in sent] == sorted(out)
    return th, [out[s["id"]]["line"] for s in sent]


def _replayed(p: RawPeer, n: int, timeout: float = 5) -> list[dict]:
    return [p.expect("msg", timeout) for _ in range(n)]


def test_resume_replays_in_order_and_seen_trims(node):
    ident = Identity.generate()
    th, lines = _known_then_queue(node, ident)
    status = node.api("GET", "/v1/status")
    assert status["queued"] == 3

    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume({})
        got = _replayed(p, 3)
        # Original ids and timestamps, in original order, byte for byte.
        assert got == lines
        for m in got[:2]:
            p.send_line({"t": "ack", "th": th, "re": m["id"]})
        wait_for(lambda: [r["acked"] for r in records(node, th=th)] == [True, True, False],
                 5, "the first two acked")

    with RawPeer(node.address, ident) as p:
        resume = p.handshake()
        assert resume["t"] == "resume"
        p.resume({th: lines[1]["id"]})
        (third,) = _replayed(p, 1)
        assert third == lines[2]
        p.send_line({"t": "ack", "th": th, "re": third["id"]})
        wait_for(lambda: [r["acked"] for r in records(node, th=th)] == [True] * 3,
                 5, "all three acked")
        # Nothing else is replayed.
        p.ping()
        assert not [x for x in p.skipped if x["t"] == "msg"], p.skipped
    assert node.api("GET", "/v1/status")["queued"] == 0


def test_resume_seen_alone_drops_and_acks(node):
    """Without any ack, ``seen`` alone drops lines up to the listed id."""
    ident = Identity.generate()
    th, lines = _known_then_queue(node, ident)
    other = node.send(ident.key, "another thread")  # not listed in seen
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume({th: lines[1]["id"], "thr_unknown9": "ZZZZZZZZZZZZZZZZZZZZZZZZZZ"})
        got = _replayed(p, 2)
        assert [m["id"] for m in got] == [lines[2]["id"], other["id"]]
        wait_for(lambda: [r["acked"] for r in records(node, th=th)] == [True, True, False],
                 5, "seen to mark the first two acked")
        p.ping()
        assert not [x for x in p.skipped if x["t"] == "msg"], p.skipped


def test_unacked_lines_are_replayed_again(node):
    ident = Identity.generate()
    th, lines = _known_then_queue(node, ident, n=2)
    for _ in range(2):
        with RawPeer(node.address, ident) as p:
            assert p.handshake()["t"] == "resume"
            p.resume({})
            assert _replayed(p, 2) == lines
    assert [r["acked"] for r in records(node, th=th)] == [False, False]


def test_outbox_replayed_without_peer_resume(node):
    """Takes ~15 s (``resume_wait``).  The whole: a peer that never sends its
    resume still gets the outbox.  When (nothing before, all at 15 s) is the
    session's rule, pinned by tests/unit/test_session.py
    (``test_without_the_peers_resume_replay_starts_after_resume_wait``)."""
    ident = Identity.generate()
    th, lines = _known_then_queue(node, ident, n=2)
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        assert _replayed(p, 2, timeout=25) == lines


def test_live_send_goes_out_after_resume(node, peer):
    res = node.send(peer.key, "live")
    m = peer.expect("msg", 5)
    assert m["id"] == res["id"] and m["parts"] == [{"k": "text", "text": "live"}]
    assert m["subject"] == "live"
    peer.send_line({"t": "ack", "th": m["th"], "re": m["id"]})
    assert node.api("POST", "/v1/wait_ack", {"id": res["id"], "timeout": 5})["acked"]


# -- two daemons ----------------------------------------------------------------------------


def _ids(node, peer_key: str) -> list[str]:
    return [r["id"] for r in node.inbound(peer=peer_key)]


def test_two_daemons_exchange_both_ways(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    r1 = a.send(b.key, "hi")
    assert r1["status"] == "delivered" and r1["acked"]
    assert _ids(b, a.key) == [r1["id"]]
    r2 = b.send(None, "hello back", th=r1["th"])
    wait_for(lambda: _ids(a, b.key) == [r2["id"]], DELIVERY, "reply at a")
    assert a.peer_state(b.key) == "connected (out)"
    assert b.peer_state(a.key) == "connected (in)"


def test_exactly_once_across_receiver_crash(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    first = a.send(b.key, "one")
    assert first["acked"]
    th = first["th"]
    b.kill()  # SIGKILL between sends
    wait_for(lambda: a.peer_state(b.key) != "connected (out)", 5, "a to notice the crash")
    second = a.send(b.key, "two", th=th)
    assert not second["acked"]
    b.start()
    third = a.send(b.key, "three", th=th)
    want = [first["id"], second["id"], third["id"]]
    wait_for(lambda: _ids(b, a.key) == want, DELIVERY, "all three exactly once, in order")
    assert a.api("POST", "/v1/wait_ack", {"id": third["id"], "timeout": 5})["acked"]
    # Duplicates would show up as extra records: give a late replay a moment.
    a.send(b.key, "marker", th=th)
    wait_for(lambda: len(_ids(b, a.key)) == 4, DELIVERY, "the marker")
    assert _ids(b, a.key)[:3] == want
    # The marker's ack wakes a's sender before a commits it (the outbox row
    # goes with that commit): wait for it rather than race it.
    wait_for(lambda: a.api("GET", "/v1/status")["queued"] == 0, DELIVERY, "a's outbox empty")
    assert len(_ids(b, a.key)) == 4


def test_redial_after_listener_restart(make_node):
    a = make_node("a").start()
    # b keeps no link warm: with no traffic yet it has no business with a, so
    # only a will redial
    b = make_node("b").with_limits(warm_for=0).start()
    a.connect(b)
    assert a.peer_state(b.key) == "connected (out)"
    b.stop()  # SIGTERM
    wait_for(lambda: a.peer_state(b.key) != "connected (out)", 5, "a to notice")
    queued = a.send(b.key, "while b is down")
    assert not queued["acked"]
    assert queued["status"] in ("queued until the peer is reachable", "delivering"), queued
    b.start()  # same home, same port
    wait_for(lambda: queued["id"] in _ids(b, a.key), DELIVERY, "redial delivers the queued msg")
    assert a.peer_state(b.key) == "connected (out)"
    assert a.api("POST", "/v1/wait_ack", {"id": queued["id"], "timeout": 5})["acked"]


def test_dial_back_to_hello_addr_after_dialer_restart(make_node):
    a = make_node("a").with_limits(warm_for=0).start()  # keeps no link warm
    b = make_node("b").start()
    a.connect(b)  # a dials; b learns a's address only from a's hello
    peers = {p["key"]: p for p in b.api("GET", "/v1/peers")}
    assert [x["source"] for x in peers[a.key]["addresses"]] == ["hello"]
    assert [x["addr"] for x in peers[a.key]["addresses"]] == [a.address]
    a.kill()
    wait_for(lambda: b.peer_state(a.key) != "connected (in)", 5, "b to notice")
    queued = b.send(a.key, "while a is down")
    assert not queued["acked"]
    a.start()  # same address; a itself has no business with b, so it will not dial
    wait_for(lambda: queued["id"] in _ids(a, b.key), DELIVERY, "b dials back to a's hello.addr")
    assert b.peer_state(a.key) == "connected (out)"


def test_send_after_dialer_restart_dials_back_at_once(make_node):
    a = make_node("a").with_limits(warm_for=0).start()  # so a does not redial b itself
    b = make_node("b").start()
    a.connect(b)
    a.kill()
    wait_for(lambda: b.peer_state(a.key) != "connected (in)", 5, "b to notice")
    a.start()
    start = time.monotonic()
    res = b.send(a.key, "right away")
    wait_for(lambda: res["id"] in _ids(a, b.key), 8, "dial-back on new traffic")
    assert time.monotonic() - start < 8  # far below the 15 s grace
    assert b.peer_state(a.key) == "connected (out)"


def _raw_dialer_with_open_thread(node, lst: RawListener, th: str) -> dict:
    """A raw peer dials the daemon advertising ``lst`` as its hello.addr,
    opens a thread (business for the daemon), and hangs up."""
    with RawPeer(node.address, lst.identity) as p:
        assert p.handshake(addr=lst.address)["t"] == "resume"
        p.resume()
        m = p.msg("an open thread", th=th)
        p.expect("ack", 5, re=m["id"])
    wait_for(lambda: node.peer_state(lst.key) != "connected (in)", 5, "daemon sees us go")
    (addr,) = {x["key"]: x for x in node.api("GET", "/v1/peers")}[lst.key]["addresses"]
    assert addr["addr"] == lst.address and addr["source"] == "hello"
    return m


def test_dial_back_waits_out_the_grace(node):
    """Takes ~15 s: the dial-back grace is the timer under test."""
    with RawListener() as lst:
        m = _raw_dialer_with_open_thread(node, lst, "thr_grace001")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            lst.accept(12)  # the original dialer gets the first 15 s
        back = lst.accept(8)
        elapsed = time.monotonic() - start
        assert 13 <= elapsed <= 19, elapsed
        with back:
            resume = back.handshake()
            assert back.peer_hello["key"] == node.key
            assert resume["t"] == "resume"
            assert resume["seen"] == {"thr_grace001": m["id"]}
            back.resume()
            back.ping()
        assert not [x for x in back.skipped if x["t"] == "msg"], back.skipped


def test_new_traffic_skips_the_dial_back_grace(node):
    with RawListener() as lst:
        _raw_dialer_with_open_thread(node, lst, "thr_grace002")
        start = time.monotonic()
        res = node.send(lst.key, "right away", th="thr_grace002")
        back = lst.accept(8)
        assert time.monotonic() - start < 8  # far below the 15 s grace
        with back:
            assert back.handshake()["t"] == "resume"
            back.resume()
            m = back.expect("msg", 5)
            assert m["id"] == res["id"] and m["th"] == "thr_grace002"
            back.send_line({"t": "ack", "th": m["th"], "re": m["id"]})
            assert node.api("POST", "/v1/wait_ack", {"id": res["id"], "timeout": 5})["acked"]


def _race_connect(a, b) -> dict[str, object]:
    """a and b call connect on each other at the same moment (neither knows
    the other yet); returns each call's result or ApiFailure."""
    results: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def dial(name: str, src, dst) -> None:
        barrier.wait()
        try:
            results[name] = src.connect(dst)
        except ApiFailure as e:
            results[name] = e

    threads = [threading.Thread(target=dial, args=("a", a, b)),
               threading.Thread(target=dial, args=("b", b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(results) == {"a", "b"}
    return results


def _established_between(*ports: int) -> int:
    """Established loopback TCP connections accepted on any of ``ports``."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state = fields[1], fields[3]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) in ports:
                n += 1
    return n


def test_simultaneous_open_keeps_one_connection(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    _race_connect(a, b)

    def one_connection():
        sa, sb = a.peer_state(b.key), b.peer_state(a.key)
        return (sa, sb) in (("connected (out)", "connected (in)"),
                            ("connected (in)", "connected (out)"))

    wait_for(one_connection, DELIVERY, "exactly one connection, seen the same from both sides")
    # Both keep the connection dialed by the smaller key.
    smaller, larger = (a, b) if a.key < b.key else (b, a)
    assert smaller.peer_state(larger.key) == "connected (out)"
    assert larger.peer_state(smaller.key) == "connected (in)"
    # And only one TCP connection between them survives.
    wait_for(lambda: _established_between(a.port, b.port) == 1, 8,
             "the losing connection to close")
    states = (a.peer_state(b.key), b.peer_state(a.key))
    ra = a.send(b.key, "a to b")
    rb = b.send(a.key, "b to a")
    wait_for(lambda: ra["id"] in _ids(b, a.key), DELIVERY, "a -> b")
    wait_for(lambda: rb["id"] in _ids(a, b.key), DELIVERY, "b -> a")
    # Stable: the loser does not come back and replace it.
    assert (a.peer_state(b.key), b.peer_state(a.key)) == states
    assert _established_between(a.port, b.port) == 1


def test_simultaneous_open_losing_dial_still_reports_connected(node):
    """``connect`` whose own dial loses the tie-break to the peer's dial must
    report the peer as connected (it is), not as unreachable.

    Deterministic version of two daemons calling connect on each other at
    once: the daemon dials us, and before we resume on that connection we
    dial in with a smaller key, which wins the tie-break."""
    with RawListener(_identity_vs(node.key, smaller=True)) as lst:
        out: dict = {}

        def dial() -> None:
            try:
                out["res"] = node.api("POST", "/v1/connect",
                                      {"target": lst.address, "timeout": 10})
            except ApiFailure as e:
                out["err"] = e

        t = threading.Thread(target=dial)
        t.start()
        with lst.accept(5) as theirs:  # the daemon's dial
            theirs.send_hello()
            theirs.read_hello()
            theirs.send_auth()
            assert theirs.expect("auth", 5)
            assert theirs.expect("resume", 5)
            # Our own dial, dialed by the smaller key, within the 5 s window.
            with RawPeer(node.address, lst.identity) as ours:
                assert ours.handshake()["t"] == "resume"
                ours.resume()
                assert theirs.closed(6), "the daemon kept its own dial"
                t.join(15)
                ours.ping()
                assert node.peer_state(lst.key) == "connected (in)"
                assert "err" not in out, f"connect failed although connected: {out['err']}"
                assert out["res"]["key"] == lst.key


def test_two_daemons_over_unix_sockets(make_node):
    a = make_node("ua", unix=True).start()
    b = make_node("ub", unix=True).start()
    assert a.address.startswith("unix:") and b.address.startswith("unix:")
    info = a.connect(b)
    assert info["key"] == b.key
    r1 = a.send(b.key, "over unix")
    wait_for(lambda: _ids(b, a.key) == [r1["id"]], DELIVERY, "a -> b over unix")
    r2 = b.send(a.key, "back over unix")
    wait_for(lambda: _ids(a, b.key) == [r2["id"]], DELIVERY, "b -> a over unix")
    assert a.send(b.key, "acked", th=r1["th"])["acked"]


def test_bye_via_api_parks_until_new_traffic(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    first = a.send(b.key, "let's talk")
    assert first["acked"]
    b.send(a.key, "sure", th=first["th"])  # open thread, business on both sides
    wait_for(lambda: _ids(a, b.key), DELIVERY, "reply")

    out = a.api("POST", "/v1/bye", {"peer": b.key, "reason": "done"})
    # the state after the call: the bye went out on the live link, and b is parked
    assert out["connected"] is False and out["said_bye"] is True and out["parked"] is True
    wait_for(lambda: a.peer_state(b.key) == "said bye", 8, "a parks b")
    wait_for(lambda: b.peer_state(a.key) == "said bye", 8, "b parks a")
    notes = [r for r in b.api("POST", "/v1/inbox", {"mark": False})["records"]
             if r["dir"] == "notice" and r["peer"] == a.key]
    assert len(notes) == 1 and notes[0]["line"]["kind"] == "bye", notes
    assert "done" in notes[0]["line"]["text"]
    # Neither side redials (backoff starts at 1 s, so 3 s would show it).
    time.sleep(3)
    assert a.peer_state(b.key) == "said bye"
    assert b.peer_state(a.key) == "said bye"

    again = a.send(b.key, "one more thing", th=first["th"])
    wait_for(lambda: again["id"] in _ids(b, a.key), DELIVERY, "un-parked and delivered")
    assert a.peer_state(b.key) == "connected (out)"
    assert a.api("POST", "/v1/wait_ack", {"id": again["id"], "timeout": 5})["acked"]


# -- bye from the daemon, liveness, replacement ---------------------------------------------


def _bye_in_background(node, key: str) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        out["result"] = node.api("POST", "/v1/bye", {"peer": key, "reason": "done"})
        out["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_daemon_bye_is_sent_and_closes_after_our_bye(node, peer):
    start = time.monotonic()
    t, out = _bye_in_background(node, peer.key)
    bye = peer.expect("bye", 5)
    assert bye["reason"] == "done"
    assert "re" not in bye
    peer.send_line({"t": "bye", "reason": "done", "re": bye["id"]})
    assert peer.closed(3), "daemon did not close after the bye exchange"
    t.join(10)
    assert out["result"]["said_bye"] is True and out["result"]["connected"] is False
    assert out["at"] - start < 3  # it did not wait out the 5 s linger
    assert not [x for x in peer.skipped if x["t"] not in ("ping",)], peer.skipped
    wait_for(lambda: node.peer_state(peer.key) == "said bye", 5, "parked")


def test_daemon_bye_unanswered_closes_after_linger(node, peer):
    """The whole: an unanswered bye still closes and parks.  When (``bye_linger``
    after the bye) is the session's rule, pinned by tests/unit/test_session.py
    (``test_our_bye_unanswered_closes_after_bye_linger``)."""
    t, out = _bye_in_background(node, peer.key)
    peer.expect("bye", 5)
    assert peer.closed(8), "daemon did not close within the bye linger"
    t.join(10)
    assert out["result"]["said_bye"] is True and out["result"]["connected"] is False
    wait_for(lambda: node.peer_state(peer.key) == "said bye", 5, "parked")


def test_unanswered_pings_close_the_connection(make_node):
    node = make_node("pinger", env={"AWP_PING_INTERVAL": "1s"}).start()
    with RawPeer(node.address) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        # when (0.9 x ping_interval apart, two unanswered) is test_session's
        assert p.closed(8), "still open after two unanswered pings"
        pings = [x for x in p.skipped if x["t"] == "ping"]
        assert len(pings) >= 2, p.skipped
        assert all(x.get("id") for x in pings)


def test_answered_pings_keep_the_connection_and_give_rtt(make_node):
    node = make_node("pinger2", env={"AWP_PING_INTERVAL": "1s"}).start()
    with RawPeer(node.address) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        deadline = time.monotonic() + 4
        answered = 0
        while time.monotonic() < deadline:
            try:
                line = p.recv_line(deadline - time.monotonic())
            except TimeoutError:
                break
            assert line is not None, "closed although every ping was answered"
            if line["t"] == "ping":
                p.send_line({"t": "pong", "re": line["id"]})
                answered += 1
        assert answered >= 3
        peers = {x["key"]: x for x in node.api("GET", "/v1/peers")}
        assert isinstance(peers[p.key]["rtt_ms"], int | float), peers[p.key]
        assert node.peer_state(p.key) == "connected (in)"


def test_new_connection_replaces_the_older_one(node):
    ident = Identity.generate()
    p1 = RawPeer(node.address, ident)
    assert p1.handshake()["t"] == "resume"
    p1.resume()
    m1 = p1.msg("on the first connection", th="thr_repl0001")
    p1.expect("ack", 5, re=m1["id"])
    with RawPeer(node.address, ident) as p2:
        resume = p2.handshake()
        assert resume["t"] == "resume"
        assert resume["seen"] == {"thr_repl0001": m1["id"]}
        assert p1.closed(6), "the older connection was kept"
        p1.close()
        p2.resume()
        res = node.send(ident.key, "to the new connection", th="thr_repl0001")
        m = p2.expect("msg", 5)
        assert m["id"] == res["id"]


def test_pipelined_auth_resume_and_msg(node):
    """Lines that arrive in one packet with our auth are handled after it."""
    with RawPeer(node.address) as p:
        p.send_hello()
        p.read_hello()
        sig = p.identity.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        auth = p.envelope({"t": "auth", "sig": sig})
        resume = p.envelope({"t": "resume", "seen": {}})
        msg = p.envelope({"t": "msg", "th": "thr_pipe0001", "parts": [{"k": "text", "text": "x"}]})
        p.send_raw(b"".join(dumps(x) + b"\n" for x in (auth, resume, msg)))
        theirs = p.recv_line(5)
        assert theirs is not None and theirs["t"] == "auth" and p.verify_peer_auth(theirs)
        assert p.expect("resume", 5)["seen"] == {}
        ack = p.expect("ack", 5, re=msg["id"])
        assert ack["th"] == "thr_pipe0001"
    assert by_id(node, msg["id"])


def test_outbox_and_ids_survive_sender_crash(make_node):
    node = make_node("sender").start()
    ident = Identity.generate()
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        res = node.send(ident.key, "unacked before the crash")
        first = p.expect("msg", 5)
        assert first["id"] == res["id"]
        # Deliberately no ack.
    node.kill()
    node.start()
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume({})
        again = p.expect("msg", 5)
        assert again == first  # same id, same ts, same bytes
        p.send_line({"t": "ack", "th": again["th"], "re": again["id"]})
        later = node.send(ident.key, "after the crash", th=first["th"])
        m = p.expect("msg", 5)
        assert m["id"] == later["id"]
        assert m["id"] > first["id"]  # ids keep increasing across restarts
        st = node.api("POST", "/v1/state", {"peer": ident.key, "th": first["th"],
                                            "state": "done", "note": "thanks"})
        s = p.expect("state", 5)
        assert s["id"] == st["id"] and s["id"] > m["id"]
        assert s["state"] == "done" and s["note"] == "thanks" and s["th"] == first["th"]
        p.send_line({"t": "ack", "th": m["th"], "re": m["id"]})
        p.send_line({"t": "ack", "th": s["th"], "re": s["id"]})
        wait_for(lambda: all(r["acked"] for r in records(node, th=first["th"])
                             if r["dir"] == "out"), 5, "everything acked")


def _identity_vs(key: str, smaller: bool) -> Identity:
    while True:
        ident = Identity.generate()
        if (ident.key < key) == smaller:
            return ident


def _daemon_dials(node, lst: RawListener) -> RawPeer:
    """node connects to lst through the API; returns our side, resumed."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(
        res=node.api("POST", "/v1/connect", {"target": lst.address, "timeout": 10})))
    t.start()
    back = lst.accept(5)
    assert back.handshake()["t"] == "resume"
    back.resume()
    t.join(10)
    assert out["res"]["key"] == lst.key
    return back


def test_tie_break_keeps_connection_dialed_by_smaller_key(node):
    """Simultaneous open: our dial wins when our key is smaller."""
    with RawListener(_identity_vs(node.key, smaller=True)) as lst:
        first = _daemon_dials(node, lst)  # dialed by the daemon (larger key)
        with RawPeer(node.address, lst.identity) as second:  # dialed by us, within 5 s
            assert second.handshake()["t"] == "resume"
            second.resume()
            assert first.closed(6), "the daemon kept the connection dialed by the larger key"
            first.close()
            second.ping()
            assert node.peer_state(lst.key) == "connected (in)"


def test_tie_break_drops_connection_dialed_by_larger_key(node):
    """Simultaneous open: our dial is dropped when our key is larger."""
    with RawListener(_identity_vs(node.key, smaller=False)) as lst:
        first = _daemon_dials(node, lst)  # dialed by the daemon (smaller key)
        with first, RawPeer(node.address, lst.identity) as second:
            second.send_hello()
            second.read_hello()
            second.send_auth()
            theirs = second.recv_line(5)
            assert theirs is not None and theirs["t"] == "auth"
            # Dropped without a resume; the daemon's own dial stays up.
            assert second.closed(6), "the daemon kept the connection dialed by the larger key"
            assert not [x for x in second.skipped if x["t"] == "resume"], second.skipped
            first.ping()
            assert node.peer_state(lst.key) == "connected (out)"



def test_redial_backs_off_when_connections_keep_dropping(node):
    """A peer that completes the handshake and hangs up at once must not be
    redialed in a tight loop: the reconnect backoff (1 s, 2 s, 4 s, ...) applies."""
    with RawListener() as lst:
        first = _daemon_dials(node, lst)  # address source "connect": no dial-back grace
        with first:
            node.send(lst.key, "keeps the daemon wanting a connection")
            first.expect("msg", 5)  # never acked
        dials = 0
        deadline = time.monotonic() + 4
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                c = lst.accept(remaining)
            except TimeoutError:
                break
            dials += 1
            with c:
                try:
                    if c.handshake(timeout=2)["t"] == "resume":
                        c.resume()
                except (AssertionError, OSError, TimeoutError):
                    pass
        # Backoff allows about four attempts in 4 s; a hot loop makes dozens.
        assert dials <= 6, f"{dials} redials in 4 s"


def test_a_lone_line_is_acked_from_the_journal_and_readable_at_once(make_node):
    """Paced lines are acked once synced to the receiver's intake journal; the
    receiver has them in SQLite before it serves anything else, so a read
    right after the ack sees each one."""
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "first", wait_ack=5)["th"]
    before = b.api("GET", "/v1/status")["store"]["intake"]["journaled"]
    # A line takes the journal's way only while the receiver's commits are
    # fast (a busy machine sends lines the ordinary way, by design): send at
    # least 20 paced lines, and on until one was journaled or the deadline.
    deadline = time.monotonic() + 60
    i = 0
    while True:
        r = a.send(b.key, f"paced {i}", th=th, wait_ack=5)
        assert r["ack_ms"] is not None
        assert b.inbound(th=th)[-1]["id"] == r["id"]
        i += 1
        intake = b.api("GET", "/v1/status")["store"]["intake"]
        if i >= 20 and (intake["journaled"] > before or time.monotonic() > deadline):
            break
        time.sleep(0.005)
    assert intake["journaled"] > before, intake
    assert intake["off"] == "" and intake["pending"] == 0 and isinstance(intake["direct"], bool)
