"""A change in a peer's sharing is noticed in the transaction that records its hello.

The notice used to be a second step after the hello was stored, so a
connection replaced in between left the new sharing list stored and the
notice was never made: the next hello then compared equal and said nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

from awp.node.mirror import Mirror
from awp.store import ops
from awp.store.db import open_store
from awp.wire.ids import IdGenerator

PEER = "k" * 43 + "A"


def _hello_in_one_step(c, mirror, shares):
    conn = SimpleNamespace(hs=SimpleNamespace(peer={"name": "sharer", "shares": shares}),
                           peer_key=PEER, peer_name="sharer")
    prev = ops.record_hello(c, PEER, conn.hs.peer, 1)
    return mirror.stored_hello(c, conn, prev, 1)


def _notices(c):
    return [r[0] for r in c.execute(
        "SELECT line FROM log WHERE peer = ? AND dir = 'notice' ORDER BY seq", (PEER,))]


def test_start_and_stop_sharing_each_leave_one_notice(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    engine = SimpleNamespace(shares=[], ids=IdGenerator(), identity=SimpleNamespace(key="me"))
    mirror = Mirror(engine)
    assert _hello_in_one_step(c, mirror, []) == []
    assert _hello_in_one_step(c, mirror, ["me"]) == [{"kind": "notice", "peer": PEER}]
    assert _hello_in_one_step(c, mirror, ["me"]) == []  # unchanged: nothing new
    assert _hello_in_one_step(c, mirror, []) == [{"kind": "notice", "peer": PEER}]
    texts = _notices(c)
    assert len(texts) == 2
    assert "shares its conversations with you" in texts[0]
    assert "stopped sharing" in texts[1]

