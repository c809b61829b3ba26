"""The pause detector (awp.node.pausewatch.PauseDetector) on made-up clocks."""

from __future__ import annotations

import pytest

from awp.node.pausewatch import PauseDetector


def _run(events: list[tuple[float, float]], gap: float = 5.0) -> list[float | None]:
    d = PauseDetector(gap=gap, every=1.0)
    return [d.tick(mono, wall) for mono, wall in events]


def test_regular_ticks_are_no_pause():
    events = [(100.0 + i * 1.02, 1e9 + i * 1.01) for i in range(20)]
    assert _run(events) == [None] * 20


def test_the_first_tick_only_sets_the_clocks():
    assert _run([(0.0, 1e9)]) == [None]


def test_a_sigstop_moves_the_monotonic_clock():
    got = _run([(10.0, 1e9), (11.0, 1e9 + 1), (23.5, 1e9 + 13.5), (24.5, 1e9 + 14.5)])
    assert got[:2] == [None, None]
    assert got[2] == pytest.approx(11.5)
    assert got[3] is None


def test_a_frozen_vm_moves_only_the_wall_clock():
    got = _run([(10.0, 1e9), (11.0, 1e9 + 1), (12.0, 1e9 + 62)])
    assert got[2] == pytest.approx(60.0)


def test_gaps_up_to_the_threshold_are_a_busy_loop():
    got = _run([(0.0, 0.0), (6.0, 6.0), (12.1, 12.1)])
    assert got == [None, None, pytest.approx(5.1)]


def test_a_wall_clock_set_back_is_not_a_pause():
    assert _run([(0.0, 1e9), (1.0, 1e9 - 3600)]) == [None, None]


def test_the_threshold_is_configurable():
    assert _run([(0.0, 0.0), (4.0, 4.0)], gap=2.0)[1] == pytest.approx(3.0)
    assert _run([(0.0, 0.0), (4.0, 4.0)], gap=5.0)[1] is None


def test_pause_gap_comes_from_config_json(tmp_path):
    import json

    from awp.daemon.app import node_config
    from awp.daemon.configfile import check_config
    from awp.daemon.settings import Flags, resolve

    (tmp_path / "config.json").write_text(json.dumps({"pause_gap": "2s"}))
    assert node_config(resolve(str(tmp_path), Flags(), {}, env={})).pause_gap == 2.0
    (tmp_path / "config.json").write_text("{}")
    assert node_config(resolve(str(tmp_path), Flags(), {}, env={})).pause_gap == 5.0
    with pytest.raises(ValueError, match="pause_gap"):
        check_config({"pause_gap": "soon"})


class _Out:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(data)


class _Session:
    def __init__(self) -> None:
        self.last_recv = 0.0

    def line(self, line: dict) -> bytes:
        return (str(line) + "\n").encode()


class _Conn:
    """What PauseWatcher._probe touches of a Connection."""

    def __init__(self) -> None:
        import trio

        self.out, self.session = _Out(), _Session()
        self.closed = trio.Event()
        self.reason = ""

    def close(self, reason: str = "") -> None:
        self.reason = reason
        self.closed.set()


def _probe(answer_after: float | None) -> tuple[_Conn, float]:
    """Probe a fake link that answers ``answer_after`` s after the ping (None: never)."""
    import trio
    import trio.testing

    from awp.node.pausewatch import PauseWatcher

    conn = _Conn()
    took = 0.0

    async def main() -> None:
        nonlocal took
        watcher = PauseWatcher.__new__(PauseWatcher)  # _probe uses no engine state

        async def answer() -> None:
            await trio.sleep(answer_after)
            conn.session.last_recv = trio.current_time()

        async with trio.open_nursery() as n:
            if answer_after is not None:
                n.start_soon(answer)
            start = trio.current_time()
            await watcher._probe(conn)
            took = trio.current_time() - start
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return conn, took


def test_a_link_that_answers_the_probe_stays():
    conn, took = _probe(0.3)
    assert b"ping" in conn.out.sent[0]
    assert not conn.closed.is_set() and took < 0.5


def test_a_link_silent_after_a_pause_is_closed_after_the_deadline():
    from awp.node.pausewatch import PROBE_DEADLINE

    conn, took = _probe(None)
    assert conn.closed.is_set() and "after a pause" in conn.reason
    assert PROBE_DEADLINE <= took < PROBE_DEADLINE + 0.5
    conn, _ = _probe(PROBE_DEADLINE + 1)  # an answer too late does not save it
    assert conn.closed.is_set()
