"""Hostile or broken connections: acks from the wrong peer, a peer that never
reads, and a middlebox that loses a line in the middle of a live connection.

Each test runs real daemons (with short ``write_timeout`` / ``gap_timeout``
from config.json ``limits``) against raw peers or through a line-dropping
proxy on loopback.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from fixtures.lineproxy import LineProxy
from nodes import wait_for
from rawpeer import RawPeer

from awp.localapi.client import LocalClient
from awp.wire.keys import Identity

DELIVERY = 10.0  # what the protocol should do "promptly", on a busy machine
WRITE_TIMEOUT = 2.0
BIG = 900_000  # characters of text per message: close to the 1 MiB line limit
# A middlebox can lose one whole line only on a plain link: on a sealed one the
# loss ends the connection (tests/integration/test_sealed.py).
PLAIN = {"AWP_SEAL": "off"}


def _configure(make_node, name: str, **limits: object):
    return make_node(name).with_limits(**limits).start()


def _records(node, **body) -> list[dict]:
    return node.api("POST", "/v1/read", {"n": 1_000_000, "mark": False, **body})["records"]


def _queued(node, key: str) -> int:
    for p in node.api("GET", "/v1/peers"):
        if p["key"] == key:
            return p["queued"]
    raise AssertionError(f"{key} not in peers")


def _raw(node, ident: Identity | None = None, *, rcvbuf: int = 0) -> RawPeer:
    """A raw peer past handshake and resume; ``rcvbuf`` shrinks its receive buffer."""
    sock = None
    if rcvbuf:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", node.port))
    p = RawPeer(node.address, ident, sock=sock)
    assert p.handshake()["t"] == "resume"
    p.resume()
    return p


# -- 5: an ack counts only from the peer the line was sent to -------------------------


def test_an_ack_from_another_peer_completes_nothing(node):
    a, b = _raw(node), _raw(node)
    try:
        wait_for(lambda: node.peer_state(b.key).startswith("connected"), DELIVERY, "b up")
        result: dict = {}

        def send() -> None:
            result.update(node.send(a.key, "for a only", wait_ack=6))

        t = threading.Thread(target=send)
        t.start()
        msg = a.expect("msg", DELIVERY)
        # b acks a's line (ids are easy to guess), then proves the ack was read.
        b.send_line({"t": "ack", "th": msg["th"], "re": msg["id"]})
        b.ping()
        t.join(20)
        assert not t.is_alive()
        assert result["id"] == msg["id"]
        assert result["acked"] is False and result["status"] == "delivering", result
        # Asked again after b's ack arrived: still not acked, still queued for a.
        assert node.api("POST", "/v1/wait_ack", {"id": msg["id"], "timeout": 0.5}) == {
            "id": msg["id"], "acked": False}
        assert _queued(node, a.key) == 1
        (rec,) = [r for r in _records(node) if r["id"] == msg["id"]]
        assert rec["acked"] is False
        # a's own ack does count.
        a.send_line({"t": "ack", "th": msg["th"], "re": msg["id"]})
        assert node.api("POST", "/v1/wait_ack", {"id": msg["id"], "timeout": DELIVERY})[
            "acked"] is True
        wait_for(lambda: _queued(node, a.key) == 0, DELIVERY, "a's line out of the outbox")
    finally:
        a.close()
        b.close()


# -- 8: a peer that never reads is dropped at the write deadline ----------------------


def _stall(node, ident: Identity, n: int) -> tuple[RawPeer, str, list[str]]:
    """Queue ``n`` big messages for a known peer while it is away, then connect
    it with a tiny receive buffer and never read: the replay fills the buffers."""
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
    wait_for(lambda: node.peer_state(ident.key) == "offline", DELIVERY, "peer offline")
    first = node.send(ident.key, "x" * BIG)
    ids = [first["id"]] + [node.send(ident.key, "x" * BIG, th=first["th"])["id"]
                           for _ in range(n - 1)]
    p = _raw(node, ident, rcvbuf=4096)
    wait_for(lambda: b'"t":"msg"' in _peek(p), DELIVERY, "the replay under way")
    return p, first["th"], ids


def _peek(p: RawPeer) -> bytes:
    """What waits unread in the raw peer's socket (a msg line of ~1 MiB there,
    with a receive buffer of a few KiB, means the daemon is stuck writing it)."""
    try:
        return p.sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


def test_a_peer_that_never_reads_is_dropped_and_gets_its_lines_later(make_node):
    node = _configure(make_node, "w", write_timeout=f"{WRITE_TIMEOUT}s")
    ident = Identity.generate()
    other = _raw(node)
    stuck, th, ids = _stall(node, ident, 10)
    try:
        # A grant to the stalled peer returns once the write deadline drops it.
        t0 = time.monotonic()
        with LocalClient(os.path.join(node.home, "awp.sock"), timeout=30) as c:
            res = c.post("/v1/grant", {"peer": stuck.key, "caps": ["exec"], "ttl": 60})
        assert time.monotonic() - t0 < WRITE_TIMEOUT + 8, "grant waited on a stalled peer"
        assert res["delivered"] is False, res
        wait_for(lambda: not node.peer_state(stuck.key).startswith("connected"), DELIVERY,
                 "the stalled peer dropped")
        # The other peer was never held up.
        sent = node.send(other.key, "still moving", wait_ack=0)
        got = other.expect("msg", DELIVERY)
        assert got["id"] == sent["id"]
        other.send_line({"t": "ack", "th": got["th"], "re": got["id"]})
        assert node.api("POST", "/v1/wait_ack", {"id": got["id"], "timeout": DELIVERY})["acked"]
        mine = other.msg("from the other peer")
        other.expect("ack", DELIVERY, re=mine["id"])
        # Its lines stayed queued, and go out when it comes back reading.
        assert _queued(node, stuck.key) == len(ids)
        stuck.close()
        with RawPeer(node.address, ident) as back:
            assert back.handshake()["t"] == "resume"
            back.resume()
            got_ids = [back.expect("msg", DELIVERY)["id"] for _ in ids]
            assert got_ids == ids
            for i in ids:
                back.send_line({"t": "ack", "th": th, "re": i})
            wait_for(lambda: _queued(node, ident.key) == 0, DELIVERY, "all acked")
    finally:
        stuck.close()
        other.close()
    assert "stalled" in node.tail_log(200)


def test_bye_to_a_peer_that_never_reads_returns_promptly(make_node):
    node = _configure(make_node, "w", write_timeout=f"{WRITE_TIMEOUT}s")
    stuck, _th, _ids = _stall(node, Identity.generate(), 10)
    try:
        t0 = time.monotonic()
        with LocalClient(os.path.join(node.home, "awp.sock"), timeout=30) as c:
            res = c.post("/v1/bye", {"peer": stuck.key, "reason": "enough"})
        assert time.monotonic() - t0 < WRITE_TIMEOUT + 8, "bye waited on a stalled peer"
        assert res["said_bye"] is False, res  # no bye went out: the peer was dropped
        assert res["connected"] is False, res
        wait_for(lambda: node.peer_state(stuck.key) == "said bye", DELIVERY, "parked")
    finally:
        stuck.close()


# -- 10: a line lost in the middle of a live connection -------------------------------


def test_a_line_lost_by_a_middlebox_is_sent_again(make_node):
    a = _configure(make_node, "a", gap_timeout="1s")
    b = make_node("b", env=PLAIN).start()
    lost = threading.Event()

    def drop(line: bytes) -> bool:
        if b'"t":"msg"' in line and b"LOSE-ME" in line:
            lost.set()
            return True
        return False

    with LineProxy(a.port, drop_down=drop) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        wait_for(lambda: a.peer_state(b.key).startswith("connected"), DELIVERY, "b connected")
        first = a.send(b.key, "LOSE-ME", wait_ack=0)
        assert lost.wait(DELIVERY), "the proxy never saw the line"
        second = a.send(b.key, "after the lost one", th=first["th"], wait_ack=DELIVERY)
        assert second["acked"], second
        # The later line is acked, the earlier one is not: after gap_timeout it
        # is sent again on the same connection (no reconnect, which would
        # trim it away by the thread's resume point).
        wait_for(lambda: any(r["id"] == first["id"] for r in b.inbound(th=first["th"])),
                 DELIVERY, "the lost line delivered")
        assert a.api("POST", "/v1/wait_ack", {"id": first["id"], "timeout": DELIVERY})["acked"]
        assert [r["line"]["parts"][0]["text"] for r in b.inbound(th=first["th"])] == [
            "after the lost one", "LOSE-ME"]
        assert proxy.accepted == 1, "the connection was replaced"
        assert len(proxy.dropped) == 1


def test_a_line_never_acked_is_sent_again_once_and_the_connection_stays(make_node):
    node = _configure(make_node, "a", gap_timeout="1s")
    p = _raw(node)
    try:
        one = node.send(p.key, "one", wait_ack=0)
        first = p.expect("msg", DELIVERY)  # never acked
        assert first["id"] == one["id"]
        two = node.send(p.key, "two", th=one["th"], wait_ack=0)
        assert p.expect("msg", DELIVERY)["id"] == two["id"]
        p.send_line({"t": "ack", "th": one["th"], "re": two["id"]})
        again = p.expect("msg", DELIVERY)  # the gap: "one" comes again
        assert again == first  # the same line, byte for byte
        # Overtaken again after its second sending: left for the next resume.
        three = node.send(p.key, "three", th=one["th"], wait_ack=0)
        assert p.expect("msg", DELIVERY)["id"] == three["id"]
        p.send_line({"t": "ack", "th": one["th"], "re": three["id"]})
        wait_for(lambda: "sent twice" in node.tail_log(50), DELIVERY, "given up on one")
        p.ping()
        assert not [x for x in p.skipped if x.get("t") == "msg"], p.skipped  # no third copy
        assert node.peer_state(p.key).startswith("connected")
        assert _queued(node, p.key) == 1
    finally:
        p.close()


@pytest.mark.parametrize("resends_lost", [1, 2])
def test_three_lost_lines_are_sent_again_together_and_a_lost_resend_waits(make_node,
                                                                          resends_lost):
    """Three lines lost in a row are sent again in one go (sorting the outbox rows
    for that killed the connection); a resend lost again is given up on this
    connection and stays queued, while the connection and the others carry on."""
    a = _configure(make_node, "a", gap_timeout="1s")
    b = make_node("b", env=PLAIN).start()
    copies: dict[bytes, int] = {}
    lose_again = [b"LOSE-%d" % i for i in range(3)][-resends_lost:]

    def drop(line: bytes) -> bool:
        if b'"t":"msg"' not in line:
            return False
        tag = next((t for t in (b"LOSE-0", b"LOSE-1", b"LOSE-2") if t in line), None)
        if tag is None:
            return False
        copies[tag] = copies.get(tag, 0) + 1
        return copies[tag] == 1 or tag in lose_again

    with LineProxy(a.port, drop_down=drop, times=3 + resends_lost) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        wait_for(lambda: a.peer_state(b.key).startswith("connected"), DELIVERY, "b connected")
        lost = [a.send(b.key, f"LOSE-{i}", subject=f"t{i}", wait_ack=0) for i in range(3)]
        wait_for(lambda: len(proxy.dropped) == 3, DELIVERY, "three lines lost")
        after = a.send(b.key, "after the lost ones", wait_ack=DELIVERY)
        assert after["acked"], after
        wait_for(lambda: len(proxy.dropped) == 3 + resends_lost, DELIVERY, "resends lost")
        got = lost[:3 - resends_lost]
        for m in got:
            assert a.api("POST", "/v1/wait_ack", {"id": m["id"], "timeout": DELIVERY})["acked"]
        # A line acked after the lost resends: they are given up on this
        # connection (sent twice), and stay queued for the next resume.
        still = a.send(b.key, "still up", wait_ack=DELIVERY)
        assert still["acked"], (still, a.tail_log(40))
        wait_for(lambda: "sent twice" in a.tail_log(50), DELIVERY, "given up on the lost resends")
        assert {r["id"] for r in b.inbound()} == {after["id"], still["id"],
                                                   *(m["id"] for m in got)}
        assert _queued(a, b.key) == resends_lost
        assert a.peer_state(b.key).startswith("connected")
        assert proxy.accepted == 1, "the connection was replaced"
        log = a.tail_log(200)
        assert "Traceback" not in log and "failed" not in log, log


@pytest.fixture
def shm_home():
    """A home in memory (tmpfs), where commits take well under the 1.5 ms that
    lets a quiet daemon write its own line before the commit (the early write
    path); on a disk under load they may never be that fast."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="awpt", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_big_message_on_a_slow_link_gets_the_whole_write_timeout(make_node, shm_home):
    """900 KB on a 200 KB/s link takes about 4.5 s to leave: well within the
    documented write_timeout (15 s), so it must not cost the connection (the
    early write before the commit gave it 1 s)."""
    from nodes import Node

    a = Node(os.path.join(shm_home, "a"), name="a").start()
    b = make_node("b").start()
    with LineProxy(a.port, rate_down=200_000) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        wait_for(lambda: a.peer_state(b.key).startswith("connected"), DELIVERY, "b connected")
        th = a.send(b.key, "small first", wait_ack=DELIVERY)
        assert th["acked"], th
        # Back to back: the second finds the link's buffers full of the first.
        bigs = [a.send(b.key, f"{i} " + "y" * BIG, th=th["th"], wait_ack=0) for i in range(3)]
        for big in bigs:
            assert a.api("POST", "/v1/wait_ack", {"id": big["id"], "timeout": 40})["acked"], (
                big["id"], a.tail_log(20))
        assert proxy.accepted == 1, a.tail_log(30)
        assert "stalled" not in a.tail_log(200)
    a.kill()


def test_a_line_lost_twice_with_nothing_sent_after_is_given_up_with_a_log_line(make_node):
    # The line's resend is lost too and nothing more goes to the peer: no ack
    # ever overtakes it again, and it waited for good without a word.
    node = _configure(make_node, "a", gap_timeout="1s")
    p = _raw(node)
    try:
        one = node.send(p.key, "one", wait_ack=0)
        first = p.expect("msg", DELIVERY)  # never acked
        two = node.send(p.key, "two", th=one["th"], wait_ack=0)
        assert p.expect("msg", DELIVERY)["id"] == two["id"]
        p.send_line({"t": "ack", "th": one["th"], "re": two["id"]})
        assert p.expect("msg", DELIVERY) == first  # sent again, and "lost" again
        wait_for(lambda: "sent twice" in node.tail_log(50), DELIVERY, "given up on one")
        p.ping()
        assert not [x for x in p.skipped if x.get("t") == "msg"], p.skipped  # no third copy
        assert node.peer_state(p.key).startswith("connected")
        assert _queued(node, p.key) == 1  # still queued for the next resume
    finally:
        p.close()
