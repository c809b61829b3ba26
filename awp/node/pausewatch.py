"""Noticing that this daemon slept, and making up for it at once.

A sandbox platform pauses an idle sandbox with SIGSTOP or freezes its whole
VM.  Nothing runs meanwhile, so nothing notices: the peer gave up on our
links, the platform cut them, and each redial loop sits in the middle of a
backoff wait that began before the pause.  On resume the daemon would wait
out that backoff (or a dial-back grace) while links that died meanwhile
still look open until their pings go unanswered, a minute later.

A watcher ticks every second and compares both clocks with what a second
should have moved them.  ``CLOCK_MONOTONIC`` (trio's clock) keeps running
while a process is stopped, and the wall clock jumps when a frozen VM
resyncs it, so a gap of more than ``pause_gap`` seconds on either means we
slept (a wall clock stepped back is a clock set, not a sleep, and is let
be).  A loop that was blocked that long looks the same and is treated the
same: the peers saw us silent too.

Then, in order: every live link is pinged and closed unless a line arrives
within ``PROBE_DEADLINE`` (a link that survived answers in a round trip);
every peer with business (see :mod:`awp.node.business`) that has no live
link gets a fresh backoff and fast-retry streak and is redialled now,
without the dial-back grace; one line is logged.

:class:`PauseDetector` is the pure part (times in, a pause length out), so a
test drives it with made-up clocks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.node")

TICK = 1.0  # how often the watcher looks at the clocks
PROBE_DEADLINE = 2.0  # a live link answers a ping within this after a pause, or is closed
PROBE_POLL = 0.05  # how often a probe looks whether a line arrived


@dataclass
class PauseDetector:
    """Says whether the time between two ticks holds a pause.

    ``tick`` is given the monotonic and the wall time of each tick, ``every``
    seconds after the previous one was asked for; it answers the length of
    the pause (how much longer than ``every`` the larger of the two clocks
    moved) when that exceeds ``gap``, else None.
    """

    gap: float = 5.0
    every: float = TICK
    _mono: float | None = None
    _wall: float | None = None

    def tick(self, mono: float, wall: float) -> float | None:
        last_mono, last_wall = self._mono, self._wall
        self._mono, self._wall = mono, wall
        if last_mono is None or last_wall is None:
            return None
        late = max(mono - last_mono, wall - last_wall) - self.every
        return late if late > self.gap else None


class PauseWatcher:
    """The engine's watcher task: detect a pause, then probe and redial."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.detector = PauseDetector(gap=engine.config.pause_gap)
        self.pauses = 0  # pauses noticed in this run (status and tests)
        self.last_pause = 0.0  # the length of the latest, in seconds

    async def run(self) -> None:
        """Tick until cancelled; each pause is handled before the next tick."""
        while True:
            self.detector.tick(trio.current_time(), time.time())
            await trio.sleep(self.detector.every)
            pause = self.detector.tick(trio.current_time(), time.time())
            if pause is not None:
                try:
                    await self.resumed(pause)
                except Exception:
                    log.exception("recovering from a pause failed")
                # The handling took time of its own: start the next gap afresh.
                self.detector = PauseDetector(gap=self.detector.gap, every=self.detector.every)

    async def resumed(self, pause: float) -> int:
        """We slept ``pause`` seconds: drop dead links, redial; returns how many peers."""
        eng = self.engine
        self.pauses += 1
        self.last_pause = pause
        # Links the probes close must not wait for the peer to dial back first.
        eng.peers.no_grace_until = trio.current_time() + PROBE_DEADLINE + 5.0
        live = [c for k in eng.peers.live_keys() if (c := eng.peers.active(k)) is not None]
        async with trio.open_nursery() as n:
            for conn in live:
                n.start_soon(self._probe, conn)
        kept = await eng.read(lambda c: eng.business.peers(c, now_ms()))
        redial = sorted(k for k in kept if eng.peers.active(k) is None)
        eng.peers.after_pause(redial, PROBE_DEADLINE + 5.0)
        log.info("resumed after a pause of %.0f s: redialing %d peers", pause, len(redial))
        return len(redial)

    async def _probe(self, conn: Connection) -> None:
        """Ping ``conn`` and close it unless a line arrives within the deadline."""
        sent_at = trio.current_time()
        try:
            with trio.move_on_after(PROBE_DEADLINE):
                await conn.out.send(conn.session.line({"t": "ping"}))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            conn.close("the link died while we were paused")
            return
        with trio.move_on_after(PROBE_DEADLINE):
            while conn.session.last_recv <= sent_at and not conn.closed.is_set():
                await trio.sleep(PROBE_POLL)
            return
        conn.close(f"no answer within {PROBE_DEADLINE:g}s after a pause")
        with trio.move_on_after(5):
            await conn.closed.wait()
