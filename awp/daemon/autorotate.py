"""Rotating the key: now (``awp key rotate``) or on a schedule (``--every 30d``).

Both end the same way: ``identity.json`` moves to the committed next key
(awp/daemon/keyfile.py), then the daemon restarts in its own process under
it.  The schedule is kept in the store (``rotate.every``, seconds; 0 is off,
``rotate.since`` when it was set), so it survives restarts, and a running
daemon rotates on time without anyone at the keyboard: a headless agent
whose key has a lifetime keeps working across it.
"""

from __future__ import annotations

import logging

import trio

from ..node.engine import Engine
from ..store import ops
from ..wire.timefmt import now_ms, parse_ts
from .app import DaemonState
from .keyfile import rotate_identity

log = logging.getLogger("awp.daemon")

CHECK_S = 60.0  # a schedule is looked at at least this often
MIN_EVERY_S = 1.0  # shorter is refused (a loop of restarts)


class Rotator:
    def __init__(self, engine: Engine, state: DaemonState) -> None:
        self.engine = engine
        self.state = state
        self.lock = trio.Lock()
        self.changed = trio.Event()

    async def rotate(self) -> dict:
        """Move to the next key and restart; the caller's answer goes out first."""
        eng, state = self.engine, self.state
        old = eng.identity.key
        rec, _ = await trio.to_thread.run_sync(rotate_identity, state.home, now_ms())
        peers = await eng.read(lambda c: c.execute(
            "SELECT count(*) FROM peers WHERE key != ?", (old,)).fetchone()[0])
        state.restart = True
        state.stop.set()
        log.warning("rotated %s -> %s (record %d); restarting under the new key",
                    old, rec["new"], rec["seq"])
        return {"old": old, "new": rec["new"], "seq": rec["seq"], "record": rec,
                "peers": peers, "restarting": True}

    async def schedule(self, every_s: float) -> dict:
        now = now_ms()
        await self.engine.writer.run(lambda c: (
            ops.set_meta(c, "rotate.every", str(every_s)),
            ops.set_meta(c, "rotate.since", str(now))))
        self.changed.set()
        return await self.plan()

    async def plan(self) -> dict:
        """``{"every": seconds, "due": Unix ms or 0}``."""
        every, since = await self.engine.read(lambda c: (
            float(ops.get_meta(c, "rotate.every") or 0), int(ops.get_meta(c, "rotate.since") or 0)))
        if every <= 0:
            return {"every": 0, "due": 0}
        chain = self.engine.rotation.chain if self.engine.rotation else []
        last = since
        if chain:
            try:
                last = max(last, parse_ts(chain[-1].get("ts")))
            except (TypeError, ValueError):
                pass
        return {"every": every, "due": last + int(every * 1000)}

    async def configure(self) -> None:
        """Apply config.json's ``rotate_every`` (before the local API answers), so a
        service unit's config decides the schedule; ``awp key rotate --every``
        changes it until the next start."""
        wanted = self.state.settings.rotate_every
        if wanted is not None and (await self.plan())["every"] != wanted:
            await self.schedule(wanted)

    async def run(self) -> None:
        """Rotate when the schedule says so; look again when it changes."""
        while True:
            self.changed = trio.Event()
            plan = await self.plan()
            wait = CHECK_S
            if plan["every"]:
                left = (plan["due"] - now_ms()) / 1000
                if left <= 0:
                    async with self.lock:
                        if not self.state.restart:
                            await self.rotate()
                    return
                wait = min(wait, left)
            with trio.move_on_after(wait):
                await self.changed.wait()
