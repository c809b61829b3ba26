"""What one peer, and all peers together, may make the daemon hold or do.

A peer that sends too fast is not cut off: its connection stops reading, and
TCP pushes back on the sender until we catch up.  These budgets do that:

* **in flight**: bytes read from a connection and not yet stored, per
  connection and over all of them (memory);
* **rate**: lines and bytes per second, a token bucket per peer key, so a
  reconnect does not start a fresh allowance (CPU and disk bandwidth);
* **large lines**: lines of ``large_line_bytes`` or more take turns,
  daemon-wide, from being parsed to being committed (``large_lines`` at
  once), so a small line waits behind one megabyte line, not one per
  flooding peer (event-loop time and the writer's commits).

Two more refuse instead, because waiting would never end:

* **stored**: a key's inbound log and blobs on disk, and everyone's together.
  Over it, content lines get ``err quota`` and no ack, so they stay in the
  sender's outbox and come again on its next connection;
* **connections**: open inbound connections, per key and in all, and those
  still in their handshake (the oldest handshake gives way to a new one, so a
  crowd of silent strangers cannot keep an honest peer out).

Pure bookkeeping on the trio thread (plus counters the writer thread adds to);
the connection and the engine decide when to ask.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..base.limits import Limits

if TYPE_CHECKING:
    from .connection import Connection

# How long the large lines' turns may stand still (no turn given to anyone)
# before a waiting line goes on without one (see Budgets.large_turn): far
# above a turn's usual length (parsing and committing 1 MB: tens of
# milliseconds, a few hundred on a loaded machine), far below a stalled
# peer's write_timeout.
LARGE_TURN_WAIT = 2.0


class TokenBucket:
    """A refilling allowance; spending past zero is allowed and waited off."""

    __slots__ = ("rate", "burst", "level", "at")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = float(rate), float(burst)
        self.level, self.at = float(burst), now

    def refill(self, now: float) -> float:
        if now > self.at:
            self.level = min(self.burst, self.level + (now - self.at) * self.rate)
            self.at = now
        return self.level

    def spend(self, n: float, now: float) -> float:
        """Take ``n``; returns how long to wait (seconds) until the debt is paid."""
        self.refill(now)
        self.level -= n
        if self.level >= 0 or self.rate <= 0:
            return 0.0
        return -self.level / self.rate


class Budgets:
    """Counters and waits for every budget of :class:`~awp.base.limits.Limits`."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._lines: dict[str, TokenBucket] = {}
        self._bytes: dict[str, TokenBucket] = {}
        self.inflight = 0  # bytes read on any connection and not yet stored
        self._released = trio.Event()
        # Stored bytes per key (log, blobs), loaded from the store at start and
        # added to by the writer thread as jobs store a peer's bytes.
        self.stored: dict[str, list[int]] = {}
        self.stored_total = 0
        # Connections.
        self.handshaking: OrderedDict[Connection, None] = OrderedDict()
        self.inbound: set[Connection] = set()
        self.per_key: dict[str, int] = {}
        self.refused = {"quota": 0, "connections": 0, "handshakes_dropped": 0,
                        "peer_connections": 0, "unclaimed": 0}
        self.throttled = 0  # times a reader waited on a budget
        # Large lines take turns: at most ``large_lines`` of them between
        # their read and their commit, in the order they arrived.
        self._large = trio.Semaphore(limits.large_lines) if limits.large_lines else None
        self.large_waits = 0  # times a large line waited for its turn
        self.large_overruns = 0  # times one went on after LARGE_TURN_WAIT without it
        self._large_at = 0.0  # when the last one was given (trio clock)
        self._large_waiting: set[trio.CancelScope] = set()  # scopes of lines waiting a turn

    # -- rate -------------------------------------------------------------------------

    def spend(self, key: str, lines: int, nbytes: int) -> float:
        """Charge ``key`` for what it just sent; seconds to wait before reading on."""
        lim, now = self.limits, self._clock()
        lb = self._lines.get(key)
        if lb is None:
            self._trim(self._lines, now)
            lb = self._lines[key] = TokenBucket(lim.peer_lines_per_second,
                                                lim.peer_burst_lines, now)
        bb = self._bytes.get(key)
        if bb is None:
            self._trim(self._bytes, now)
            bb = self._bytes[key] = TokenBucket(lim.peer_bytes_per_second,
                                                lim.peer_burst_bytes, now)
        return max(lb.spend(lines, now), bb.spend(nbytes, now))

    @staticmethod
    def _trim(buckets: dict[str, TokenBucket], now: float) -> None:
        """Forget full buckets once there are many (a full one is a new one)."""
        if len(buckets) >= 4096:
            for k in [k for k, b in buckets.items() if b.refill(now) >= b.burst]:
                del buckets[k]

    # -- in flight --------------------------------------------------------------------

    def take(self, n: int) -> None:
        self.inflight += n

    def give(self, n: int) -> None:
        self.inflight -= n
        self._released.set()
        self._released = trio.Event()

    def may_read(self, own: int) -> bool:
        """Whether a connection holding ``own`` bytes in flight may read more.

        One with nothing in flight always may: a quiet peer is never held up
        by the ones filling the global budget.
        """
        lim = self.limits
        return own == 0 or (own < lim.peer_inflight_bytes and self.inflight < lim.inflight_bytes)

    async def released(self) -> None:
        """Wait until some connection's bytes in flight were stored."""
        await self._released.wait()

    # -- large lines ------------------------------------------------------------------

    def large(self, lines: list[bytes]) -> bool:
        """Whether a read's lines hold one that must wait its turn."""
        if self._large is None:
            return False
        at = self.limits.large_line_bytes
        return any(len(x) >= at for x in lines)

    async def large_turn(self) -> bool:
        """Wait until fewer than ``large_lines`` large lines are being parsed
        and stored (first come, first served); True once this one may go,
        to be followed by :meth:`large_done`.

        False when no turn was given to anyone for :data:`LARGE_TURN_WAIT`
        seconds: the line goes on without one.  A turn ends when its line is
        committed, and a peer that stops reading can keep that from happening
        until its ``write_timeout``; that costs everyone else's large lines
        this wait, never the whole timeout.  A long queue that moves is
        waited out, however long.
        """
        sem = self._large
        assert sem is not None
        if sem.value:
            sem.acquire_nowait()
        else:
            # One place in the semaphore's queue for the whole wait: a turn
            # given to anyone moves every waiter's deadline on (just below),
            # so waiters never leave and re-join the queue, which would let
            # two that time out at the same instant swap places.
            self.large_waits += 1
            scope = trio.CancelScope(deadline=self._large_at + LARGE_TURN_WAIT)
            self._large_waiting.add(scope)
            try:
                with scope:
                    await sem.acquire()
            finally:
                self._large_waiting.discard(scope)
            if scope.cancelled_caught:  # the turns stood still all along
                self.large_overruns += 1
                return False
        self._large_at = trio.current_time()
        deadline = self._large_at + LARGE_TURN_WAIT
        for waiting in self._large_waiting:
            waiting.deadline = deadline
        return True

    def large_done(self) -> None:
        assert self._large is not None
        self._large.release()

    # -- stored -----------------------------------------------------------------------

    def load_stored(self, rows: dict[str, tuple[int, int]]) -> None:
        self.stored = {k: [a, b] for k, (a, b) in rows.items()}
        self.stored_total = sum(a + b for a, b in rows.values())

    def add_stored(self, key: str, log: int = 0, blob: int = 0) -> None:
        """The writer stored (or freed, negative) bytes of ``key``'s."""
        cur = self.stored.get(key)
        if cur is None:
            cur = self.stored[key] = [0, 0]
        cur[0] += log
        cur[1] += blob
        self.stored_total += log + blob

    def stored_of(self, key: str) -> int:
        cur = self.stored.get(key)
        return cur[0] + cur[1] if cur else 0

    def over_stored(self, key: str, more: int = 0) -> str:
        """Empty when ``key`` may store ``more`` bytes; else which budget is full."""
        lim = self.limits
        if self.stored_of(key) + more > lim.peer_stored_bytes:
            return f"peer_stored_bytes ({lim.peer_stored_bytes} bytes for your key)"
        if self.stored_total + more > lim.stored_bytes:
            return f"stored_bytes ({lim.stored_bytes} bytes for all peers)"
        return ""

    # -- connections ------------------------------------------------------------------

    def open_inbound(self, conn: Connection) -> bool:
        """Count a new inbound connection; False if it must be turned away.

        At the handshake cap, or the connection cap with a handshake still
        running, the oldest handshake is dropped to make room: an honest
        handshake takes milliseconds, a stalling one is the likelier waste.
        """
        lim = self.limits
        while self.handshaking and (len(self.handshaking) >= lim.handshakes
                                    or len(self.inbound) >= lim.connections):
            old, _ = self.handshaking.popitem(last=False)
            self.refused["handshakes_dropped"] += 1
            old.close("too many connections in their handshake: dropped the oldest")
        if len(self.inbound) >= lim.connections or lim.handshakes == 0:
            self.refused["connections"] += 1
            return False
        self.inbound.add(conn)
        self.handshaking[conn] = None
        return True

    def handshake_done(self, conn: Connection) -> None:
        self.handshaking.pop(conn, None)

    def admit_key(self, conn: Connection) -> str:
        """After a verified auth: empty to go on, else why this key has too many."""
        n = self.per_key.get(conn.peer_key, 0)
        if n >= self.limits.peer_connections:
            self.refused["peer_connections"] += 1
            return (f"too many connections from this key ({n} open;"
                    f" peer_connections is {self.limits.peer_connections})")
        self.per_key[conn.peer_key] = n + 1
        conn.counted_key = True
        return ""

    def closed(self, conn: Connection) -> None:
        self.handshaking.pop(conn, None)
        self.inbound.discard(conn)
        if conn.counted_key:
            conn.counted_key = False
            n = self.per_key.get(conn.peer_key, 0) - 1
            if n > 0:
                self.per_key[conn.peer_key] = n
            else:
                self.per_key.pop(conn.peer_key, None)

    # -- reporting --------------------------------------------------------------------

    def status(self) -> dict:
        """Use against the budgets, for ``awp status``."""
        lim = self.limits
        return {
            "inflight_bytes": self.inflight, "stored_bytes": self.stored_total,
            "connections": len(self.inbound), "handshakes": len(self.handshaking),
            "limits": {k: getattr(lim, k) for k in (
                "peer_inflight_bytes", "peer_inflight_lines", "inflight_bytes",
                "large_line_bytes", "large_lines",
                "peer_lines_per_second",
                "peer_burst_lines", "peer_bytes_per_second", "peer_burst_bytes",
                "peer_stored_bytes", "stored_bytes", "peer_connections", "connections",
                "handshakes", "peer_unclaimed_blob_bytes", "unclaimed_blob_ttl")},
            "refused": dict(self.refused), "throttled": self.throttled,
            "large_waits": self.large_waits, "large_overruns": self.large_overruns,
        }

    def peer(self, key: str, conn: Connection | None) -> dict:
        """One key's use, for ``awp peers``."""
        log, blob = self.stored.get(key, (0, 0))
        return {"stored_bytes": log + blob, "log_bytes": log, "blob_bytes": blob,
                "inflight_bytes": conn.inflight_bytes if conn is not None else 0,
                "connections": self.per_key.get(key, 0),
                "throttled": conn.throttled if conn is not None else 0,
                "refused": conn.quota_refused if conn is not None else 0}
