"""One live connection to a peer: the trio driver around the session core.

The handshake is decided by :mod:`awp.node.handshake` and every rule after it
by :class:`awp.node.session.Session` (dispatch, ack order, gaps, pings, resume
wait, bye, replay order); this module only carries out what they ask.  It
reads and feeds the session, runs the session's timer, sends from the outbox
in the order :class:`~awp.node.session.Replay` gives, and tells the engine.
Store jobs and their in-order follow-ups are :mod:`awp.node.jobs`; writing
(one writer at a time, a deadline on progress) is :mod:`awp.node.lineout`.
What it still decides is how, never what: batching writes, waiting off the
read budgets (:mod:`awp.node.budgets`), the handshake timeout and the linger
after the peer's bye.  A misbehaving peer costs us this connection at most,
never the daemon.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import trio

from ..base.cpu import STEPS, clock
from ..base.sockread import receive_some
from ..store import ops
from ..wire import errors
from ..wire.errors import ProtocolError
from ..wire.framing import LineReader, LineTooLarge
from ..wire.names import clean_name
from .handshake import Handshake
from .jobs import STORE_OPS, Jobs
from .lineout import LineOut, give_way
from .sealed import SealedStream, seal_for  # noqa: F401 (seal_for: imported from here)
from .session import PAUSE, Session
from .session import actions as A

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("awp.node")
trace_log = logging.getLogger("awp.trace")

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
        cfg = engine.config
        self.hs = Handshake(engine.identity, engine.local_hello(outbound), engine.ids,
                            present=engine.grants_to_present,
                            max_depth=cfg.limits.json_depth, outbound=outbound,
                            seal=seal_for(cfg.seal, stream))
        engine.bind_handshake(self.hs)  # rotation and operator keys
        self.session = Session(engine.ids, now=trio.current_time(),
                               gap_timeout=cfg.limits.gap_timeout,
                               ping_interval=cfg.ping_interval,
                               inflight_lines=cfg.limits.peer_inflight_lines,
                               run_lines=_RUN_LINES, max_depth=cfg.limits.json_depth,
                               resume_wait=cfg.resume_wait, bye_linger=cfg.bye_linger)
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
        self.sealed = False  # every byte after both auth lines is sealed (wire/seal.py)
        self._cancel = trio.CancelScope()
        self.out = LineOut(stream, write_timeout=cfg.limits.write_timeout,
                           on_stall=self._stalled,
                           trace=self._trace_out if cfg.trace else None)
        self._wake_sender = trio.Event()
        self._timer_wake = trio.Event()
        self._rate_wait = 0.0  # seconds this key's rate wants us to wait before reading
        self._may_send = trio.Event()  # the peer resumed, or resume_wait passed
        self._sending = False  # the sender loop is writing pushed lines
        self.stalled = False  # closed because a write made no progress in time
        self.throttled = 0  # times reading waited for the rate or the store
        self.quota_refused = 0  # content lines refused with err quota (then all are)
        self.counted_key = False  # counted in the budgets' per-key connections
        self.jobs = Jobs(self)

    @property
    def inflight_bytes(self) -> int:
        """Bytes of the peer's lines handed to the store, not yet done (the budgets read it)."""
        return self.jobs.inflight_bytes

    # -- public -------------------------------------------------------------------

    def wake(self) -> None:
        """New lines were queued for this peer."""
        self._wake_sender.set()

    def close(self, reason: str = "") -> None:
        if not self.close_reason:
            self.close_reason = reason
        self.out.shut = self.close_reason or "connection closed"
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
            self.out.shut = self.close_reason or "connection closed"
            if self.jobs.inflight_bytes:  # follow-ups that will never run now
                self.engine.budgets.give(self.jobs.inflight_bytes)
                self.jobs.inflight_bytes = 0
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
        await self.out.send(self.hs.start())
        with trio.move_on_after(self.engine.config.handshake_timeout) as deadline:
            while not self.hs.done:
                if not pending:
                    data = await self.stream.receive_some(65536)
                    if not data:
                        raise ConnectionClosed("peer closed during handshake")
                    try:
                        pending = reader.feed(data)
                    except LineTooLarge:
                        await self.refuse(errors.TOO_LARGE, "line over 1 MiB")
                        return
                    continue
                raw = pending.pop(0)
                self._trace("<", raw)
                try:
                    reply = self.hs.receive(raw)
                except ProtocolError as e:
                    self.failure = e.detail or e.code
                    if e.code:
                        await self.refuse(e.code, e.detail, re=e.re)
                    else:
                        raise ConnectionClosed(e.detail) from None
                    return
                if reply:
                    await self.out.send(reply)
                    if self.hs.seal_keys is not None and not self.sealed:
                        # Our auth was the last plain line we send.
                        self.sealed = True
                        self.out.stream = SealedStream(self.stream, self.hs.seal_keys[0])
        if deadline.cancelled_caught:
            self.failure = "handshake timed out"
            raise ConnectionClosed("handshake timed out")
        if self.sealed:
            # Whatever came behind the peer's auth line is sealed bytes, not lines.
            sealed = self.out.stream
            assert isinstance(sealed, SealedStream) and self.hs.seal_keys is not None
            sealed.open_receiving(self.hs.seal_keys[1], reader.take_rest(pending))
            pending = []
            self.stream = sealed
        self.engine.budgets.handshake_done(self)

        self.peer_key = self.hs.peer_key
        self.peer_name = clean_name(self.hs.peer.get("name"))
        caps = self.hs.peer.get("caps")
        self.peer_caps = [c for c in caps if isinstance(c, str)] if isinstance(caps, list) else []
        self.dialer_key = self.engine.identity.key if self.outbound else self.peer_key

        # Rotation records are taken before admission (awp/node/rotate.py).
        refusal = (not self.outbound and self.engine.budgets.admit_key(self)
                   or await self.engine.took_rotation(self) or await self.engine.admission(self))
        if refusal:
            self.failure = refusal
            await self.refuse(errors.AUTH, refusal)
            return
        if self.hs.peer.get("side"):
            return await self.engine.serve_side(self, reader.take_rest(pending))
        if not await self.engine.peers.attach(self):
            raise ConnectionClosed("simultaneous open: keeping the other connection")
        self.attached_at = trio.current_time()
        await self.engine.on_connection_established(self)

        seen = await self.engine.resume_seen(self.peer_key)
        self.session.start(trio.current_time())
        await self.out.send(self.session.line({"t": "resume", "seen": seen}))
        self.established.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.jobs.loop)
            nursery.start_soon(self._sender_loop)
            nursery.start_soon(self._timer_loop)
            try:
                await self._take(pending)
                pending = []
                while True:
                    await self._read_allowance()
                    data = await receive_some(self.stream, 65536)
                    if not data:
                        break
                    t = clock()
                    try:
                        lines = reader.feed(data)
                    except LineTooLarge:
                        await self.refuse(errors.TOO_LARGE, "line over 1 MiB")
                        break
                    STEPS["parse"] += clock() - t
                    self._rate_wait = self.engine.budgets.spend(self.peer_key, len(lines),
                                                                len(data))
                    if self.engine.budgets.large(lines):
                        await self._take_large(lines)
                    else:
                        await self._take(lines)
            finally:
                self.reader_done.set()
            # EOF or a refusal: let queued acks go out, then stop.
            await self.jobs.finish()
            with trio.move_on_after(2):
                await self.jobs.drained.wait()
            nursery.cancel_scope.cancel()
        self.close_reason = self.close_reason or "peer closed the connection"

    async def turn_away(self, detail: str) -> None:
        """Refuse a connection before its handshake: ``err quota``, then close."""
        self.close_reason = f"{errors.QUOTA}: {detail}"
        with trio.move_on_after(1):
            try:
                await self.stream.send_all(self.session.line(
                    {"t": "err", "code": errors.QUOTA, "detail": detail}))
                await self.stream.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        with trio.move_on_after(1):
            try:
                await self.stream.aclose()
            except Exception:
                pass

    async def refuse(self, code: str, detail: str, re: str | None = None) -> None:
        """Send a closing err, half-close, and drain so the peer reads it."""
        line = {"t": "err", "code": code}
        if detail:
            line["detail"] = detail
        if re:
            line["re"] = re
        self.close_reason = f"{code}: {detail}" if detail else code
        try:
            await self.out.send(self.session.line(line))
            await self.out.half_close()
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

    async def _take_large(self, raws: list[bytes]) -> None:
        """Lines of a read holding a large one: parsed and stored in its turn.

        Parsing a line of a megabyte holds the event loop for milliseconds
        and storing it holds the writer for a 1 MB commit.  Large lines take
        turns daemon-wide (``limits.large_lines`` at once), each committed
        before the next is parsed, so a small line from anyone finds the
        loop and the writer busy with one of them at most, not with every
        flooding peer's (docs/threat-model.md, "Budgets").  This connection
        reads nothing more meanwhile: TCP holds the rest at the sender.
        """
        budgets = self.engine.budgets
        turn = await budgets.large_turn()
        try:
            await self._take(raws)
            await self.jobs.stored()
        finally:
            if turn:
                budgets.large_done()

    async def _take(self, raws: list[bytes]) -> None:
        """Feed the lines of one read to the session and do what it asks, in order."""
        s = self.session
        now = trio.current_time()
        if self.engine.config.trace:
            for raw in raws:
                self._trace("<", raw)
        t = clock()
        s.receive(raws, now)
        STEPS["parse"] += clock() - t
        if s.peer_spoke and not self.peer_resumed.is_set():
            self.peer_resumed.set()
        while True:
            act = s.next_action(now)
            if act is None:
                break
            if act is PAUSE:  # let the store catch up first
                await self.jobs.store_caught_up()
                continue
            await self._inbound(act)
        if s.timer_dirty:
            self._timer_wake.set()

    async def _inbound(self, act: tuple) -> None:
        """Carry out one action the session derived from the peer's lines."""
        op = act[0]
        eng = self.engine
        if op in STORE_OPS:
            await self.jobs.start(act)
        elif op is A.SEND:
            await self.out.send(act[1])
        elif op is A.RTT:
            self.rtt_ms = act[1]
            eng.on_rtt(self)
        elif op is A.PEER_ERR:
            line = act[1]
            log.info("peer %s sent err %s %s", self.peer_name or self.peer_key[:18],
                     line.get("code"), line.get("detail") or "")
            eng.on_peer_err(self, line)
        elif op is A.OTHER:
            await eng.on_other_line(self, act[1], act[2])
        elif op is A.PEER_BYE:
            await self._peer_bye(act[1], act[2])
        elif op is A.REFUSE:
            await self.refuse(act[1], act[2])
            raise ConnectionClosed(f"{act[1]}: {act[2]}")
        elif op is A.CLOSE:
            self.close(act[1])
            raise ConnectionClosed(act[1])

    async def _peer_bye(self, reason: str, reply: bytes) -> None:
        """The peer said bye: tell the engine, answer with ours, let it read, end."""
        await self.engine.on_peer_bye(self, reason)
        await self.out.send(reply)
        try:
            await self.out.half_close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        with trio.move_on_after(self.engine.config.bye_linger):
            while await self.stream.receive_some(65536):
                pass
        raise ConnectionClosed(f"peer said bye: {reason}" if reason else "peer said bye")

    def resumed(self) -> None:
        """The peer's resume is applied: replay may begin."""
        self._may_send.set()
        self.wake()
        if (rot := self.engine.rotation) is not None and rot.seq:  # it stored our record
            self.engine.spawn(lambda: rot.delivered(self))

    async def send_raw_line(self, data: bytes) -> None:
        """Write one pre-built line (relayed presence keeps the origin's bytes)."""
        if not self.session.replay.bye_sent:
            await self.out.send(data)

    async def send_grants(self, grants: list[dict]) -> None:
        for g in grants:
            await self.out.send(self.session.line({"t": "grant", "grant": g}))

    # -- outbound -----------------------------------------------------------------

    def rescan(self) -> None:
        """Lines were queued for this peer out of commit order: reread the outbox."""
        self.session.replay.rescan()
        self._wake_sender.set()

    def caught_up(self) -> bool:
        """Everything queued for this peer has been written: a new line is next."""
        r = self.session.replay
        return (r.resumed_by_peer and not r.pushed and not r.rescan_due
                and not self._sending and not r.bye_sent and not self.closed.is_set())

    def send_first(self, ident: str, data: bytes) -> bool:
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
        if self.out.busy() or self.closed.is_set():
            return False
        self.out.lock.acquire_nowait()
        rest = self.out.write_now(data)
        if rest is data:  # nothing written (an encoded rest may be as long)
            self.out.lock.release()
            return False
        self.session.gaps.sent(ident)
        if not rest:
            self.out.lock.release()
            give_way()
            return True
        self._sending = True
        self.engine.spawn(lambda: self._finish_first(rest))
        return True

    async def _finish_first(self, rest: bytes) -> None:
        """The rest of a line :meth:`send_first` began; releases the send lock."""
        try:
            await self.out.write_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close("a write failed")
        finally:
            self._sending = False
            self.out.lock.release()

    def _send_busy(self) -> bool:
        return self.out.lock.value == 0

    def sent_first(self, seq: int) -> None:
        """The line written by :meth:`send_first` got outbox position ``seq``."""
        self.session.replay.sent_first(seq)

    def push(self, seq: int, t: str, text: str) -> None:
        """A line for this peer was just committed (called in commit order)."""
        self.session.replay.push(seq, t, text)
        self._wake_sender.set()

    async def _sender_loop(self) -> None:
        """Write what :class:`~awp.node.session.Replay` says goes next, in outbox order.

        Nothing goes before the peer's resume (or ``resume_wait``, the session's timer).
        """
        r = self.session.replay
        await self._may_send.wait()
        while not r.bye_sent:
            self._wake_sender = trio.Event()
            step = r.next_step()
            if step is None:
                await self._wake_sender.wait()
            elif step[0] == "fetch":
                rows = await self.engine.fetch_outbox(self.peer_key, step[1])  # type: ignore[arg-type]
                r.fetched(rows)
                if rows and not r.bye_sent:
                    await self._write_parts(r.take([(x[0], x[2], x[3]) for x in rows]))
            else:
                self._sending = True
                try:
                    await self._write_parts(r.take(step[1]))  # type: ignore[arg-type]
                finally:
                    self._sending = False

    async def _write_parts(self, parts: list[bytes | str]) -> None:
        """Batches of lines as they are; chunks get their data as they go."""
        for part in parts:
            if isinstance(part, str):
                part = await self.engine.fill_chunk(part)
            await self.out.send(part)

    async def _timer_loop(self) -> None:
        """Wake the session at the deadline it names: pings, idle, resending a gap."""
        s = self.session
        while True:
            self._timer_wake = trio.Event()
            with trio.move_on_at(s.next_deadline()):
                await self._timer_wake.wait()
            for act in s.tick(trio.current_time()):
                op = act[0]
                if op is A.SEND:
                    await self.out.send(act[1])
                elif op is A.RESEND:
                    rows = await self.engine.read(
                        lambda c, key=self.peer_key, ids=act[1]: ops.fetch_outbox_ids(c, key, ids))
                    again = s.resending(rows)
                    if again is not None:
                        log.info("sending %d line(s) to %s again: a later line was acked"
                                 " first", len(rows), self._who())
                        await self.out.send(again[1])
                elif op is A.REPLAY:
                    self._may_send.set()
                elif op is A.LOG:
                    log.info("%s %s", self._who(), act[1])
                elif op is A.CLOSE:
                    self.close(act[1])
                    return

    def _who(self) -> str:
        return self.peer_name or self.peer_key[:18] or self.desc

    async def send_bye(self, reason: str) -> bool:
        """Say bye, send nothing more; returns once the peer's bye or the
        session's ``bye_linger`` has closed the connection.

        False when the bye could not be written (a stalled or broken
        connection, which is closed): the caller must not wait on that peer.
        """
        act = self.session.send_bye(reason, trio.current_time())
        if act is None:
            return True
        self.wake()
        self._timer_wake.set()  # the session's bye linger starts now
        try:
            await self.out.send(act[1])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close("could not say bye")
            return False
        await self.closed.wait()  # the peer's bye, or the linger, ends it
        return True

    # -- writing ------------------------------------------------------------------

    def _stalled(self, reason: str) -> None:
        self.stalled = True
        log.info("dropping %s: %s", self._who(), reason)
        self.close(reason)

    def _trace_out(self, raw: bytes) -> None:
        self._trace(">", raw)

    def _trace(self, arrow: str, raw: bytes) -> None:
        if self.engine.config.trace:
            who = self.peer_name or (self.peer_key[:18] if self.peer_key else self.desc)
            shown = raw if len(raw) <= 2000 else raw[:2000] + b"...(%d bytes)" % len(raw)
            trace_log.info("%s %s %s", who, arrow, shown.decode("utf-8", "replace"))


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
