"""The peer manager: one connection per peer, and who redials whom.

Keys are identity, addresses are hints.  For every peer with business (see
:mod:`awp.node.business`: queued lines, open threads, topics and the links
that carry them, queue work, recent activity) a redial loop runs while no
connection is up: it tries the peer's addresses in rank order, backing off
from 1 s to 60 s with jitter, until the business ends; new business wakes it
at once with the backoff reset.  A streak of failures that looks like the
peer waking (a sandbox platform refusing while it resumes the peer) is first
retried on the short schedule of :mod:`awp.node.wake`.  After a pause of our
own (:mod:`awp.node.pausewatch`) every peer with business is redialled at
once, without the dial-back grace.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

import trio

from .connection import Connection, jittered, next_backoff
from .dialer import dial_key
from .wake import Streak

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("awp.node")


class PeerSlot:
    """What the manager tracks per peer key."""

    __slots__ = ("key", "conn", "loop_running", "kick", "backoff", "last_error",
                 "dialing", "grace_pending", "reason", "streak")

    def __init__(self, key: str) -> None:
        self.key = key
        self.conn: Connection | None = None
        self.loop_running = False
        self.kick = trio.Event()
        self.backoff = 1.0
        self.last_error = ""
        self.dialing = False
        self.grace_pending = False
        self.reason = ""  # the business the redial loop last kept the link for
        self.streak = Streak()  # failed rounds since the last connection (fast retry)


class PeerManager:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.slots: dict[str, PeerSlot] = {}
        self._nursery: trio.Nursery | None = None
        # Until then a drop skips the dial-back grace: we were the one asleep,
        # so waiting for the peer to dial back first would only add its backoff.
        self.no_grace_until = 0.0

    def bind(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def slot(self, key: str) -> PeerSlot:
        s = self.slots.get(key)
        if s is None:
            s = self.slots[key] = PeerSlot(key)
        return s

    def live_keys(self) -> list[str]:
        """Keys with an established connection now."""
        return [k for k, s in self.slots.items()
                if s.conn is not None and s.conn.established.is_set() and not s.conn.closed.is_set()]

    def active(self, key: str) -> Connection | None:
        s = self.slots.get(key)
        if s and s.conn and not s.conn.closed.is_set():
            return s.conn
        return None

    # -- attaching connections ----------------------------------------------------

    async def attach(self, conn: Connection) -> bool:
        """Make ``conn`` the peer's connection, or refuse it (tie-break).

        A newer connection replaces an older one, which is most likely half
        dead, and the old reader is drained first so everything it received is
        stored before the new resume is computed.  When both sides dialed at
        once (the other connection is younger than the window), both keep the
        one dialed by the smaller key, so they agree without talking.
        """
        s = self.slot(conn.peer_key)
        old = s.conn
        if old is not None and old is not conn and not old.closed.is_set():
            young = trio.current_time() - old.attached_at < self.engine.config.simultaneous_window
            if young and old.dialer_key != conn.dialer_key and old.dialer_key < conn.dialer_key:
                return False
            old.close("replaced by a newer connection")
            with trio.move_on_after(5):
                await old.closed.wait()
        s.conn = conn
        s.last_error = ""
        return True

    def detach(self, conn: Connection) -> None:
        s = self.slots.get(conn.peer_key)
        if s is not None and s.conn is conn:
            s.conn = None
            self.ensure_loop(conn.peer_key,
                             after_drop=trio.current_time() >= self.no_grace_until)

    # -- redialing ----------------------------------------------------------------

    def kick(self, key: str) -> None:
        """New outbound traffic: redial now, with the backoff reset."""
        s = self.slot(key)
        s.backoff = self.engine.config.backoff_start
        s.streak.reset()  # and a waking peer is retried from the short end again
        s.grace_pending = False
        s.kick.set()
        self.ensure_loop(key)

    def after_pause(self, keys: list[str], grace_off: float) -> None:
        """We slept: redial ``keys`` now, each with a fresh backoff and streak.

        Drops seen within ``grace_off`` seconds from now skip the dial-back
        grace too (the links the pause watcher is about to close).
        """
        self.no_grace_until = trio.current_time() + grace_off
        for key in keys:
            self.kick(key)

    def ensure_loop(self, key: str, *, after_drop: bool = False) -> None:
        s = self.slot(key)
        if after_drop:
            s.grace_pending = True
        if not s.loop_running and self._nursery is not None:
            s.loop_running = True
            self._nursery.start_soon(self._redial_loop, s)

    async def _redial_loop(self, s: PeerSlot) -> None:
        eng = self.engine
        cfg = eng.config
        try:
            while True:
                if self.active(s.key):
                    return
                why = await eng.business_with(s.key)
                if not why:
                    return
                if why != s.reason:
                    s.reason = why
                    log.info("keeping the link to %s (%s)", s.key[:18], why)
                addrs = await eng.dial_addresses(s.key)
                if not addrs:
                    return
                if s.grace_pending:
                    s.grace_pending = False
                    if all(src == "hello" for _, src in addrs):
                        # Let the original dialer come back first.
                        s.kick = trio.Event()
                        with trio.move_on_after(cfg.dialback_grace):
                            await s.kick.wait()
                        if self.active(s.key):
                            return
                        continue
                s.kick = trio.Event()
                conn = None
                waking = False
                if self.active(s.key):
                    return
                try:  # every known address at once, the best ranked first (dialer.py)
                    s.dialing = True
                    conn = (await dial_key(eng, s.key, [a for a, _src in addrs])).conn
                except Exception as e:  # a failed dial is routine
                    s.last_error = str(e)
                    waking = bool(getattr(e, "waking", False))
                    log.info("redial %s failed: %s", s.key[:18], e)
                finally:
                    s.dialing = False
                if conn is not None:
                    s.streak.reset()
                    waking = False  # what follows a drop is not a wake
                    # Stay with the connection; only one that lived a while
                    # (and was not dropped for not reading) earns a fresh
                    # backoff, so a peer that accepts and drops or stalls is
                    # not hammered.
                    up_since = trio.current_time()
                    await conn.closed.wait()
                    if trio.current_time() - up_since >= cfg.stable_after and not conn.stalled:
                        s.backoff = cfg.backoff_start
                        continue
                    if self.active(s.key):
                        return
                wait = s.streak.failed(trio.current_time(), waking, random.random())
                if wait is None:  # not waking, or waking for too long: the ordinary backoff
                    wait = jittered(s.backoff, random.random())
                    s.backoff = next_backoff(s.backoff, cfg.backoff_cap)
                with trio.move_on_after(wait):
                    await s.kick.wait()
        finally:
            s.loop_running = False
            s.dialing = False
            s.reason = ""
