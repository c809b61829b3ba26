"""Change hints reach only the subscribers that want their kind."""

from __future__ import annotations

import trio

from awp.node.events import Broadcaster


def _drain(recv: trio.MemoryReceiveChannel) -> list[str]:
    out = []
    while True:
        try:
            out.append(recv.receive_nowait()["kind"])
        except trio.WouldBlock:
            return out


def test_each_subscriber_gets_the_kinds_it_wants():
    b = Broadcaster()
    with b.subscribe() as every, b.subscribe(kinds=("board",)) as board, \
            b.subscribe(ignore=("board", "ack")) as other:
        for kind in ("board", "ack", "peer", "board"):
            b.publish({"kind": kind})
        assert _drain(every) == ["board", "ack", "peer", "board"]
        assert _drain(board) == ["board", "board"]
        assert _drain(other) == ["peer"]
    b.publish({"kind": "board"})  # no one left: nothing raised


def test_a_call_runs_as_each_hint_of_its_kinds_is_published():
    b = Broadcaster()
    got: list[str] = []
    with b.calling(lambda ev: got.append(ev["kind"]), kinds=("board",)):
        for kind in ("board", "ack", "board"):
            b.publish({"kind": kind})
        assert got == ["board", "board"]
    b.publish({"kind": "board"})  # taken off when the block ends
    assert got == ["board", "board"]
