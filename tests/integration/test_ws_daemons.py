"""Two real daemons over the WebSocket binding, and a platform front that terminates TLS.

The daemons are subprocesses on loopback; the platform is
tests/fixtures/tlsfront.py (TLS in, plain out, recording what it can read)
or tests/fixtures/wakeproxy.py in HTTP mode (503 to the upgrade while the
sandbox behind it wakes).
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from fixtures.tlsfront import TlsFront
from fixtures.wakeproxy import WakeProxy
from nodes import free_port, wait_for

DELIVERY = 15.0


def ws_node(make_node, name: str, port: int = 0, env: dict | None = None):
    """A daemon listening on loopback TCP (the test harness's) and on ws."""
    return make_node(name, extra=["--listen", f"ws:127.0.0.1:{port}"], env=env or {})


def ws_url(node) -> str:
    found = [a for a in node.api("GET", "/v1/status")["reachable"] if a.startswith("ws://")]
    assert found, node.api("GET", "/v1/status")
    return found[0]


def texts(node, peer: str) -> Counter:
    return Counter(p.get("text", "") for r in node.inbound(peer=peer) if r["t"] == "msg"
                   for p in r["line"].get("parts") or [])


def peer_row(node, key: str) -> dict:
    return next((p for p in node.api("GET", "/v1/peers") if p["key"] == key), {})


def test_two_daemons_talk_over_ws_and_survive_a_kill_9(make_node):
    port = free_port()
    a = ws_node(make_node, "a", port).start()
    b = make_node("b").start()
    url = f"ws://127.0.0.1:{port}/"
    assert ws_url(a) == url
    res = b.api("POST", "/v1/connect", {"target": url, "timeout": 20})
    assert res["key"] == a.key
    there = b.send(a.key, "over ws, there", wait_ack=DELIVERY)
    back = a.send(b.key, "over ws, back", wait_ack=DELIVERY)
    assert there["acked"] and back["acked"]
    assert peer_row(b, a.key)["sealed"] is True
    assert url in [x["addr"] for x in peer_row(b, a.key)["addresses"]]

    a.kill()  # kill -9: no bye, no close frame
    wait_for(lambda: not peer_row(b, a.key)["state"].startswith("connected"), DELIVERY,
             "b sees a go")
    queued = [f"while a was dead {i}" for i in range(20)]
    for t in queued:
        b.send(a.key, t, th=there["th"])
    a.start()  # the same ws port: b redials the URL it knows
    wait_for(lambda: all(texts(a, b.key)[t] for t in queued), DELIVERY, "the queued lines")
    got = texts(a, b.key)
    assert all(got[t] == 1 for t in ["over ws, there", *queued]), got


def test_a_line_near_one_mib_crosses_in_pieces(make_node):
    a = ws_node(make_node, "a").start()
    b = make_node("b").start()
    b.api("POST", "/v1/connect", {"target": ws_url(a), "timeout": 20})
    big = "x" * 1_000_000  # one line of ~1 MB: several 256 KiB messages, many frames
    assert b.send(a.key, big, wait_ack=DELIVERY)["acked"]
    assert texts(a, b.key)[big] == 1


def test_wss_through_a_tls_front_verifies_and_the_front_sees_only_ciphertext(make_node, tmp_path):
    a = ws_node(make_node, "a").start()
    b = make_node("b").start()
    port = int(ws_url(a).rsplit(":", 1)[1].rstrip("/"))
    with TlsFront(port, str(tmp_path / "ca")) as front:
        with pytest.raises(Exception, match="not trusted"):
            b.api("POST", "/v1/connect", {"target": front.url, "timeout": 10})
        with open(front.ca) as f:
            pem = f.read()
        res = b.api("POST", "/v1/connect", {"target": front.url, "timeout": 20, "ca": pem})
        assert res["key"] == a.key
        assert b.send(a.key, "SECRET-OVER-WSS-4711", wait_ack=DELIVERY)["acked"]
        assert a.send(b.key, "SECRET-BACK-0815", wait_ack=DELIVERY)["acked"]
        assert b"awp.v0" in front.seen("up")
        up, down = front.payload("up"), front.payload("down")
        assert up.count(b'"t":"hello"') == 1 and up.count(b'"t":"auth"') == 1
        assert b"SECRET" not in up and b"SECRET" not in down
        assert b'"t":"resume"' not in up
        assert peer_row(b, a.key)["sealed"] is True
    # The CA is kept in the home: it is trusted from now on, restarts included.
    assert os.stat(os.path.join(b.home, "ws-ca.pem")).st_mode & 0o777 == 0o600


def test_a_plain_link_through_the_same_front_is_readable_by_it(make_node, tmp_path):
    a = ws_node(make_node, "a").start()
    b = make_node("b", env={"AWP_SEAL": "off"}).start()
    port = int(ws_url(a).rsplit(":", 1)[1].rstrip("/"))
    with TlsFront(port, str(tmp_path / "ca")) as front:
        with open(front.ca) as f:
            pem = f.read()
        b.api("POST", "/v1/connect", {"target": front.url, "timeout": 20, "ca": pem})
        assert b.send(a.key, "PLAIN-OVER-WSS-42", wait_ack=DELIVERY)["acked"]
        assert b"PLAIN-OVER-WSS-42" in front.payload("up")
        assert peer_row(b, a.key)["sealed"] is False


def test_a_bad_ca_file_is_refused_in_words(make_node):
    b = make_node("b").start()
    with pytest.raises(Exception, match="no PEM certificate"):
        b.api("POST", "/v1/connect", {"target": "wss://localhost:1/", "ca": "not a cert"})
    assert not os.path.exists(os.path.join(b.home, "ws-ca.pem"))


def test_a_dial_over_ws_wakes_a_paused_peer_answered_503(make_node):
    """The platform answers the upgrade 503 while the sandbox wakes; the dialer
    retries on its fast schedule and every queued line arrives once.  b
    advertises only the platform's URL, as a sandbox does (its own ports
    are not reachable from outside)."""
    a = make_node("a").start()
    target = f"ws://127.0.0.1:{free_port()}/"
    b = ws_node(make_node, "b")
    b.extra += ["--advertise", target]
    b.start()
    port = int(ws_url(b).rsplit(":", 1)[1].rstrip("/"))
    proxy_port = int(target.rsplit(":", 1)[1].rstrip("/"))
    with WakeProxy(port, b.proc.pid, wake_time=0.75, http=True, wake_on_dial=False,
                   port=proxy_port) as w:
        a.api("POST", "/v1/connect", {"target": target, "timeout": 20})
        first = a.send(b.key, "awake")
        wait_for(lambda: texts(b, a.key)["awake"], DELIVERY, "the first line")
        w.pause()
        wait_for(lambda: not peer_row(a, b.key)["state"].startswith("connected"), DELIVERY,
                 "a sees the link cut")
        queued = [f"queued {i}" for i in range(20)]
        for t in queued:
            a.send(b.key, t, th=first["th"])
        wait_for(lambda: w.refused_http >= 2, DELIVERY, "upgrades answered 503")
        w.arm()
        wait_for(lambda: w.wakes == 1, DELIVERY, "a's dial wakes b")
        wait_for(lambda: all(texts(b, a.key)[t] for t in queued), DELIVERY, "the queued lines")
        done = time.monotonic()
        assert done - w.woke_at <= w.wake_time + 2.5, (done - w.woke_at, a.tail_log())
    with open(a.log_path, errors="replace") as f:
        assert "HTTP 503" in f.read()
    got = texts(b, a.key)
    assert all(got[t] == 1 for t in ["awake", *queued]), got
