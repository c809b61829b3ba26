"""When a queued line may go out before its transaction has committed.

Sending a line while the fsync of the transaction that queued it is still
running hides the sender's commit inside the network round trip, which is most
of the latency a small message sees.  It is only safe if a crash in that window
can cost nothing:

* **No id may ever be reused or undercut.**  The peer may hold a line we never
  committed.  Its resume then reports that id as seen, and the sender drops
  every queued line of the thread at or below it, so after a restart every new
  id must sort above anything that might have left.  Before lines go out early
  we durably *reserve* ids up to a time ahead of the clock (``id_floor``), only
  ids inside the reservation may leave early, and a restart seeds the
  generator with it.  The reservation is renewed inside the ordinary group
  commits while traffic flows, so it costs no extra fsync.
* **The commit must be all but certain to succeed.**  A commit that fails after
  its lines left would report "not queued" for a line the peer has.  Early
  sending is therefore off while the home's file system is read-only or has
  less than ``MIN_FREE`` bytes available (checked at most once a second), and
  after a failed commit until one succeeds.

After a clean shutdown nothing uncommitted can have left, so the reservation
is dropped and the next start continues from the last id actually used.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable

from ..wire.ids import IdGenerator, decode_ulid, encode_ulid
from ..wire.timefmt import now_ms
from . import ops

AHEAD_MS = 60_000  # how far ahead of the clock a reservation reaches
RENEW_MS = 30_000  # renew once less than this is left
MIN_FREE = 64 * 1024 * 1024
_DISK_CHECK_S = 1.0


class IdFloor:
    """Bookkeeping for early sending; every method runs on the writer thread."""

    def __init__(self, gen: IdGenerator, home: str, *, clock: Callable[[], int] = now_ms,
                 statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> None:
        self.gen = gen
        self.home = home
        self._clock = clock
        self._statvfs = statvfs
        self.committed_ms = 0  # ids up to this time are durably reserved
        self._pending_ms = 0
        self._failing = False
        self.ever_failed = False
        self._disk_ok = False
        self._disk_checked = -1e9

    def load(self, conn: sqlite3.Connection) -> None:
        """Seed the generator above every id a crashed run may have sent, then reserve afresh.

        Seeded from a reservation, the generator counts up from it by one, so
        two runs seeded from the same reservation would draw the same ids (a
        crash before the first renewal would make the next run repeat them,
        and a peer that logged one, say in an ``err``, would take a later msg
        with that id for a duplicate).  So before any id is drawn, a new
        reservation beyond the old one is committed.
        """
        self.gen.seed(ops.last_issued_id(conn))
        floor = ops.get_meta(conn, "id_floor")
        old_ms = 0
        if floor:
            self.gen.seed(floor)
            old_ms = decode_ulid(floor) >> 80
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._pending_ms = max(self._clock() + AHEAD_MS, old_ms + 1)
            ops.set_meta(conn, "id_floor", encode_ulid((self._pending_ms << 80) | ((1 << 80) - 1)))
            conn.execute("COMMIT")
        except sqlite3.Error:
            # A read-only or full store: nothing will be sent early (or stored) anyway.
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._pending_ms = 0
            return
        self.committed_ms = self._pending_ms

    def before_commit(self, conn: sqlite3.Connection) -> None:
        """Inside every group commit: renew the reservation when it runs short.

        The reservation is counted from the clock, not from the last id, so a
        run of crashes cannot push ids further and further ahead: it stays
        within ``AHEAD_MS`` of the clock.  While ids are near or past it (just
        after a crash restart seeded them from it, or after the clock stepped
        back) the last id is written too; otherwise the reservation stands in
        for it (ids of acked lines that are not logged leave no other trace),
        which keeps a page out of every ordinary commit's fsync.
        """
        now = self._clock()
        if self._pending_ms - now < RENEW_MS:
            self._pending_ms = now + AHEAD_MS
            ops.set_meta(conn, "id_floor", encode_ulid((self._pending_ms << 80) | ((1 << 80) - 1)))
        last = self.gen.last
        if last and decode_ulid(last) >> 80 >= self._pending_ms - RENEW_MS:
            ops.set_meta(conn, "last_id", last)

    def committed(self) -> None:
        self.committed_ms = self._pending_ms
        self._failing = False

    def failed(self) -> None:
        self._failing = True
        self.ever_failed = True
        self._pending_ms = self.committed_ms

    def early_ok(self) -> bool:
        """May the lines of the batch just run leave before its commit?"""
        last = self.gen.last_value
        if not last or last >> 80 > self.committed_ms:
            return False
        return self.store_ok()

    def store_ok(self) -> bool:
        """No commit is failing, and the disk is writable with room to spare."""
        return not self._failing and self._disk_healthy()

    def release(self, conn: sqlite3.Connection) -> None:
        """On a clean stop: keep the last id, drop the reservation.

        Every line that left was committed, so the next start may continue
        from the last id actually drawn rather than from the reservation.
        """
        if self.ever_failed:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self.gen.last:
                ops.set_meta(conn, "last_id", self.gen.last)
            ops.del_meta(conn, "id_floor")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _disk_healthy(self) -> bool:
        now = time.monotonic()
        if now - self._disk_checked >= _DISK_CHECK_S:
            self._disk_checked = now
            try:
                st = self._statvfs(self.home)
                self._disk_ok = (not st.f_flag & os.ST_RDONLY
                                 and st.f_bavail * st.f_frsize >= MIN_FREE)
            except OSError:
                self._disk_ok = False
        return self._disk_ok
