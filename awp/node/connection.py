"""One live connection to a peer: the trio driver around the protocol rules.

The handshake itself is decided by :mod:`awp.node.handshake`; this module moves
bytes, keeps time (handshake deadline, pings, bye linger) and talks to the
store through the group-commit writer.  Three things matter most here:

* an inbound ``msg``/``state`` is acked only after the transaction storing it
  has committed, and acks go out in the order the lines arrived;
* what we send comes from the outbox in ``seq`` order, whether it was queued
  while the peer was away (replay) or a moment ago (live), so nothing is
  skipped or reordered when the two overlap;
* a misbehaving peer costs us this connection at most, never the daemon.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..store import ops, usage
from ..store.writer import lines_weight
from ..wire import errors
from ..wire.errors import ProtocolError
from ..wire.framing import LineReader, LineTooLarge
from ..wire.messages import ACKED_TYPES, ack_line, dump, parse_line, storable
from ..wire.names import clean_name
from ..wire.timefmt import format_ts, now_ms
from .gaps import AckGaps, line_id
from .handshake import Handshake

if TYPE_CHECKING:
    from ..store.writer import Pending
    from .engine import Engine

log = logging.getLogger("awp.node")
trace_log = logging.getLogger("awp.trace")

_SEND_BATCH = 256
_SEND_BATCH_BYTES = 1 << 20  # and at most this much per write, so others get the lock
_WRITE_SLICE = 256 * 1024  # the write deadline applies to each slice this big
# A run of content lines stored as one job holds at most this many (with the
# writer's weight per line, see awp.store.writer.lines_weight): a read of
# tiny lines was one job of hundreds of rows (docs/threat-model.md, "Budgets").
# 64: a 64 KiB read of 1 KiB lines is one job, not two.
_RUN_LINES = 64


class ConnectionClosed(Exception):
    pass


class Connection:
    """Drives one stream from hello to close."""

    def __init__(
        self, engine: Engine, stream: trio.abc.HalfCloseableStream, *, outbound: bool,
        dialed: str = "", desc: str = "",
    ) -> None:
        self.engine = engine
        self.stream = stream
        self.outbound = outbound
        self.dialed = dialed
        self.desc = desc or ("out " + dialed if outbound else "in")
        self.hs = Handshake(engine.identity, engine.local_hello(outbound), engine.ids,
                            present=engine.grants_to_present,
                            max_depth=engine.config.limits.json_depth)
        self.peer_key = ""
        self.peer_name = ""
        self.peer_caps: list[str] = []
        self.dialer_key = ""
        self.attached_at = 0.0
        self.established = trio.Event()  # handshake done, admitted, attached
        self.peer_resumed = trio.Event()  # the peer's resume (or any non-err line) arrived
        self.closed = trio.Event()
        self.reader_done = trio.Event()
        self.close_reason = ""
        self.failure = ""  # why the handshake failed, for `connect` to report
        self.rtt_ms: float | None = None
        self._cancel = trio.CancelScope()
        # A semaphore, not a Lock: the rest of a line written before its commit
        # is finished by another task, which then releases it (send_first).
        self._send_lock = trio.Semaphore(1, max_value=1)
        self._wake_sender = trio.Event()
        self._last_sent_seq = 0
        self._rescan = True
        self._ping_sent: dict[str, float] = {}
        self._unanswered = 0
        self._last_recv = trio.current_time()
        self._last_ping = 0.0
        self._bye_sent = False
        self._bye_received = trio.Event()
        # Bounded: a fast sender waits for our store instead of filling memory.
        self._post_send, self._post_recv = trio.open_memory_channel(256)
        self._post_lock = trio.Lock()  # one follow-up at a time, in order
        self._post_inflight = 0  # follow-ups queued or running
        self.committed_ns = 0  # when the job being followed up committed
        self._drained = trio.Event()
        self._chunk_slots = trio.Semaphore(8)
        self._held: list[bytes] = []  # acks waiting for the end of a burst
        self._inflight = 0  # received content lines not yet stored
        self._inflight_drop = trio.Event()
        self._rate_wait = 0.0  # seconds this key's rate wants us to wait before reading
        self._resumed_by_peer = trio.Event()
        self._pushed: list[tuple[int, str, str]] = []
        self._sending = False  # the sender loop is writing pushed lines
        self.stalled = False  # closed because a write made no progress in time
        self._gaps = AckGaps(engine.config.limits.gap_timeout)  # lines awaiting their ack
        self._gap_wake = trio.Event()
        self.inflight_bytes = 0  # bytes of lines handed to the store, not yet done
        self.throttled = 0  # times reading waited for the rate or the store
        self.quota_refused = 0  # content lines refused with err quota (then all are)
        self.counted_key = False  # counted in the budgets' per-key connections

    # -- public -------------------------------------------------------------------

    def wake(self) -> None:
        """New lines were queued for this peer."""
        self._wake_sender.set()

    def close(self, reason: str = "") -> None:
        if not self.close_reason:
            self.close_reason = reason
        self._cancel.cancel()

    async def run(self) -> None:
        """Run until the connection ends; never raises for peer behaviour."""
        try:
            with self._cancel:
                await self._run()
        except Exception as e:  # never let one connection take the daemon down
            self._ended_by(_leaf(e))
        finally:
            self.reader_done.set()
            self.closed.set()
            if self.inflight_bytes:  # follow-ups that will never run now
                self.engine.budgets.give(self.inflight_bytes)
                self.inflight_bytes = 0
            self.engine.budgets.closed(self)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    try:
                        await self.stream.aclose()
                    except Exception:
                        pass
                await self.engine.on_connection_closed(self)

    def _ended_by(self, e: BaseException) -> None:
        """Record why the connection ended; only our own bugs are errors."""
        if isinstance(e, trio.BrokenResourceError | trio.ClosedResourceError | OSError):
            self.close_reason = self.close_reason or f"connection lost: {e}"
        elif isinstance(e, ConnectionClosed):
            self.close_reason = self.close_reason or str(e)
        else:
            log.error("connection %s failed", self.desc, exc_info=e)
            self.close_reason = self.close_reason or f"internal error: {e}"

    # -- lifecycle ----------------------------------------------------------------

    async def _run(self) -> None:
        reader = LineReader()
        pending: list[bytes] = []
        await self._send_raw(self.hs.start())
        with trio.move_on_after(self.engine.config.handshake_timeout) as deadline:
            while not self.hs.done:
                if not pending:
                    data = await self.stream.receive_some(65536)
                    if not data:
                        raise ConnectionClosed("peer closed during handshake")
                    try:
                        pending = reader.feed(data)
                    except LineTooLarge:
                        await self._refuse(errors.TOO_LARGE, "line over 1 MiB")
                        return
                    continue
                raw = pending.pop(0)
                self._trace("<", raw)
                try:
                    reply = self.hs.receive(raw)
                except ProtocolError as e:
                    self.failure = e.detail or e.code
                    if e.code:
                        await self._refuse(e.code, e.detail, re=e.re)
                    else:
                        raise ConnectionClosed(e.detail) from None
                    return
                if reply:
                    await self._send_raw(reply)
        if deadline.cancelled_caught:
            self.failure = "handshake timed out"
            raise ConnectionClosed("handshake timed out")
        self.engine.budgets.handshake_done(self)

        self.peer_key = self.hs.peer_key
        self.peer_name = clean_name(self.hs.peer.get("name"))
        caps = self.hs.peer.get("caps")
        self.peer_caps = [c for c in caps if isinstance(c, str)] if isinstance(caps, list) else []
        self.dialer_key = self.engine.identity.key if self.outbound else self.peer_key

        refusal = (not self.outbound and self.engine.budgets.admit_key(self)
                   or await self.engine.admission(self))
        if refusal:
            self.failure = refusal
            await self._refuse(errors.AUTH, refusal)
            return
        if not await self.engine.peers.attach(self):
            raise ConnectionClosed("simultaneous open: keeping the other connection")
        self.attached_at = trio.current_time()
        await self.engine.on_connection_established(self)

        seen = await self.engine.resume_seen(self.peer_key)
        await self._send_line({"t": "resume", "seen": seen})
        self.established.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._post_commit_loop)
            nursery.start_soon(self._sender_loop)
            nursery.start_soon(self._pinger)
            if self._gaps.enabled:
                nursery.start_soon(self._gap_watch)
            try:
                await self._on_lines(pending)
                pending = []
                while True:
                    await self._read_allowance()
                    data = await self.stream.receive_some(65536)
                    if not data:
                        break
                    try:
                        lines = reader.feed(data)
                    except LineTooLarge:
                        await self._refuse(errors.TOO_LARGE, "line over 1 MiB")
                        break
                    self._rate_wait = self.engine.budgets.spend(self.peer_key, len(lines),
                                                                len(data))
                    await self._on_lines(lines)
            finally:
                self.reader_done.set()
            # EOF or a refusal: let queued acks go out, then stop.
            await self._post_send.send(None)
            with trio.move_on_after(2):
                await self._drained.wait()
            nursery.cancel_scope.cancel()
        self.close_reason = self.close_reason or "peer closed the connection"

    async def turn_away(self, detail: str) -> None:
        """Refuse a connection before its handshake: ``err quota``, then close."""
        self.close_reason = f"{errors.QUOTA}: {detail}"
        with trio.move_on_after(1):
            try:
                await self.stream.send_all(self._line({"t": "err", "code": errors.QUOTA,
                                                       "detail": detail}))
                await self.stream.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        with trio.move_on_after(1):
            try:
                await self.stream.aclose()
            except Exception:
                pass

    async def _refuse(self, code: str, detail: str, re: str | None = None) -> None:
        """Send a closing err, half-close, and drain so the peer reads it."""
        line = {"t": "err", "code": code}
        if detail:
            line["detail"] = detail
        if re:
            line["re"] = re
        self.close_reason = f"{code}: {detail}" if detail else code
        try:
            await self._send_line(line)
            await self._half_close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        with trio.move_on_after(2):
            try:
                while await self.stream.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    # -- inbound ------------------------------------------------------------------

    async def _read_allowance(self) -> None:
        """Before the next read: wait off this key's rate, then the store's backlog.

        Not reading is the whole remedy: the kernel's buffers fill and TCP
        slows the sender down, while every other connection goes on as before.
        """
        budgets = self.engine.budgets
        if self._rate_wait > 0:
            self.throttled += 1
            budgets.throttled += 1
            await trio.sleep(self._rate_wait)
            self._rate_wait = 0.0
        if not budgets.may_read(self.inflight_bytes):
            self.throttled += 1
            budgets.throttled += 1
            while not budgets.may_read(self.inflight_bytes):
                await budgets.released()

    async def _on_lines(self, raws: list[bytes]) -> None:
        """Handle the lines of one read, storing runs of them in one job.

        Consecutive content lines are stored by a single store job (and acked
        together after its commit), consecutive acks are applied by another:
        a burst costs a few jobs instead of one per line, and line order is
        kept because every run is flushed before any other line is handled.
        """
        contents: list[tuple[dict, bytes]] = []
        acks: list[tuple[str, str]] = []
        now = trio.current_time()  # read again after anything that may wait
        for raw in raws:
            self._trace("<", raw)
            try:
                line = parse_line(raw, self.hs.max_depth)
            except ProtocolError as e:
                await self._flush_runs(contents, acks)
                await self._refuse(e.code, e.detail)
                raise ConnectionClosed(f"{e.code}: {e.detail}") from None
            raw = storable(raw, line)
            t = line["t"]
            if t in ACKED_TYPES:
                if acks or len(contents) >= _RUN_LINES:
                    await self._flush_runs(contents, acks)
                    now = trio.current_time()
                contents.append((line, raw))
                self._seen_line(t, now)
            elif t == "ack":
                if contents:
                    await self._flush_runs(contents, [])
                    now = trio.current_time()
                re = line.get("re")
                if isinstance(re, str) and re:
                    # The peer has it committed: wake `send --wait-ack` now, and
                    # drop the line from our outbox in the background.
                    self.engine.ack_received(self.peer_key, re)
                    self._answered(re, now)
                    acks.append((line.get("th") or "", re))
                self._seen_line(t, now)
            else:
                await self._flush_runs(contents, acks)
                await self._on_line(raw, line)
                now = trio.current_time()
        await self._flush_runs(contents, acks)

    async def _flush_runs(self, contents: list, acks: list) -> None:
        if contents:
            while self._inflight >= max(1, self.engine.config.limits.peer_inflight_lines):
                # Let the store catch up first.
                self._inflight_drop = trio.Event()
                await self._inflight_drop.wait()
            batch, now = list(contents), now_ms()
            contents.clear()
            if (len(batch) > 1 or self.quota_refused
                    or self.engine.budgets.over_stored(  # the most it can cost
                        self.peer_key, usage.line_cost(len(batch[0][1]), new_thread=True))
                    or not await self._take_in_journaled(*batch[0], now)):
                await self._store_run(batch, now)
        if acks:
            done, key = list(acks), self.peer_key
            acks.clear()
            pending = self.engine.writer.submit_nowait(
                lambda c: ops.apply_acks(c, key, done))
            await self._post(pending, self._after_acks, None)

    async def _store_run(self, batch: list, now: int) -> None:
        """Store a run of content lines in one job; they are acked after its commit."""
        self._inflight += len(batch)
        texts = [(line, raw.decode("utf-8")) for line, raw in batch]
        nbytes = sum(len(raw) for _line, raw in batch)
        weight = lines_weight(nbytes, len(batch))
        # Copies for dashboard hosts are handed over in commit order, like
        # our own sends, so a host's lines leave in outbox order.  With
        # nothing of ours waiting for the store, the job may go ahead of
        # other connections' (see awp.store.writer, "Urgent jobs go first").
        pending = self.engine.writer.submit(
            lambda c: self.engine.store_inbound_run(c, self, texts, now),
            self._hand_over_copies if self.engine.shares else None,
            weight=weight, urgent=not self._post_inflight)
        await self._post(pending, self._after_store_batch, batch, nbytes)

    async def _take_in_journaled(self, line: dict, raw: bytes, now: int) -> bool:
        """A lone line on a quiet daemon: journal it, ack it, then store it.

        The ack leaves once the line is synced to the intake journal (see
        :mod:`awp.store.intake`), ahead of the SQLite transaction, and the
        store is held from before the journal write until that transaction
        has committed, with no yield to the event loop in between: nothing
        else is stored meanwhile, and nothing reads the store before the line
        is in it.  False, with nothing done, when the line must take the
        ordinary way.
        """
        eng, intake = self.engine, self.engine.intake
        if (intake is None or self._post_inflight or self._held or self._send_busy()
                or not intake.eligible(line, len(raw), mirrored=bool(eng.shares))
                or not eng.writer.healthy() or not eng.writer.hold()):
            return False
        text = raw.decode("utf-8")
        if not intake.append(self.peer_key, now, text):
            eng.writer.release()
            return False
        journaled_ns = time.perf_counter_ns()
        self._send_lock.acquire_nowait()
        try:
            ack = self._ack(line)
            unsent = self._write_now(ack)
            _give_way()
            pending = eng.writer.run_now(lambda c: eng.store_inbound(c, self, line, text, now))
            if pending.error is None:
                intake.stored()
            else:
                intake.store_failed(self.peer_key, now, text, pending.error)
            if unsent:
                await self._write_all(unsent)
        finally:
            self._send_lock.release()
        if pending.error is not None:
            self.close("store failure")
            return True
        pending.committed_ns = journaled_ns  # durable from the journal's sync on
        await self._post(pending, self._after_store, line)
        return True

    def _seen_line(self, t: str, now: float | None = None) -> None:
        self._last_recv = trio.current_time() if now is None else now
        self._unanswered = 0
        if t != "err":
            self.peer_resumed.set()

    async def _on_line(self, raw: bytes, line: dict) -> None:
        t = line["t"]
        self._seen_line(t)
        if t == "chunk":
            await self._on_chunk(line, len(raw))
        elif t == "grant":
            await self._on_grant(line, len(raw))
        elif t == "introduce":
            await self._on_introduce(line, raw)
        elif t == "resume":
            await self._on_resume(line)
        elif t == "ping":
            await self._send_line({"t": "pong", "re": line["id"]} if line.get("id") else
                                  {"t": "pong"})
        elif t == "pong":
            sent = self._ping_sent.pop(line.get("re") or "", None)
            if sent is not None:
                self.rtt_ms = (trio.current_time() - sent) * 1000
                self.engine.on_rtt(self)
        elif t == "bye":
            await self._on_bye(line)
        elif t == "err":
            self._on_err(line)
        else:
            await self.engine.on_other_line(self, line, raw)

    async def _after_store_batch(self, results: object, batch: list) -> None:
        """The lines of one job are stored: ack them, then do what follows.

        At the end of a burst the acks are written before anything else (the
        peer is waiting on them; events and replies can wait a moment).
        """
        self._inflight -= len(batch)
        self._inflight_drop.set()
        stored = [line for (line, _raw), result in zip(batch, results, strict=True)  # type: ignore[call-overload]
                  if result[0] != -1]  # -1: refused over a budget, never acked
        ts = format_ts(now_ms())
        self._held.extend(ack_line(line.get("th") or "", line["id"], id=ident, ts=ts)
                          for line, ident in zip(stored, self.engine.ids.next_run(len(stored)),
                                                 strict=True))
        if self._post_recv.statistics().current_buffer_used == 0:
            await self._flush_held()
        for result, (line, _raw) in zip(results, batch, strict=True):  # type: ignore[call-overload]
            self._stored(result, line)

    def _hand_over_copies(self, results: list) -> None:
        """Writer hook, in commit order: pass mirror copies to their hosts."""
        for _seq, replies in results:
            for i, reply in enumerate(replies):
                if isinstance(reply, tuple) and reply[0] == "queued":
                    self.engine.hand_over(*reply[1])
                    replies[i] = ("handed", reply[1])

    async def _after_acks(self, ids: object, _unused: object) -> None:
        self.engine.on_acked(self.peer_key, list(ids), woken=True)  # type: ignore[call-overload]

    async def _after_store(self, result: object, line: dict) -> None:
        self._stored(result, line)

    def _stored(self, result: object, line: dict) -> None:
        """A content line is stored (``result`` from ``store_inbound``): its replies."""
        seq, replies = result  # type: ignore[misc]
        if seq == -1:  # refused over a budget: the err, nothing else
            self._held.extend(self._line(reply) for reply in replies)
            return
        for reply in replies:
            if callable(reply):  # work to start now that the line is stored
                self.engine.spawn(reply)
            elif isinstance(reply, tuple):  # a mirror copy, handed over at commit
                if reply[0] != "handed":  # sharing began while the line was stored
                    self.engine.queued_elsewhere(reply[1][0])
            else:
                self._held.append(self._line(reply))
        self.engine.on_inbound_committed(self, line, seq, self.committed_ns)

    async def _on_chunk(self, line: dict, nbytes: int = 0) -> None:
        """Chunks are stored in line order like content, but never acked.

        At most a few chunks (256 KiB each) wait for the store at once, so a
        fast sender cannot make us hold a whole file in memory.
        """
        await self._chunk_slots.acquire()
        now = now_ms()
        pending = self.engine.writer.submit_nowait(
            lambda c: self.engine.store_chunk(c, self, line, now), weight=nbytes)
        await self._post(pending, self._after_chunk, line, nbytes)

    async def _on_grant(self, line: dict, nbytes: int = 0) -> None:
        """A grant line is stored if valid, never acked, never answered."""
        now = now_ms()
        pending = self.engine.writer.submit_nowait(
            lambda c: self.engine.store_grants(c, self, [line.get("grant")], now))
        await self._post(pending, self._after_grant, None, nbytes)

    async def _after_grant(self, result: object, arg: object) -> None:
        self.engine.on_grants_stored(self)

    async def _on_introduce(self, line: dict, raw: bytes) -> None:
        now = now_ms()
        text = raw.decode("utf-8")
        pending = self.engine.writer.submit_nowait(
            lambda c: self.engine.store_introduce(c, self, line, text, now))
        await self._post(pending, self._after_nothing, None, len(raw))

    async def _after_nothing(self, result: object, arg: object) -> None:
        if result:
            self.engine.changes.publish({"kind": "introduce", "peer": self.peer_key})

    async def send_raw_line(self, data: bytes) -> None:
        """Write one pre-built line (relayed presence keeps the origin's bytes)."""
        if not self._bye_sent:
            await self._send_raw(data)

    async def send_grants(self, grants: list[dict]) -> None:
        for g in grants:
            await self._send_line({"t": "grant", "grant": g})

    async def _after_chunk(self, replies: object, line: dict) -> None:
        self._chunk_slots.release()
        for reply in replies:  # type: ignore[attr-defined]
            self._held.append(self._line(reply))

    async def _on_resume(self, line: dict) -> None:
        seen = line.get("seen")
        clean: dict[str, str] = {}
        if isinstance(seen, dict):
            clean = {k: v for k, v in seen.items() if isinstance(k, str) and isinstance(v, str)}
        pending = self.engine.writer.submit_nowait(
            lambda c: ops.apply_resume(c, self.peer_key, clean)
        )
        await self._post(pending, self._after_resume, None)

    async def _after_resume(self, acked: object, _unused: object) -> None:
        if acked:
            self.engine.on_acked(self.peer_key, list(acked))  # type: ignore[arg-type]
            self._gaps.forget(list(acked))  # type: ignore[arg-type]
        # Replay from the outbox.  Lines already handed over stay queued: one
        # handed over before its commit may not be visible to the rescan yet,
        # and whatever the rescan does send is skipped by seq when they go.
        self._last_sent_seq = 0
        self._rescan = True
        self._resumed_by_peer.set()
        self.wake()
        self.engine.on_peer_resumed(self)

    async def _on_bye(self, line: dict) -> None:
        reason = line.get("reason") if isinstance(line.get("reason"), str) else ""
        self._bye_received.set()
        if self._bye_sent:
            raise ConnectionClosed("bye exchanged")
        await self.engine.on_peer_bye(self, reason)
        reply = {"t": "bye", "reason": reason}
        if line.get("id"):
            reply["re"] = line["id"]
        self._bye_sent = True
        await self._send_line(reply)
        try:
            await self._half_close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        with trio.move_on_after(self.engine.config.bye_linger):
            while await self.stream.receive_some(65536):
                pass
        raise ConnectionClosed(f"peer said bye: {reason}" if reason else "peer said bye")

    def _on_err(self, line: dict) -> None:
        code = line.get("code") if isinstance(line.get("code"), str) else ""
        detail = line.get("detail") if isinstance(line.get("detail"), str) else ""
        log.info("peer %s sent err %s %s", self.peer_name or self.peer_key[:18], code, detail)
        if isinstance(line.get("re"), str):
            self._answered(line["re"])  # an answer all the same: no gap there
        self.engine.on_peer_err(self, line)
        if code in errors.CLOSING:
            self.close(f"peer sent err {code}: {detail}".strip())

    # -- ordered post-commit work -------------------------------------------------

    async def _post(self, pending: Pending, then: Callable, arg: object,
                    nbytes: int = 0) -> None:
        """Queue ``then(result, arg)`` for when ``pending`` commits, in arrival order.

        A job that already committed inline, with nothing ahead of it, is
        finished right here: that saves a task switch before the ack.
        ``nbytes`` of the peer's lines count as in flight until then.
        """
        self._post_inflight += 1
        self.inflight_bytes += nbytes
        self.engine.budgets.take(nbytes)
        if self._post_inflight == 1 and pending.event.is_set() and not self._post_lock.locked():
            self._post_lock.acquire_nowait()  # no scheduler trip on the way to the ack
            try:
                await self._post_one((pending, then, arg, nbytes))
                await self._flush_held()
            finally:
                self._post_lock.release()
            return
        await self._post_send.send((pending, then, arg, nbytes))

    async def _post_commit_loop(self) -> None:
        """Act on committed jobs strictly in arrival order (acks keep line order)."""
        async for item in self._post_recv:
            if item is None:
                break
            async with self._post_lock:
                if not await self._post_one(item):
                    break
                if self._held and self._post_recv.statistics().current_buffer_used == 0:
                    await self._flush_held()
        await self._flush_held()
        self._drained.set()

    async def _post_one(self, item: tuple) -> bool:
        """Run one item's follow-up; False (and the connection closing) if it failed."""
        pending, then, arg, nbytes = item
        try:
            result = pending.result() if pending.event.is_set() else await pending.wait()
            self.committed_ns = pending.committed_ns
        except Exception as e:
            log.error("storing a line from %s failed: %s", self.peer_key[:18], e)
            first = arg[0][0] if isinstance(arg, list) and arg else arg
            re = first.get("id") if isinstance(first, dict) else None
            await self._send_line({"t": "err", "code": errors.INTERNAL, "re": re,
                                   "detail": "could not store the line"} if re else
                                  {"t": "err", "code": errors.INTERNAL,
                                   "detail": "could not store"})
            self.close("store failure")
            return False
        finally:
            self._post_inflight -= 1
            if nbytes:
                self.inflight_bytes -= nbytes
                self.engine.budgets.give(nbytes)
        await then(result, arg)
        return True

    async def _flush_held(self) -> None:
        """Write the acks (and their follow-ups) gathered from one burst at once."""
        if self._held:
            data, self._held = b"".join(self._held), []
            await self._send_raw(data)

    # -- outbound -----------------------------------------------------------------

    def rescan(self) -> None:
        """Lines were queued for this peer out of commit order: reread the outbox."""
        self._rescan = True
        self._wake_sender.set()

    def caught_up(self) -> bool:
        """Everything queued for this peer has been written: a new line is next."""
        return (self._resumed_by_peer.is_set() and not self._pushed and not self._rescan
                and not self._sending and not self._bye_sent and not self.closed.is_set())

    async def send_first(self, text: str) -> bool:
        """Write a line before it is stored (the caller holds the store, see Engine).

        Only what the socket takes at once is written here, with no trip
        through the event loop and no wait: the caller holds the store.
        False, with nothing written, when another write is under way or the
        socket takes none of it; the line then goes the ordinary way after
        its commit.  When the socket takes part of it, the rest is finished
        by a task of its own under the send lock, within ``write_timeout``
        like every write (a stall closes the connection and the line is
        replayed on the next resume), and this returns True.
        """
        if self._send_busy() or self.closed.is_set():
            return False
        data = text.encode("utf-8") + b"\n"
        self._send_lock.acquire_nowait()
        rest = self._write_now(data)
        if len(rest) == len(data):
            self._send_lock.release()
            return False
        self._gaps.sent(line_id(text))
        if not rest:
            self._send_lock.release()
            _give_way()
            return True
        self._sending = True
        self.engine.spawn(lambda: self._finish_first(rest))
        return True

    async def _finish_first(self, rest: bytes) -> None:
        """The rest of a line :meth:`send_first` began; releases the send lock."""
        try:
            await self._write_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close("a write failed")
        finally:
            self._sending = False
            self._send_lock.release()

    def _send_busy(self) -> bool:
        return self._send_lock.value == 0

    def sent_first(self, seq: int) -> None:
        """The line written by :meth:`send_first` got outbox position ``seq``."""
        self._last_sent_seq = max(self._last_sent_seq, seq)

    def push(self, seq: int, t: str, text: str) -> None:
        """A line for this peer was just committed (called in commit order)."""
        self._pushed.append((seq, t, text))
        self._wake_sender.set()

    async def _sender_loop(self) -> None:
        """Send queued lines for this peer in outbox order.

        After a resume the outbox is rescanned from the start; otherwise lines
        committed while connected arrive through :meth:`push`, in commit order,
        which saves a query per message.  Either way ``seq`` only moves forward.
        """
        with trio.move_on_after(self.engine.config.resume_wait):
            await self._resumed_by_peer.wait()
        while not self._bye_sent:
            self._wake_sender = trio.Event()
            while self._rescan and not self._bye_sent:
                rows = await self.engine.fetch_outbox(self.peer_key, self._last_sent_seq)
                if not rows:
                    self._rescan = False
                    break
                await self._send_rows([(r[0], r[2], r[3]) for r in rows])
            if self._pushed and not self._bye_sent:
                rows, self._pushed = self._pushed, []
                self._sending = True
                try:
                    await self._send_rows(rows)
                finally:
                    self._sending = False
                continue
            await self._wake_sender.wait()

    async def _send_rows(self, rows: list[tuple[int, str, str]]) -> None:
        """Write queued lines in order, many per write; chunks get their data now."""
        batch: list[str] = []
        size = 0
        for seq, t, text in rows:
            if seq <= self._last_sent_seq:  # sent already (a rescan overtook a push)
                continue
            if t == "chunk":
                if batch:
                    await self._send_raw("".join(batch).encode("utf-8"))
                    batch, size = [], 0
                self._last_sent_seq = seq
                await self._send_raw(await self.engine.fill_chunk(text))
                continue
            if t in ACKED_TYPES:
                self._gaps.sent(line_id(text))
            batch.append(text + "\n")
            size += len(text)
            self._last_sent_seq = seq
            if len(batch) >= _SEND_BATCH or size >= _SEND_BATCH_BYTES:
                await self._send_raw("".join(batch).encode("utf-8"))
                batch, size = [], 0
        if batch:
            await self._send_raw("".join(batch).encode("utf-8"))

    def _answered(self, ident: str, now: float | None = None) -> None:
        if self._gaps.answered(ident, trio.current_time() if now is None else now):
            self._gap_wake.set()

    async def _gap_watch(self) -> None:
        """Send again a line the peer skipped over (see :mod:`awp.node.gaps`)."""
        while not self._bye_sent:
            due = self._gaps.due()
            if due is None:
                self._gap_wake = trio.Event()
                await self._gap_wake.wait()
                continue
            await trio.sleep_until(due)
            again, given_up = self._gaps.take_overdue(trio.current_time())
            who = self.peer_name or self.peer_key[:18]
            if given_up:
                log.info("%s still has not acked %d line(s) sent twice; they wait for the"
                         " next resume", who, len(given_up))
            if not again:
                continue
            rows = await self.engine.read(
                lambda c, key=self.peer_key, ids=again: ops.fetch_outbox_ids(c, key, ids))
            if not rows or self._bye_sent:
                continue
            log.info("sending %d line(s) to %s again: a later line was acked first",
                     len(rows), who)
            for ident, _text in rows:
                self._gaps.sent(ident, resent=True)
            await self._send_raw("".join(text + "\n" for _i, text in rows).encode("utf-8"))

    async def _pinger(self) -> None:
        interval = self.engine.config.ping_interval
        idle = interval * 0.9
        with trio.move_on_after(min(3.0, idle)):
            await self.closed.wait()
        if not self.closed.is_set():
            await self._ping()
        while True:
            deadline = max(self._last_recv, self._last_ping) + idle
            now = trio.current_time()
            if now < deadline:
                await trio.sleep_until(deadline)
                continue
            if self._unanswered >= 2:
                self.close("peer stopped answering pings")
                return
            await self._ping()

    async def _ping(self) -> None:
        ident = self.engine.ids.next()
        self._ping_sent = {ident: trio.current_time()}
        self._last_ping = trio.current_time()
        self._unanswered += 1
        await self._send_line({"t": "ping"}, ident=ident)

    async def send_bye(self, reason: str) -> bool:
        """Say bye, send nothing more, close after the peer's bye or a timeout.

        False when the bye could not be written (a stalled or broken
        connection, which is closed): the caller must not wait on that peer.
        """
        if self._bye_sent:
            return True
        self._bye_sent = True
        self.wake()
        try:
            await self._send_line({"t": "bye", "reason": reason})
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close("could not say bye")
            return False
        with trio.move_on_after(self.engine.config.bye_linger):
            await self._bye_received.wait()
        self.close("we said bye")
        return True

    # -- writing ------------------------------------------------------------------

    def _line(self, line: dict, ident: str | None = None) -> bytes:
        """A line of ours with its envelope (id, ts) filled in."""
        full = {"t": line["t"], "id": ident or self.engine.ids.next(),
                "ts": format_ts(now_ms())}
        full.update((k, v) for k, v in line.items() if k != "t")
        return dump(full)

    def _ack(self, line: dict) -> bytes:
        """Our ack of a content line now stored (written straight, see ``ack_line``)."""
        return ack_line(line.get("th") or "", line["id"], id=self.engine.ids.next(),
                        ts=format_ts(now_ms()))

    async def _send_line(self, line: dict, ident: str | None = None) -> None:
        await self._send_raw(self._line(line, ident))

    def _write_now(self, data: bytes) -> bytes:
        """Write to a socket without yielding to the event loop; returns what
        did not go (all of it when the stream is not a plain socket).

        The caller holds the send lock, so nothing can come between these
        bytes and the rest of them.
        """
        self._trace_out(data)
        if type(self.stream) is not trio.SocketStream:
            return data
        try:
            n = os.write(self.stream.socket.fileno(), data)
        except OSError:  # would block, or broken: send_all will say which
            return data
        return data[n:]

    def _trace_out(self, data: bytes) -> None:
        if self.engine.config.trace:
            for ln in data.splitlines():
                self._trace(">", ln)

    async def _send_raw(self, data: bytes) -> None:
        """Write under the send lock, within the write deadline (see :meth:`_write_all`).

        Waiting for the lock has no deadline of its own: whoever holds it is
        writing and either makes progress or drops the connection within
        ``write_timeout``, after which this raises at once.
        """
        self._trace_out(data)
        # An uncontended lock is taken without a trip through the scheduler
        # (``async with`` yields before it returns), so the bytes leave now.
        if self._send_busy():
            await self._send_lock.acquire()
        else:
            self._send_lock.acquire_nowait()
        try:
            if self._cancel.cancel_called or self.closed.is_set():
                raise trio.ClosedResourceError(self.close_reason or "connection closed")
            await self._write_all(data)
        finally:
            self._send_lock.release()

    async def _half_close(self) -> None:
        """``send_eof`` under the send lock: trio refuses it beside a write in
        progress (acks flushed after a commit, say), which killed the
        connection task with ``BusyResourceError`` (found by the live fuzzer)."""
        async with self._send_lock:
            await self.stream.send_eof()

    async def _write_all(self, data: bytes) -> None:
        """``send_all`` with a deadline on progress; the caller holds the send lock.

        A peer that stops reading fills the socket buffers and would hold
        every writer here (pings, acks, ``awp grant``, ``awp bye``) for
        good.  Each slice of at most 256 KiB must go within
        ``limits.write_timeout``, else the connection is closed (a write cut
        short leaves a torn line, so it cannot be used again) and
        ``BrokenResourceError`` raised; the lines stay in the outbox for the
        next connection, and the redial backoff is not reset.
        """
        timeout = self.engine.config.limits.write_timeout
        if timeout <= 0:
            timeout = math.inf
        for start in range(0, len(data), _WRITE_SLICE):
            part = data if len(data) <= _WRITE_SLICE else data[start:start + _WRITE_SLICE]
            with trio.move_on_after(timeout) as scope:
                await self.stream.send_all(part)
            if scope.cancelled_caught:
                self.stalled = True
                reason = f"a write to the peer stalled for {timeout:g}s"
                log.info("dropping %s: %s", self.peer_name or self.peer_key[:18] or self.desc,
                         reason)
                self.close(reason)
                raise trio.BrokenResourceError(reason)

    def _trace(self, arrow: str, raw: bytes) -> None:
        if self.engine.config.trace:
            who = self.peer_name or (self.peer_key[:18] if self.peer_key else self.desc)
            shown = raw if len(raw) <= 2000 else raw[:2000] + b"...(%d bytes)" % len(raw)
            trace_log.info("%s %s %s", who, arrow, shown.decode("utf-8", "replace"))


def _give_way() -> None:
    """Let whoever our write just woke run before our own bookkeeping.

    A line or ack written to a peer on this host wakes its reader, and on a
    machine with few CPUs the kernel often queues that reader behind us; what
    we do next (storing the line) is not what anyone is waiting for.  With
    nothing else runnable here, as when the peer is on another host, this is
    one cheap system call.
    """
    os.sched_yield()


def _leaf(e: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (trio nurseries)."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if isinstance(e, BaseExceptionGroup):
        # Several at once: a peer-caused end wins over the noise it causes.
        for sub in e.exceptions:
            leaf = _leaf(sub)
            if isinstance(leaf, ConnectionClosed):
                return leaf
        return _leaf(e.exceptions[0])
    return e


def jittered(backoff: float, rnd: float) -> float:
    """A wait drawn uniformly from ``[b/2, 3b/2)`` given ``rnd`` in ``[0, 1)``."""
    return backoff / 2 + backoff * rnd


def next_backoff(backoff: float, cap: float) -> float:
    return min(backoff * 2, cap) if math.isfinite(backoff) else cap
