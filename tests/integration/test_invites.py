"""Invites and multi-endpoint addresses between real daemons (issue 33).

``awp invite`` on one home, ``awp connect INVITE`` on another, through the
real executable: messages flow, uses, ttl and revocation are enforced, the
grants and topic rights an invite carries arrive with the first connection,
``accept: invite-only`` admits invite holders and peers already met, a
wrong proof spends nothing, and the store never holds the secret.  Then the
``awp:`` address: a dead endpoint beside a live one, an endpoint that
answers as another key (nothing is sent to it), and the winner tried first
next time.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from nodes import ROOT, wait_for
from rawpeer import RawListener, RawPeer

from awp.wire.b64 import b64url
from awp.wire.invite import Invite, format_invite, invite_mac, parse_invite, verifier_of
from awp.wire.keys import auth_transcript
from awp.wire.multiaddr import format_multi, parse_multi


def awp(node, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``awp ARGS --home`` the node's home, as a user runs it."""
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "awp", args[0], "--home", node.home, *args[1:]],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def ok(node, *args: str) -> str:
    r = awp(node, *args)
    assert r.returncode == 0, f"awp {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def invite(node, *args: str) -> str:
    text = ok(node, "invite", *args).strip()
    assert text.startswith("awpinv:") and "\n" not in text, text
    return text


def listed(node) -> list[dict]:
    return node.api("GET", "/v1/invites")


@pytest.fixture
def pair(make_node):
    return make_node("alice").start(), make_node("bob").start()


def test_invite_then_connect_and_messages_flow(pair):
    a, b = pair
    text = invite(a)
    inv = parse_invite(text)
    assert inv.key == a.key and inv.endpoints == (a.address,) and inv.name == "alice"
    out = ok(b, "connect", text)
    assert out.startswith("connected to alice"), out
    b.send(a.key, "hello via an invite")
    wait_for(lambda: "hello via an invite" in json.dumps(a.inbound()),
             20, "bob's message at alice")
    row = listed(a)[0]
    assert row["state"] == "used" and row["uses_left"] == 0 and row["used_by"] == [b.key]
    assert "secret" not in json.dumps(row) and "verifier" not in row
    table = ok(a, "invite", "--list")
    assert inv.id in table and "used" in table and "0/1" in table


def test_a_single_use_invite_refuses_a_second_key(pair, make_node):
    a, b = pair
    c = make_node("carol").start()
    text = invite(a, "--uses", "1")
    ok(b, "connect", text)
    r = awp(c, "connect", text)
    assert r.returncode != 0
    assert "invite already used" in r.stderr, r.stderr
    assert c.key not in [p["key"] for p in a.api("GET", "/v1/peers")
                         if p["state"].startswith("connected")]


def test_an_expired_invite_is_refused(pair):
    a, b = pair
    text = invite(a, "--ttl", "1s")
    wait_for(lambda: listed(a)[0]["state"] == "expired", 10, "the invite to expire")
    r = awp(b, "connect", text)
    assert r.returncode != 0 and "invite expired" in r.stderr, r.stderr


def test_a_revoked_invite_is_refused(pair):
    a, b = pair
    text = invite(a, "--uses", "5")
    ident = parse_invite(text).id
    assert ok(a, "invite", "--revoke", ident).strip() == f"revoked {ident}"
    assert listed(a)[0]["state"] == "revoked"
    r = awp(b, "connect", text)
    assert r.returncode != 0 and "invite revoked" in r.stderr, r.stderr
    r = awp(a, "invite", "--revoke", "inv_aaaaaaaaaaaa")
    assert r.returncode != 0 and "no invite inv_aaaaaaaaaaaa" in r.stderr


def test_invite_only_admits_invite_holders_and_peers_met_only(make_node):
    a = make_node("alice").start("--accept", "invite-only")
    b, c = make_node("bob").start(), make_node("carol").start()
    r = awp(c, "connect", a.address)
    assert r.returncode != 0
    assert "admits only holders of a live invite and peers it has met" in r.stderr, r.stderr
    ok(b, "connect", invite(a))
    # bob is met now: a plain connection by address, after a restart, is admitted.
    b.kill()
    b.start()
    out = ok(b, "connect", a.address)
    assert "connected to alice" in out or "already connected" in out, out
    # carol is still a stranger, though she knocked before.
    r = awp(c, "connect", a.address)
    assert r.returncode != 0 and "invite-only" in r.stderr, r.stderr


def test_grants_and_topic_rights_arrive_with_the_first_connection(pair):
    a, b = pair
    ok(a, "topic", "create", "ops")
    text = invite(a, "--grant", "fs:read", "--topic", "ops", "--can", "post")
    row = listed(a)[0]
    assert row["caps"] == ["fs:read"] and row["topics"][0]["can"] == "post"
    ok(b, "connect", text)

    def held():
        return [g for g in b.api("GET", "/v1/grants")
                if g["kind"] == "held" and g["iss"] == a.key and g["caps"] == ["fs:read"]]

    wait_for(held, 20, "the invite's grant held at bob")
    assert "fs:read" in ok(b, "grants")
    wait_for(lambda: awp(b, "post", "alice/ops", "posted", "by", "invite").returncode == 0, 30,
             "bob may post to alice/ops", interval=0.3)
    wait_for(lambda: "posted by invite" in ok(a, "get", "ops"), 20, "bob's post at alice")


def _raw_redeem(a, inv: Invite, secret: bytes) -> dict:
    """Redeem ``inv`` from a raw peer, proving ``secret``; the daemon's answer to our auth."""
    with RawPeer(a.address) as p:
        p.send_hello()
        p.read_hello()
        mac = invite_mac(verifier_of(secret), p.my_hello, p.peer_hello_raw)
        sig = p.identity.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        p.send_line({"t": "auth", "sig": sig, "invite": {"id": inv.id, "mac": mac}})
        line = p.recv_line(10)
        if line and line.get("t") == "auth":
            line = p.recv_line(10)
        assert line is not None
        return line


def test_a_wrong_proof_is_refused_and_spends_nothing(pair):
    a, _b = pair
    inv = parse_invite(invite(a))
    got = _raw_redeem(a, inv, b"\x00" * 32)
    assert got["t"] == "err" and got["code"] == "auth"
    assert "invite proof does not verify" in got["detail"], got
    assert listed(a)[0]["uses_left"] == 1
    got = _raw_redeem(a, inv, inv.secret)
    assert got["t"] == "resume", got
    assert listed(a)[0]["uses_left"] == 0
    # A bad shape is refused before any lookup.
    with RawPeer(a.address) as p:
        p.send_hello()
        p.read_hello()
        sig = p.identity.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        p.send_line({"t": "auth", "sig": sig, "invite": {"id": inv.id, "mac": "short"}})
        line = p.recv_until(lambda x: x.get("t") == "err", 10)
        assert "bad invite" in line["detail"], line


def test_the_store_never_holds_the_secret(pair):
    a, b = pair
    inv = parse_invite(invite(a, "--uses", "2"))
    ok(b, "connect", format_invite(inv))
    a.stop()
    blob = b""
    for name in os.listdir(a.home):
        path = os.path.join(a.home, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                blob += f.read()
    assert b"awp.db" in b"".join(n.encode() for n in os.listdir(a.home))
    for form in (inv.secret, b64url(inv.secret).encode(), inv.secret.hex().encode(),
                 base64.b64encode(inv.secret)):
        assert form not in blob
    assert verifier_of(inv.secret).hex().encode() in blob  # what it keeps instead


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_a_multi_endpoint_address_connects_through_the_live_endpoint(pair):
    a, b = pair
    dead = f"tcp:127.0.0.1:{_dead_port()}"
    text = format_multi(a.key, [dead, "quic:nowhere.example:443", a.address])
    res = b.api("POST", "/v1/connect", {"target": text, "timeout": 20})
    assert res["key"] == a.key and res["via"] == a.address, res
    assert dead in res["unreached"] and "quic:nowhere.example:443" in res["unreached"]
    assert "not dialable by this awp" in res["unreached"]["quic:nowhere.example:443"]
    peer = next(p for p in b.api("GET", "/v1/peers") if p["key"] == a.key)
    by = {x["addr"]: x for x in peer["addresses"]}
    assert set(by) >= {dead, a.address, "quic:nowhere.example:443"}
    assert by[a.address]["last_success"] > 0 and by[a.address]["hs_ms"] > 0
    assert by[dead]["last_success"] == 0


def test_the_endpoint_that_won_is_tried_first_next_time(pair):
    a, b = pair
    with socket.socket() as silent:  # accepts, never answers: a stuck endpoint
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        stuck = f"tcp:127.0.0.1:{silent.getsockname()[1]}"
        text = format_multi(a.key, [stuck, a.address])
        assert b.api("POST", "/v1/connect", {"target": text})["via"] == a.address
        assert f"at 2 endpoints, {stuck} first" in b.tail_log(10_000)
        ok(b, "bye", "alice")
        wait_for(lambda: b.peer_state(a.key) != "connected (out)", 10, "bob to say bye")
        assert b.api("POST", "/v1/connect", {"target": text})["via"] == a.address
    log = b.tail_log(10_000)
    assert log.count(f"at 2 endpoints, {a.address} first") == 1, log[-3000:]


def test_an_endpoint_answering_as_another_key_is_a_key_mismatch_and_gets_nothing(pair):
    a, b = pair
    with RawListener(name="mallory") as impostor:
        text = format_multi(a.key, [impostor.address])
        out: dict = {}

        def connect():
            r = awp(b, "connect", text)
            out["r"] = r

        t = threading.Thread(target=connect)
        t.start()
        p = impostor.accept(20)
        p.send_hello()
        got = p.read_hello()  # bob's hello: what anyone dialed gets at once
        assert got["key"] == b.key
        assert p.closed(10), "bob kept the connection open"
        assert [json.loads(x)["t"] for x in p.received] == ["hello"], p.received
        t.join(60)
    r = out["r"]
    assert r.returncode != 0
    assert (f"key mismatch: {impostor.address} answered as {impostor.key}, expected {a.key}"
            in r.stderr), r.stderr


def test_live_invites_are_bounded_by_the_config(make_node):
    a = make_node("alice").with_limits(invites=1).start()
    first = parse_invite(invite(a))
    r = awp(a, "invite")
    assert r.returncode != 0 and "limits.invites is 1" in r.stderr, r.stderr
    ok(a, "invite", "--revoke", first.id)
    invite(a)  # a revoked one no longer counts


def test_several_listeners_give_an_awp_address_and_hello_addrs_reach_the_peer(make_node):
    a = make_node("alice")
    sock = os.path.join(os.path.dirname(a.home), "alice.second.sock")
    a.start("--listen", f"unix:{sock}")
    b = make_node("bob").start()
    st = a.api("GET", "/v1/status")
    multi = st["multi_address"]
    assert multi.startswith("awp:"), st
    m = parse_multi(multi)
    assert m.key == a.key and set(m.endpoints) == {a.address, f"unix:{sock}"}
    assert multi in ok(a, "status")
    # bob dials one endpoint; alice's hello tells it the other, stored as hers.
    b.connect(a)
    peer = next(p for p in b.api("GET", "/v1/peers") if p["key"] == a.key)
    assert {x["addr"] for x in peer["addresses"]} >= {a.address, f"unix:{sock}"}
