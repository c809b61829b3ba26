"""Grants, revocation, expiry, trust, introductions and audience binding."""

from __future__ import annotations

import pytest
from nodes import wait_for

from awp.localapi.client import ApiFailure


def _kinds(node, kind: str) -> list[dict]:
    return [g for g in node.api("GET", "/v1/grants") if g["kind"] == kind]


def _caps_on(node, peer_key: str) -> set[str]:
    """What ``peer_key`` may do on ``node``, asked through a request it would serve."""
    return set(node.api("GET", "/v1/caps", peer=peer_key)["caps"])


def test_grant_reaches_the_peer_and_is_listed_three_ways(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    res = a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 600})
    assert res["delivered"] and not res["warning"]
    held = wait_for(lambda: _kinds(b, "held"), 10, "b holds the grant")
    assert held[0]["hash"] == res["hash"] and held[0]["iss_name"] == "a"
    issued = _kinds(a, "issued")
    assert issued[0]["sub_name"] == "b" and issued[0]["caps"] == ["fs:read"]
    assert _caps_on(a, b.key) == {"fs:read"}
    # exec and fs:write carry the remote-code-execution warning
    res = a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["exec", "fs:write"], "ttl": 60})
    assert "remote code execution" in res["warning"]


def test_grant_made_while_offline_is_delivered_after_resume(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    b.stop()
    a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 600})
    b.start()
    b.connect(a)
    wait_for(lambda: _kinds(b, "held"), 10, "grant re-sent after resume")


def test_revoke_and_expiry(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    res = a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 2})
    assert _caps_on(a, b.key) == {"fs:read"}
    wait_for(lambda: not _caps_on(a, b.key), 10, "grant expires")
    assert [g["expired"] for g in _kinds(a, "issued")] == [True]
    res = a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["exec"], "ttl": 600})
    assert _caps_on(a, b.key) == {"exec"}
    assert a.api("POST", "/v1/revoke", {"hash": res["hash"][:8]})["revoked"] == res["hash"]
    assert not _caps_on(a, b.key)
    with pytest.raises(ApiFailure):
        a.api("POST", "/v1/revoke", {"hash": res["hash"][:8]})


def test_trusted_issuer_and_introduction_with_attenuation(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    c = make_node("c").start()
    b.connect(a)
    c.connect(b)
    # A lets B introduce others, carrying at most fs:read
    a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["introduce", "fs:read"], "ttl": 600})
    wait_for(lambda: _kinds(b, "held"), 10, "b holds introduce")
    # B introduces C to A with fs:read and exec; exec is beyond what B may pass on
    b.api("POST", "/v1/introduce", {"to": c.key, "peer": a.key, "caps": ["fs:read", "exec"]})
    intro = wait_for(lambda: [r for r in c.inbound() if r["t"] == "introduce"], 10, "intro")
    assert intro[0]["line"]["peer"]["key"] == a.key
    held = _kinds(c, "held")
    assert held and held[0]["aud"] == a.key
    # C connects to A by the introduced name; A honors fs:read only (attenuated)
    assert c.api("POST", "/v1/connect", {"target": "a"})["key"] == a.key
    wait_for(lambda: _kinds(a, "presented"), 10, "grant presented in auth")
    assert _caps_on(a, c.key) == {"fs:read"}
    # the introduced grant gives C nothing on B (audience is A)
    assert not _caps_on(b, c.key)


def test_introduction_without_introduce_grant_is_not_honored(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    c = make_node("c").start()
    b.connect(a)
    c.connect(b)
    a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 600})
    b.api("POST", "/v1/introduce", {"to": c.key, "peer": a.key, "caps": ["fs:read"]})
    wait_for(lambda: _kinds(c, "held"), 10, "c holds the introduced grant")
    c.api("POST", "/v1/connect", {"target": a.address})
    wait_for(lambda: _kinds(a, "presented"), 10, "grant presented")
    assert not _caps_on(a, c.key)


def test_trust_flag_honors_grants_from_a_trusted_key(make_node):
    t = make_node("t").start()
    b = make_node("b").start()
    a = make_node("a", extra=["--trust", t.key]).start()
    b.connect(t)
    t.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 600})
    wait_for(lambda: _kinds(b, "held"), 10, "b holds t's grant")
    b.connect(a)
    wait_for(lambda: _kinds(a, "presented"), 10, "presented to a")
    assert _caps_on(a, b.key) == {"fs:read"}


def test_allowlist_admits_a_peer_presenting_an_honored_grant(make_node):
    t = make_node("t").start()
    b = make_node("b").start()
    a = make_node("a", extra=["--accept", "allowlist", "--trust", t.key]).start()
    b.connect(t)
    t.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 600})
    wait_for(lambda: _kinds(b, "held"), 10, "b holds t's grant")
    assert b.connect(a)["key"] == a.key


def test_forged_expired_and_misaddressed_grants_are_ignored(make_node):
    from rawpeer import RawPeer

    from awp.wire.grants import make_grant
    from awp.wire.keys import Identity
    from awp.wire.timefmt import now_ms

    a = make_node("a").start()
    me = Identity.generate()
    other = Identity.generate()
    with RawPeer(a.address, me) as p:
        p.handshake()
        good = make_grant(other, me.key, ["fs:read"], now_ms() + 600_000)
        forged = dict(good, caps=["exec"])
        expired = make_grant(other, me.key, ["fs:read"], now_ms() - 1000)
        elsewhere = make_grant(me, other.key, ["fs:read"], now_ms() + 600_000)
        self_signed = make_grant(me, me.key, ["fs:read"], now_ms() + 600_000)
        for g in (forged, expired, elsewhere, self_signed, {"iss": "nonsense"}):
            p.send_line({"t": "grant", "grant": g})
        assert p.ping()["t"] == "pong"
        assert a.api("GET", "/v1/grants") == []
        p.send_line({"t": "grant", "grant": good})
        assert p.ping()["t"] == "pong"
        wait_for(lambda: _kinds(a, "presented"), 5, "the genuine grant is kept")
