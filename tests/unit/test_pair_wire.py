"""Pair streams' pure parts: control lines, the record part, and the splice's rules."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awp.node.pair_held import HeldEnd
from awp.node.pair_splice import CHUNK, hung_up, splice
from awp.wire import pair as wire


def run(fn):
    """Run an async test under trio (no pytest plugin for it here)."""
    def test():
        trio.run(fn)
    test.__name__ = fn.__name__
    return test


def test_request_lines_are_checked():
    assert wire.check_request(wire.request("01ABC", "thr_x")) == ("01ABC", "thr_x")
    assert wire.check_request({"t": "pair", "id": "p1"}) == ("p1", "")
    for bad in (None, [], {"t": "want", "id": "x"}, {"t": "pair"}, {"t": "pair", "id": ""},
                {"t": "pair", "id": "a b"}, {"t": "pair", "id": "x" * 65},
                {"t": "pair", "id": "x", "th": 5}, {"t": "pair", "id": "x", "th": "t\n"}):
        with pytest.raises(wire.PairError):
            wire.check_request(bad)


def test_answers():
    assert wire.answer(wire.ok("p1"), "p1") == ""
    assert wire.answer(wire.ok("p2"), "p1").startswith("unexpected answer")
    why = wire.answer(wire.err("p1", "forbidden", "no one here accepts pair streams from you"),
                      "p1")
    assert why == "no one here accepts pair streams from you (forbidden)"
    assert wire.answer({"t": "err", "detail": "x" * 5000}, "p1") == "x" * 300
    assert wire.answer("nonsense", "p1")


def test_record_part_and_its_text():
    part = wire.record_part(ident="p1", sent=3 * 1024 * 1024, received=10, ms=1500)
    assert part == {"k": "data", "mime": wire.RECORD_MIME,
                    "data": {"id": "p1", "sent": 3145728, "received": 10, "ms": 1500}}
    assert wire.describe(part["data"], "bob") == (
        "pair stream with bob: 3.0 MiB sent, 10 B received, 1.5 s")
    broke = wire.record_part(ident="p1", sent=0, received=0, ms=0, error="cut")["data"]
    assert wire.describe(broke).endswith("; it broke: cut")
    assert wire.describe({"sent": -1, "received": True, "ms": "x"}) == (
        "pair stream: 0 B sent, 0 B received, 0.0 s")


async def _pump(stream, data: bytes) -> None:
    for i in range(0, len(data), 1000):
        await stream.send_all(data[i:i + 1000])
    await stream.send_eof()


async def _drain(stream) -> bytes:
    out = bytearray()
    while b := await stream.receive_some(65536):
        out += b
    return bytes(out)


@run
async def test_splice_passes_bytes_and_each_end_of_file():
    caller, local = trio.testing.memory_stream_pair()
    remote, peer = trio.testing.memory_stream_pair()
    up, down = bytes(range(256)) * 300, b"answer" * 999
    got: dict = {}

    async def side(name, stream, data):
        async with trio.open_nursery() as n:
            n.start_soon(_pump, stream, data)
            got[name] = await _drain(stream)

    async with trio.open_nursery() as n:
        n.start_soon(side, "caller", caller, up)
        n.start_soon(side, "peer", peer, down)
        with trio.fail_after(10):
            out = await splice(local, b"", remote, b"")
    assert got == {"peer": up, "caller": down}
    assert (out.sent, out.received, out.error) == (len(up), len(down), "")


@run
async def test_splice_sends_what_was_read_ahead_first():
    caller, local = trio.testing.memory_stream_pair()
    remote, peer = trio.testing.memory_stream_pair()
    await caller.send_eof()
    await peer.send_eof()
    with trio.fail_after(10):
        out = await splice(local, b"early-local", remote, b"early-remote")
    assert await _drain(peer) == b"early-local" and await _drain(caller) == b"early-remote"
    assert (out.sent, out.received) == (11, 12)


@run
async def test_a_stalled_reader_holds_the_writer_until_the_peer_leaves():
    caller, local = trio.testing.lockstep_stream_pair()  # no buffers at all
    remote, peer = trio.testing.lockstep_stream_pair()
    result, wrote = [], []

    async def run():
        result.append(await splice(local, b"", remote, b""))
        await local.aclose()

    async def write():
        try:
            await caller.send_all(b"x" * (5 * CHUNK))
            wrote.append(True)
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as n:
        n.start_soon(run)
        n.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        # The peer reads nothing: one chunk is in the copy's hands, the rest waits.
        assert not wrote and not result
        await peer.aclose()  # then the peer leaves: its command exited
    assert not wrote
    assert result[0].error == "" and result[0].sent == 0 and result[0].received == 0


@run
async def test_a_held_end_bounds_both_ways_and_passes_the_ends():
    end = HeldEnd(bound=10)
    await end.put(b"0123456789")  # fills the caller's side
    with trio.move_on_after(0.05) as scope:
        await end.put(b"x")
    assert scope.cancelled_caught  # the eleventh byte waits for the peer to take some
    assert await end.receive_some(4) == b"0123"
    await end.put(b"x")
    await end.send_all(b"a" * 10)  # the peer's side: full too
    with trio.move_on_after(0.05) as scope:
        await end.send_all(b"b")
    assert scope.cancelled_caught
    assert await end.take(100, 0) == (b"a" * 10, False)
    await end.send_eof()
    assert await end.take(100, 0) == (b"", True)
    end.end_mine()
    assert await end.receive_some(100) == b"456789x"
    assert await end.receive_some(100) == b""


def test_a_held_end_left_alone_is_closed():
    async def main():
        end = HeldEnd()
        async with trio.open_nursery() as n:
            n.start_soon(end.close_when_idle, 600.0)
            await trio.sleep(599)
            await end.take(1, 0)  # a touch: another 600 s from here
            await trio.sleep(599)
            assert not end.gone
            await trio.sleep(2)
            assert end.gone
            assert hung_up(end)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
