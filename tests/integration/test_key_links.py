"""Several keys, one identity (issue 35, "Advertising more than one key"): a
long-lived key and a sandbox's key link themselves with a statement both sign,
and a peer that meets either shows the two as one identity."""

from __future__ import annotations

import json

from nodes import wait_for
from rawpeer import RawPeer
from test_key_rotation import awp, ok

from awp.wire import keylink as K
from awp.wire.keys import Identity


def _peer(node, key: str) -> dict | None:
    return next((p for p in node.api("GET", "/v1/peers") if p["key"] == key), None)


def test_two_keys_linked_show_as_one_identity(make_node):
    home, sandbox, peer = (make_node(n).start() for n in ("home", "sandbox", "peer"))
    started = json.loads(ok(home, "key", "link", sandbox.key, "--json"))
    assert started["missing"] == [sandbox.key]
    line = json.dumps(started["statement"])
    whole = json.loads(ok(sandbox, "key", "link", "--statement", line, "--json"))
    assert whole["missing"] == [] and sorted(whole["statement"]["keys"]) == sorted(
        [home.key, sandbox.key])
    # the sandbox shows it to a peer: the peer sees one identity of two keys
    sandbox.connect(peer)
    row = wait_for(lambda: (p := _peer(peer, sandbox.key)) and p["linked"] and p, 20,
                   "the peer to take the link")
    assert row["linked"] == [home.key]
    assert f"one identity with {home.key}" in ok(peer, "peers")
    # the long-lived key learns the whole statement when the sandbox meets it,
    # and carries it from then on: a peer meeting it sees the same identity
    sandbox.connect(home)
    wait_for(lambda: any(lk["mine"] for lk in home.api("GET", "/v1/key/links")["links"]), 20,
             "home to carry the link")
    other = make_node("other").start()
    home.connect(other)
    row = wait_for(lambda: (p := _peer(other, home.key)) and p["linked"] and p, 20, "other")
    assert row["linked"] == [sandbox.key]
    # kept across a restart of the peer
    peer.stop()
    peer.start()
    assert _peer(peer, sandbox.key)["linked"] == [home.key]


def test_a_link_not_signed_by_every_key_is_refused(make_node):
    a = make_node("a").start()
    mallory, victim = Identity.generate(), Identity.generate()
    st = K.make(mallory, [victim.key], 1796677000000)  # the victim never signed
    r = awp(a, "key", "link", "--statement", json.dumps(st))
    assert r.returncode == 1 and "does not list our key" in r.stderr
    forged = dict(st, sigs={**st["sigs"], victim.key: st["sigs"][mallory.key]})
    # a peer showing it in its auth: it is not kept
    with RawPeer(a.address, identity=mallory) as p:
        p.auth_extra = {"keys": [forged, st]}  # fields our auth carries
        assert p.handshake(caps=["chat", K.CAP])["t"] == "resume"
        p.resume()
        wait_for(lambda: _peer(a, mallory.key) is not None, 10, "mallory known")
    assert _peer(a, mallory.key)["linked"] == []
    assert a.api("GET", "/v1/key/links")["links"] == []
