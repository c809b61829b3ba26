"""Sealed links between two real daemons, seen from a middlebox that reads and tampers.

The proxy records every byte both ways: with both daemons offering the seal
extension the message text never crosses it in the clear, and a flipped,
dropped, injected or replayed byte ends the link without storing anything
forged; the line then arrives once over the next connection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from fixtures.tapproxy import TapProxy
from nodes import ROOT, wait_for

DELIVERY = 15.0


def peer_row(node, key: str) -> dict:
    for p in node.api("GET", "/v1/peers"):
        if p["key"] == key:
            return p
    return {}


def texts(node, needle: str) -> list[str]:
    return [p.get("text", "") for r in node.inbound() for p in r["line"].get("parts") or []
            if needle in (p.get("text") or "")]


def start_pair(make_node, a_env=None, b_env=None):
    a = make_node("a", env=a_env or {}).start()
    b = make_node("b", env=b_env or {}).start()
    return a, b


def test_a_middlebox_sees_only_the_handshake(make_node):
    a, b = start_pair(make_node)
    with TapProxy(a.port) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        wait_for(lambda: peer_row(b, a.key).get("sealed") is True, DELIVERY, "a sealed link")
        there = a.send(b.key, "SECRET-DOWN-4711", wait_ack=DELIVERY)
        back = b.send(a.key, "SECRET-UP-0815", wait_ack=DELIVERY)
        assert there["acked"] and back["acked"]
        assert texts(b, "SECRET-DOWN-4711") and texts(a, "SECRET-UP-0815")
        for way in ("up", "down"):
            seen = proxy.seen(way)
            assert b"SECRET" not in seen and b'"t":"resume"' not in seen, way
            assert seen.count(b'"t":"hello"') == 1 and seen.count(b'"t":"auth"') == 1, way
        assert peer_row(a, b.key)["sealed"] is True
        shown = subprocess.run([sys.executable, "-m", "awp", "peers", "--home", b.home],
                               capture_output=True, text=True, cwd=ROOT, timeout=30,
                               env={**os.environ, "PYTHONPATH": ROOT})
        assert shown.returncode == 0 and "sealed" in shown.stdout, shown


def test_one_side_off_stays_plain_and_says_so(make_node):
    a, b = start_pair(make_node, b_env={"AWP_SEAL": "off"})
    with TapProxy(a.port) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        sent = a.send(b.key, "PLAIN-TEXT-42", wait_ack=DELIVERY)
        assert sent["acked"]
        assert b"PLAIN-TEXT-42" in proxy.seen("down")
        assert peer_row(a, b.key)["sealed"] is False
        assert peer_row(b, a.key)["sealed"] is False


def test_require_refuses_a_plain_peer_in_words(make_node):
    a, b = start_pair(make_node, a_env={"AWP_SEAL": "require"}, b_env={"AWP_SEAL": "off"})
    with pytest.raises(Exception, match="requires sealed links"):
        b.api("POST", "/v1/connect", {"target": a.address, "timeout": 20})
    assert peer_row(a, b.key).get("state", "offline") != "connected (in)"


def test_require_remote_lets_a_loopback_link_stay_plain(make_node):
    a, b = start_pair(make_node, a_env={"AWP_SEAL": "require-remote"},
                      b_env={"AWP_SEAL": "off"})
    assert b.api("POST", "/v1/connect", {"target": a.address, "timeout": 20})
    assert peer_row(b, a.key)["sealed"] is False


def test_a_bad_policy_is_refused_at_start(make_node):
    n = make_node("n", env={"AWP_SEAL": "sometimes"})
    n.start(wait=False)
    assert n.proc is not None and n.proc.wait(20) != 0
    assert "seal policy must be one of" in n.tail_log()


def _flip(chunk: bytes) -> bytes:
    b = bytearray(chunk)
    b[len(b) // 2] ^= 0x01
    return bytes(b)


ATTACKS = {
    "flip": _flip,
    "drop": lambda chunk: b"",
    "inject": lambda chunk: chunk + b"\x00\x00\x00\x20" + os.urandom(32),
    "replay": lambda chunk: chunk + chunk,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_tampering_ends_the_link_and_forges_nothing(make_node, attack):
    a, b = start_pair(make_node)
    armed = threading.Event()

    def tamper(way: str, offset: int, chunk: bytes) -> bytes | None:
        if way != "down" or not armed.is_set():
            return None
        return ATTACKS[attack](chunk)

    with TapProxy(a.port, tamper=tamper) as proxy:
        assert b.api("POST", "/v1/connect", {"target": proxy.address, "timeout": 20})
        wait_for(lambda: peer_row(b, a.key).get("sealed") is True, DELIVERY, "a sealed link")
        first = a.send(b.key, "BEFORE-THE-ATTACK", wait_ack=DELIVERY)
        assert first["acked"]
        armed.set()
        hit = a.send(b.key, "UNDER-ATTACK-1", th=first["th"], wait_ack=0)
        assert proxy.tampered.wait(DELIVERY), "nothing crossed the proxy after arming"
        # "drop" leaves the link up until something more comes: a ping or the next line.
        a.send(b.key, "UNDER-ATTACK-2", th=first["th"], wait_ack=0)
        wait_for(lambda: proxy.accepted >= 2, 45, "a new connection after the attack")
        assert a.api("POST", "/v1/wait_ack", {"id": hit["id"], "timeout": 30})["acked"]
        wait_for(lambda: len(texts(b, "UNDER-ATTACK-2")) == 1, 30, "the second line")
        assert texts(b, "UNDER-ATTACK-1") == ["UNDER-ATTACK-1"]  # once, and as sent
        assert texts(b, "BEFORE-THE-ATTACK") == ["BEFORE-THE-ATTACK"]
        assert len(b.inbound(th=first["th"])) == 3
        log = b.tail_log(400)
        if attack != "drop":
            assert "sealed link broken" in log, log
        assert json.dumps(peer_row(b, a.key))  # the peer row survived and reads back
