"""Introductions rank below what a peer says of itself and never shadow a name (issue 20 item 14)."""

from __future__ import annotations

import os

import pytest
from nodes import Node, wait_for

from awp.localapi.client import ApiFailure


def test_an_introduced_impostor_neither_shadows_nor_crowds_a_name(make_node, request) -> None:
    victim = make_node("victim").start()
    builder = make_node("builder").start()
    mallory = make_node("mallory").start()
    impostor = Node(os.path.join(os.path.dirname(victim.home), "impostor"), "builder").start()
    request.addfinalizer(impostor.kill)
    victim.connect(builder)
    victim.connect(mallory)
    mallory.connect(impostor)
    assert victim.api("POST", "/v1/resolve", {"peer": "builder"})["key"] == builder.key
    # Mallory introduces its own "builder" (another key), and builder's key with its
    # own address as if it were builder's.
    mallory.api("POST", "/v1/introduce", {"to": victim.key, "peer": impostor.key})
    wait_for(lambda: [r for r in victim.api("POST", "/v1/read", {"n": 50, "mark": False})[
        "records"] if r["t"] == "introduce"], 10, "the introduction")
    # No phantom name: `awp send builder` still means the builder victim knows.
    assert victim.api("POST", "/v1/resolve", {"peer": "builder"})["key"] == builder.key
    peers = {p["key"]: p for p in victim.api("GET", "/v1/peers")}
    assert peers[impostor.key]["name"] == "" and not peers[builder.key]["lookalike"]


def test_the_introduced_name_still_serves_connect_when_nothing_else_claims_it(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    c = make_node("c").start()
    b.connect(a)
    c.connect(b)
    b.api("POST", "/v1/introduce", {"to": c.key, "peer": a.key})
    wait_for(lambda: [r for r in c.api("POST", "/v1/read", {"n": 50, "mark": False})[
        "records"] if r["t"] == "introduce"], 10, "the introduction")
    with pytest.raises(ApiFailure) as e:  # send: not by a name only hearsay gave
        c.api("POST", "/v1/resolve", {"peer": "a"})
    assert e.value.status == 404 and f"awp connect {a.key.split(':')[1][:10]}" in e.value.message
    assert c.api("POST", "/v1/connect", {"target": "a"})["key"] == a.key
    wait_for(lambda: c.api("POST", "/v1/resolve", {"peer": "a"})["key"] == a.key, 10,
             "a's own hello names it")
