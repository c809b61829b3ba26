"""Carrying out a session's store actions and reporting each job back in order.

The session (:mod:`awp.node.session`) hands out store jobs with tokens and
releases acks only when told a job is durable; this is the trio side of that
promise for one connection.  Content runs go to the group-commit writer (or,
for a lone line on a quiet daemon, to the intake journal first, see
:meth:`Jobs._take_in_journaled`), acks, resumes, chunks, grants and
introductions go as small jobs, and every job is reported to the session in
arrival order (:meth:`Jobs._post`), whose answer (acks, replies, what the
engine is told) is carried out here.  The acks of a burst are held and
written in one write once no more finished work is waiting.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from ..store import ops, usage
from ..store.writer import lines_weight
from ..wire.timefmt import now_ms
from .lineout import give_way
from .session import actions as A

if TYPE_CHECKING:
    from ..store.writer import Pending
    from .connection import Connection

log = logging.getLogger("awp.node")

#: The session's actions this module carries out.
STORE_OPS = frozenset({A.STORE_RUN, A.APPLY_ACKS, A.STORE_CHUNK, A.STORE_GRANT,
                       A.STORE_INTRODUCE, A.APPLY_RESUME})


class Jobs:
    """One connection's store jobs, from the session's action to its follow-ups."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.engine = conn.engine
        # Bounded: a fast sender waits for our store instead of filling memory.
        self._post_send, self._post_recv = trio.open_memory_channel(256)
        self._post_lock = trio.Lock()  # one follow-up at a time, in order
        self._post_inflight = 0  # follow-ups queued or running
        self.committed_ns = 0  # when the job being followed up committed
        self.drained = trio.Event()
        self._chunk_slots = trio.Semaphore(8)
        self._held: list[bytes] = []  # acks waiting for the end of a burst
        self._store_caught_up = trio.Event()
        self.inflight_bytes = 0  # bytes of lines handed to the store, not yet done
        self._last: Pending | None = None  # the job handed to the store last

    async def store_caught_up(self) -> None:
        """Wait until a job finishes (the session said pause: too many lines in flight)."""
        self._store_caught_up = trio.Event()
        await self._store_caught_up.wait()

    async def stored(self) -> None:
        """Wait until every job handed to the store so far has been committed
        (the writer commits a connection's jobs in the order they came)."""
        if self._last is not None:
            await self._last.event.wait()

    async def finish(self) -> None:
        """The reader is done: let queued follow-ups run, then :meth:`loop` ends."""
        await self._post_send.send(None)

    async def start(self, act: tuple) -> None:
        """Hand one store action to the writer (see :data:`STORE_OPS`)."""
        op = act[0]
        eng = self.engine
        conn = self.conn
        if op is A.STORE_RUN:
            _op, token, run = act
            now = now_ms()
            if (len(run) > 1 or self.conn.quota_refused
                    or eng.budgets.over_stored(  # the most it can cost
                        self.conn.peer_key, usage.line_cost(len(run[0][1]), new_thread=True))
                    or not await self._take_in_journaled(token, *run[0], now)):
                await self._store_run(token, run, now)
        elif op is A.APPLY_ACKS:
            _op, token, acks = act
            key = self.conn.peer_key
            for _th, re in acks:
                # The peer has it committed: wake `send --wait-ack` now, and
                # drop the line from our outbox in the background.
                eng.ack_received(key, re)
            await self._post(eng.writer.submit_nowait(lambda c: ops.apply_acks(c, key, acks)),
                             token)
        elif op is A.STORE_CHUNK:
            # At most a few chunks (256 KiB each) wait for the store at once,
            # so a fast sender cannot make us hold a whole file in memory.
            _op, token, line, nbytes = act
            await self._chunk_slots.acquire()
            now = now_ms()
            await self._post(eng.writer.submit_nowait(
                lambda c: eng.store_chunk(c, conn, line, now), weight=nbytes), token, nbytes)
        elif op is A.STORE_GRANT:
            _op, token, line, nbytes = act
            now = now_ms()
            await self._post(eng.writer.submit_nowait(
                lambda c: eng.store_grants(c, conn, [line.get("grant")], now)), token, nbytes)
        elif op is A.STORE_INTRODUCE:
            _op, token, line, raw = act
            now, text = now_ms(), raw.decode("utf-8")
            await self._post(eng.writer.submit_nowait(
                lambda c: eng.store_introduce(c, conn, line, text, now)), token, len(raw))
        elif op is A.APPLY_RESUME:
            _op, token, seen = act
            key = self.conn.peer_key
            await self._post(eng.writer.submit_nowait(
                lambda c: ops.apply_resume(c, key, seen)), token)

    async def _store_run(self, token: int, run: list, now: int) -> None:
        """Store a run of content lines in one job; they are acked after its commit."""
        texts = [(line, raw.decode("utf-8")) for line, raw in run]
        nbytes = sum(len(raw) for _line, raw in run)
        eng = self.engine
        # Copies for dashboard hosts are handed over in commit order, like
        # our own sends, so a host's lines leave in outbox order.  With
        # nothing of ours waiting for the store, the job may go ahead of
        # other connections' (see awp.store.writer, "Urgent jobs go first"),
        # unless it holds a large line: those take turns (Budgets.large_turn)
        # and so never have anything else waiting, and would take every
        # small line's place.
        pending = eng.writer.submit(
            lambda c: eng.store_inbound_run(c, self.conn, texts, now),
            self._hand_over_copies if eng.shares else None,
            weight=lines_weight(nbytes, len(run)),
            urgent=not self._post_inflight and nbytes < eng.config.limits.large_line_bytes)
        await self._post(pending, token, nbytes)

    async def _take_in_journaled(self, token: int, line: dict, raw: bytes, now: int) -> bool:
        """A lone line on a quiet daemon: journal it, ack it, then store it.

        The ack leaves once the line is synced to the intake journal (see
        :mod:`awp.store.intake`), ahead of the SQLite transaction: the
        session is told the line is durable (:meth:`Session.durable`) and
        answers with its ack.  The store is held from before the journal
        write until that transaction has committed, with no yield to the
        event loop in between: nothing else is stored meanwhile, and nothing
        reads the store before the line is in it.  The commit is relaxed:
        its fsync is paid by a worker thread right after, and until then
        the journal keeps the line's record (no new round at offset 0).
        False, with nothing done, when the line must take the ordinary way.
        """
        eng, intake = self.engine, self.engine.intake
        if intake is None:
            return False
        # Lines in SQLite by a commit whose fsync is owed keep the journal's round.
        rewind = not eng.writer.sync_owed()
        if (self._post_inflight or self._held or self.conn.out.busy()
                or not intake.eligible(line, len(raw), mirrored=bool(eng.shares), rewind=rewind)
                or not eng.writer.healthy() or not eng.writer.hold()):
            return False
        text = raw.decode("utf-8")
        if not intake.append(self.conn.peer_key, now, text, rewind):
            eng.writer.release()
            return False
        journaled_ns = time.perf_counter_ns()
        self.conn.out.lock.acquire_nowait()
        try:
            acts = self.conn.session.durable(token)
            unsent = self.conn.out.write_now(b"".join(a[1] for a in acts))
            give_way()
            # The journal holds the line: the commit owes its fsync, paid
            # off the event loop right after (see awp.store.writer).
            pending = eng.writer.run_now(
                lambda c: [eng.store_inbound(c, self.conn, line, text, now)], relaxed=True)
            if pending.error is None:
                intake.stored()
            else:
                intake.store_failed(self.conn.peer_key, now, text, pending.error)
            if unsent:
                await self.conn.out.write_all(unsent)
        finally:
            self.conn.out.lock.release()
        if pending.error is not None:
            self.conn.close("store failure")
            return True
        pending.committed_ns = journaled_ns  # durable from the journal's sync on
        await self._post(pending, token)
        return True

    def _hand_over_copies(self, results: list) -> None:
        """Writer hook, in commit order: pass mirror copies to their hosts."""
        for _seq, replies in results:
            for i, reply in enumerate(replies):
                if isinstance(reply, tuple) and reply[0] == "queued":
                    self.engine.hand_over(*reply[1])
                    replies[i] = ("handed", reply[1])

    # -- ordered post-commit work -------------------------------------------------

    async def _post(self, pending: Pending, token: int, nbytes: int = 0) -> None:
        """Report job ``token`` to the session when ``pending`` commits, in arrival order.

        A job that already committed inline, with nothing ahead of it, is
        finished right here: that saves a task switch before the ack.
        ``nbytes`` of the peer's lines count as in flight until then.
        """
        self._last = pending
        self._post_inflight += 1
        self.inflight_bytes += nbytes
        self.engine.budgets.take(nbytes)
        if self._post_inflight == 1 and pending.event.is_set() and not self._post_lock.locked():
            self._post_lock.acquire_nowait()  # no scheduler trip on the way to the ack
            try:
                await self._post_one((pending, token, nbytes))
                await self._flush_held()
            finally:
                self._post_lock.release()
            return
        await self._post_send.send((pending, token, nbytes))

    async def loop(self) -> None:
        """Report committed jobs strictly in arrival order (acks keep line order)."""
        async for item in self._post_recv:
            if item is None:
                break
            async with self._post_lock:
                if not await self._post_one(item):
                    break
                if self._held and self._post_recv.statistics().current_buffer_used == 0:
                    await self._flush_held()
        await self._flush_held()
        self.drained.set()

    async def _post_one(self, item: tuple) -> bool:
        """Run one job's follow-ups; False (and the connection closing) if it failed."""
        pending, token, nbytes = item
        ok = True
        try:
            result = pending.result() if pending.event.is_set() else await pending.wait()
            self.committed_ns = pending.committed_ns
        except Exception as e:
            log.error("storing a line from %s failed: %s", self.conn.peer_key[:18], e)
            ok = False
        finally:
            self._post_inflight -= 1
            if nbytes:
                self.inflight_bytes -= nbytes
                self.engine.budgets.give(nbytes)
        acts = self.conn.session.done(token, result) if ok else self.conn.session.failed(token)
        self._store_caught_up.set()
        await self._follow(acts)
        return ok

    async def _follow(self, acts: list[tuple]) -> None:
        """Carry out the follow-ups of finished jobs (their lines are held for one write)."""
        eng = self.engine
        for act in acts:
            op = act[0]
            if op is A.SEND:
                self._held.append(act[1])
            elif op is A.COMMITTED:
                eng.on_inbound_committed(self.conn, act[1], act[2], self.committed_ns)
            elif op is A.FLUSH:
                if self._post_recv.statistics().current_buffer_used == 0:
                    await self._flush_held()
            elif op is A.EFFECT:
                reply = act[1]
                if callable(reply):  # work to start now that the line is stored
                    eng.spawn(reply)
                elif reply[0] != "handed":  # sharing began while the line was stored
                    eng.queued_elsewhere(reply[1][0])
            elif op is A.ACKED:
                eng.on_acked(self.conn.peer_key, act[1])
            elif op is A.CHUNK_DONE:
                self._chunk_slots.release()
            elif op is A.GRANTS:
                eng.on_grants_stored(self.conn)
            elif op is A.INTRODUCED:
                eng.changes.publish({"kind": "introduce", "peer": self.conn.peer_key})
            elif op is A.RESUMED:
                self.conn.resumed()
                eng.on_peer_resumed(self.conn)
            elif op is A.CLOSE:
                await self._flush_held()
                self.conn.close(act[1])

    async def _flush_held(self) -> None:
        """Write the acks (and their follow-ups) gathered from one burst at once."""
        if self._held:
            data, self._held = b"".join(self._held), []
            await self.conn.out.send(data)
