"""The redial schedule while a peer wakes (awp.node.wake), on a fake clock."""

from __future__ import annotations

import errno

import pytest

from awp.node.connection import jittered, next_backoff
from awp.node.wake import FAST_WINDOW, Streak, fast_wait, looks_waking, looks_waking_text


class _Slot:
    """The redial loop's arithmetic, as awp.node.peers does it, on a fake clock."""

    def __init__(self, base: float = 1.0, cap: float = 60.0) -> None:
        self.base, self.cap = base, cap
        self.backoff = base
        self.streak = Streak()

    def fail(self, now: float, waking: bool, rnd: float = 0.5) -> float:
        wait = self.streak.failed(now, waking, rnd)
        if wait is None:
            wait = jittered(self.backoff, rnd)
            self.backoff = next_backoff(self.backoff, self.cap)
        return wait


def _streak(slot: _Slot, waking: bool, until: float, rnd: float = 0.5,
            dial: float = 0.0) -> list[tuple[float, float]]:
    """Failures from t=0 until ``until``: (time of the failure, the wait it got)."""
    now, out = 0.0, []
    while now < until:
        wait = slot.fail(now, waking, rnd)
        out.append((now, wait))
        now += wait + dial
    return out


def test_a_waking_streak_retries_at_half_one_two_then_two():
    waits = [w for _t, w in _streak(_Slot(), True, 10)]
    assert waits[:6] == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]


def test_jitter_stays_within_a_tenth_either_way():
    assert fast_wait(0, 0.0) == pytest.approx(0.45)
    assert fast_wait(0, 0.999999) == pytest.approx(0.55)
    assert fast_wait(7, 0.0) == pytest.approx(1.8)
    assert fast_wait(7, 0.999999) == pytest.approx(2.2)


def test_after_the_window_the_ordinary_backoff_starts_from_its_base():
    slot = _Slot()
    got = _streak(slot, True, FAST_WINDOW + 20)
    fast = [(t, w) for t, w in got if t < FAST_WINDOW]
    after = [w for t, w in got if t >= FAST_WINDOW]
    assert all(w <= 2.0 for _t, w in fast)
    # rnd 0.5 makes jittered(b) == b: 1, 2, 4, 8, 16 ... never a minute at once
    assert after[:4] == [1.0, 2.0, 4.0, 8.0]


def test_a_dead_peer_costs_at_most_eighteen_fast_dials():
    """The bound docs/threat-model.md names: jitter at its shortest, dials instant."""
    for rnd in (0.0, 0.5, 0.999999):
        got = _streak(_Slot(), True, FAST_WINDOW, rnd=rnd)
        assert len(got) <= 18, (rnd, len(got))
    assert len(_streak(_Slot(), True, FAST_WINDOW, rnd=0.5)) == 17


def test_failures_that_do_not_look_waking_back_off_as_before():
    waits = [w for _t, w in _streak(_Slot(), False, 200)]
    assert waits[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]


def test_a_connection_starts_a_new_streak():
    slot = _Slot()
    _streak(slot, True, FAST_WINDOW + 5)  # past the window: ordinary backoff now
    assert slot.fail(40.0, True) > 2.0
    slot.streak.reset()
    assert slot.fail(100.0, True) == 0.5
    assert slot.fail(100.5, True) == 1.0


def test_the_step_follows_the_streak_s_time_not_its_count():
    """Dials a kick adds (lines queued meanwhile) do not hurry it to 2 s."""
    slot = _Slot()
    assert [slot.fail(t, True) for t in (0.0, 0.1, 0.2, 0.3)] == [0.5] * 4
    assert slot.fail(0.8, True) == 1.0
    assert slot.fail(1.6, True) == 2.0
    # shortest jitter all along still climbs: 0.45, then 0.9, then 1.8
    slot = _Slot()
    assert slot.fail(0.0, True, rnd=0.0) == pytest.approx(0.45)
    assert slot.fail(0.45, True, rnd=0.0) == pytest.approx(0.9)
    assert slot.fail(1.35, True, rnd=0.0) == pytest.approx(1.8)


def test_a_timeout_inside_a_waking_streak_backs_off_but_keeps_the_window():
    slot = _Slot()
    assert slot.fail(0.0, True) == 0.5
    assert slot.fail(0.5, False) == 1.0  # ordinary, and the backoff rises
    assert slot.fail(2.0, True) == 2.0  # the window is still open (2 s in: the 2 s step)
    assert slot.backoff == 2.0


def test_what_looks_like_waking():
    class WakeRefused(Exception):
        """As the ws binding names it (matched by name, not imported)."""

    class Sub(WakeRefused):
        pass

    assert looks_waking(WakeRefused("503"))
    assert looks_waking(Sub("502"))
    assert looks_waking(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert looks_waking(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert looks_waking(Exception("dial tcp:127.0.0.1:9: connection refused"))
    try:
        try:
            raise WakeRefused("upgrade answered 503")
        except WakeRefused as e:
            raise OSError("dial failed") from e
    except OSError as wrapped:
        assert looks_waking(wrapped)
    assert looks_waking_text("peer closed during handshake")
    assert looks_waking_text("connection lost: [Errno 104] Connection reset by peer")
    assert not looks_waking(TimeoutError("timed out"))
    assert not looks_waking(Exception("dial tcp:10.0.0.1:9 timed out after 30s"))
    assert not looks_waking_text("auth: key mismatch")
    assert not looks_waking(None)
