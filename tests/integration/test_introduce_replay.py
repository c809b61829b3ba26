"""A standalone introduction stops being replayed once the peer acks a later line.

Introductions are never acked. A peer that does not count them in its resume's
``seen`` (or does not deduplicate them) would otherwise get the same
introduction again on every reconnect until the outbox retention ran out.
"""

from __future__ import annotations

from nodes import wait_for
from rawpeer import RawPeer

from awp.wire.keys import Identity


def _known(node, ident: Identity) -> None:
    with RawPeer(node.address, ident) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
    wait_for(lambda: node.peer_state(ident.key) == "offline", 10, "raw peer offline")


def _acked(node, ident: str) -> bool:
    records = node.api("POST", "/v1/read", {"n": 1000, "mark": False})["records"]
    return any(r["id"] == ident and r["acked"] for r in records)


def _replayed(node, b: Identity, markers: list[str]) -> tuple[RawPeer, list[str]]:
    """Reconnect as ``b``, listing nothing in seen; the ids replayed before a marker.

    The marker is a msg queued just before: the outbox is replayed in order,
    so once it arrives everything older that is still queued has come.
    Markers are never acked (an ack would vouch for the lines before it), so
    earlier ones come again and are left out of what is returned.
    """
    marker = node.send(b.key, "marker")
    p = RawPeer(node.address, b)
    assert p.handshake()["t"] == "resume"
    p.resume({})  # a peer that does not count introductions in seen
    got = []
    while True:
        x = p.recv_until(lambda x: x["t"] in ("msg", "introduce"), 10)
        if x["id"] == marker["id"]:
            markers.append(marker["id"])
            return p, got
        if x["id"] not in markers:
            got.append(x["id"])


def test_introduction_is_dropped_once_a_later_line_is_acked(node):
    b, c = Identity.generate(), Identity.generate()
    _known(node, b)
    _known(node, c)
    before = node.send(b.key, "queued before the introduction")
    intro = node.api("POST", "/v1/introduce", {"to": b.key, "peer": c.key})
    after = node.send(b.key, "queued after the introduction")
    assert len({before["th"], intro["th"], after["th"]}) == 3
    markers: list[str] = []

    p, got = _replayed(node, b, markers)
    with p:
        assert got == [before["id"], intro["id"], after["id"]]
        # An ack of a line queued before the introduction says nothing about it.
        p.send_line({"t": "ack", "th": before["th"], "re": before["id"]})
        wait_for(lambda: _acked(node, before["id"]), 10, "the first msg acked")
    wait_for(lambda: node.peer_state(b.key) == "offline", 10, "raw peer offline")

    p, got = _replayed(node, b, markers)
    with p:
        assert got == [intro["id"], after["id"]]
        # An ack of a later line: the peer read the introduction before it.
        p.send_line({"t": "ack", "th": after["th"], "re": after["id"]})
        wait_for(lambda: _acked(node, after["id"]), 10, "the later msg acked")
    wait_for(lambda: node.peer_state(b.key) == "offline", 10, "raw peer offline")

    p, got = _replayed(node, b, markers)
    with p:
        assert got == [], got
