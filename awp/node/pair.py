"""Pair streams (cap ``pair``): a live byte stream between two agents' commands.

The dialing daemon opens a side connection named ``pair``
(:mod:`awp.node.bulk_side`) and writes one request line; this side answers
``ok`` once a local ``awp pair --accept`` takes the stream, or ``err``.
Then the bytes are raw both ways (:mod:`awp.node.pair_splice`).

The daemon never runs a command for a peer.  A request is taken by an
acceptor waiting on ``awp.sock`` (from that peer, or from anyone); with no
acceptor waiting it is held for ``limits.pair_wait`` and shown to the
local agent as a notice, but only when we granted the peer the ``pair``
capability; otherwise it is refused at once.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import trio

from ..store import grants as grantstore
from ..store import ops, queries
from ..wire import errors
from ..wire import pair as wire
from ..wire.timefmt import now_ms
from .bulk_side import Side, SideClosed, dial
from .extension import Extension
from .pair_splice import Outcome, cap_buffers, splice

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.pair")

#: Sessions whose outcome ``GET /v1/pair/ID`` still answers.
KEPT_OUTCOMES = 256


class PairRefused(Exception):
    """A stream that could not start: ``code`` is an API error word, the text says why."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


class Incoming:
    """A peer's request, waiting for (or taken by) a local acceptor."""

    __slots__ = ("key", "name", "ident", "th", "side", "taken", "released", "done")

    def __init__(self, key: str, name: str, ident: str, th: str, side: Side) -> None:
        self.key, self.name, self.ident, self.th, self.side = key, name, ident, th, side
        self.taken = trio.Event()  # an acceptor has it (or it was given up)
        self.released = trio.Event()  # nothing but the acceptor reads the side any more
        self.done = trio.Event()  # the acceptor is finished with the connection


class _Waiter:
    __slots__ = ("from_key", "got", "event")

    def __init__(self, from_key: str | None) -> None:
        self.from_key = from_key
        self.got: Incoming | None = None
        self.event = trio.Event()


class Pair(Extension):
    """Pair streams: the dialing side's sessions, and the accepting side's rules."""

    sides = (wire.SIDE,)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.waiters: list[_Waiter] = []
        self.held: list[Incoming] = []
        self.per_key: dict[str, int] = {}  # streams held or running, by the peer's key
        self.running = 0  # streams held or running, both ways

    @property
    def limits(self):
        return self.engine.config.limits

    # -- counting ---------------------------------------------------------------------

    def _count(self, key: str, inbound: bool) -> None:
        """Count a stream held or running; a peer's own are bounded per key too."""
        lim = self.limits
        n = self.per_key.get(key, 0)
        if inbound and n >= lim.pair_per_peer:
            raise PairRefused(errors.QUOTA, f"too many pair streams from you ({n} open;"
                              f" limits.pair_per_peer is {lim.pair_per_peer})")
        if self.running >= lim.pair_streams:
            raise PairRefused(errors.QUOTA, f"too many pair streams here ({self.running} open;"
                              f" limits.pair_streams is {lim.pair_streams})")
        if inbound:
            self.per_key[key] = n + 1
        self.running += 1

    def _uncount(self, key: str, inbound: bool) -> None:
        self.running -= 1
        if not inbound:
            return
        n = self.per_key.get(key, 0) - 1
        if n > 0:
            self.per_key[key] = n
        else:
            self.per_key.pop(key, None)

    # -- dialing side -----------------------------------------------------------------

    async def supports(self, key: str) -> bool:
        """Whether ``key`` lists the cap (its live hello, else the last one we stored)."""
        conn = self.engine.peers.active(key)
        if conn is not None:
            return wire.CAP in conn.peer_caps
        row = await self.engine.read(
            lambda c: c.execute("SELECT caps FROM peers WHERE key = ?", (key,)).fetchone())
        try:
            return row is not None and wire.CAP in json.loads(row[0])
        except ValueError:
            return False

    async def open(self, key: str, ident: str, th: str) -> Side:
        """Dial ``key`` and ask for a stream; the side connection once it said ok."""
        name = await self.engine.read(lambda c: queries.peer_label(c, key))
        if not await self.supports(key):
            raise PairRefused("unsupported", f"{name} does not support pair streams")
        self._count(key, inbound=False)
        try:
            try:
                side = await dial(self.engine, key, side=wire.SIDE)
            except SideClosed as e:
                raise PairRefused("unreachable", f"cannot reach {name}: {e}") from None
            try:
                await side.send_line(wire.request(ident, th))
                with trio.fail_after(self.limits.pair_wait + 15):
                    why = wire.answer(await side.line(), ident)
                if why:
                    raise PairRefused("refused", f"{name} refused the pair stream: {why}")
            except BaseException as e:
                await side.aclose()
                if isinstance(e, SideClosed | trio.TooSlowError):
                    raise PairRefused("unreachable", f"{name} did not answer the pair request:"
                                      f" {e or 'timed out'}") from None
                raise
        except BaseException:
            self._uncount(key, inbound=False)
            raise
        cap_buffers(side.stream)
        return side

    def abandon(self, key: str) -> None:
        """A stream :meth:`open` started whose caller went away before it ran."""
        self._uncount(key, inbound=False)

    async def run(self, key: str, ident: str, th: str, side: Side,
                  local: trio.abc.HalfCloseableStream, rest: bytes,
                  on_end=None) -> Outcome:
        """The dialing side's session, then its record in the thread (``on_end`` is
        called with the outcome before the record is written)."""
        name = await self.engine.read(lambda c: queries.peer_label(c, key))
        try:
            cap_buffers(local)
            out = await splice(local, rest, side.stream, side.take_buffered(1 << 30), name)
        finally:
            self._uncount(key, inbound=False)
            with trio.CancelScope(shield=True):
                await side.aclose()
                await local.aclose()
        if on_end is not None:
            on_end(out)
        log.info("pair stream %s with %s: %d bytes out, %d in, %d ms%s", ident, key,
                 out.sent, out.received, out.ms, f" ({out.error})" if out.error else "")
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
            await self._record(key, name, ident, th, out)
        return out

    async def _record(self, key: str, name: str, ident: str, th: str, out: Outcome) -> None:
        data = {"id": ident, "sent": out.sent, "received": out.received, "ms": out.ms,
                **({"error": out.error} if out.error else {})}
        parts = [{"k": "text", "text": wire.describe(data, name)},
                 wire.record_part(ident=ident, sent=out.sent, received=out.received,
                                  ms=out.ms, error=out.error)]
        try:
            await self.engine.send_msg(key, parts, th=th or None,
                                       subject=None if th else "pair")
        except Exception as e:  # the store refused it: the stream itself is over anyway
            log.warning("cannot record pair stream %s: %s", ident, e)

    # -- accepting side ---------------------------------------------------------------

    async def accept(self, from_key: str | None) -> Incoming:
        """The next request for a local acceptor (from ``from_key``, or anyone), its
        ``ok`` already sent; cancelled when the acceptor goes away."""
        while True:
            inc = next((h for h in self.held if not h.taken.is_set()
                        and from_key in (None, h.key)), None)
            if inc is not None:
                self.held.remove(inc)
                inc.taken.set()
            else:
                w = _Waiter(from_key)
                self.waiters.append(w)
                try:
                    await w.event.wait()
                except BaseException:
                    if w.got is not None:  # given a request in the instant we went away
                        w.got.done.set()
                    raise
                finally:
                    if w in self.waiters:
                        self.waiters.remove(w)
                assert w.got is not None
                inc = w.got
            try:
                await inc.released.wait()
                if inc.done.is_set():  # it gave up in that instant
                    continue
                await inc.side.send_line(wire.ok(inc.ident))
            except SideClosed:
                inc.done.set()  # the requester went away while it was held: next one
                continue
            except BaseException:
                inc.done.set()
                raise
            return inc

    async def serve(self, inc: Incoming, local: trio.abc.HalfCloseableStream,
                    rest: bytes) -> Outcome:
        """The accepting side's session for a request :meth:`accept` gave out."""
        try:
            cap_buffers(local)
            cap_buffers(inc.side.stream)
            out = await splice(local, rest, inc.side.stream, inc.side.take_buffered(1 << 30),
                               inc.name)
        finally:
            inc.done.set()
            with trio.CancelScope(shield=True):
                await local.aclose()
        log.info("pair stream %s from %s: %d bytes out, %d in, %d ms%s", inc.ident, inc.key,
                 out.sent, out.received, out.ms, f" ({out.error})" if out.error else "")
        return out

    def _waiter_for(self, key: str) -> _Waiter | None:
        for pick in (key, None):  # one waiting for this peer before one for anyone
            for w in self.waiters:
                if w.from_key == pick and w.got is None:
                    return w
        return None

    async def serve_side(self, conn: Connection, rest: bytes) -> None:
        """A peer asks for a stream: hand it to an acceptor, hold it, or refuse it."""
        side, key = Side(conn.stream, rest), conn.peer_key
        conn.close_reason = "pair stream"
        try:
            with trio.fail_after(15):
                line = await side.line()
            ident, th = wire.check_request(line)
        except (SideClosed, trio.TooSlowError):
            return
        except wire.PairError as e:
            await _refuse(side, "", errors.BAD_FRAME, str(e))
            return
        try:
            self._count(key, inbound=True)
        except PairRefused as e:
            log.info("refused pair stream %s from %s: %s", ident, key, e)
            await _refuse(side, ident, e.code, str(e))
            return
        try:
            await self._hand_over(conn, side, key, ident, th)
        finally:
            self._uncount(key, inbound=True)

    async def _hand_over(self, conn: Connection, side: Side, key: str, ident: str,
                         th: str) -> None:
        eng = self.engine
        name = conn.peer_name or key[:18]
        inc = Incoming(key, name, ident, th, side)
        w = self._waiter_for(key)
        if w is not None:
            w.got = inc
            inc.taken.set()
            inc.released.set()
            w.event.set()
            await inc.done.wait()
            return

        def granted(c) -> bool:
            return wire.CAP in grantstore.honored_caps(c, key, eng.identity.key,
                                                       eng.config.trust, now_ms(),
                                                       eng.audiences())

        if not await eng.read(granted):
            log.info("refused pair stream %s from %s: no acceptor, no grant", ident, key)
            await _refuse(side, ident, errors.FORBIDDEN,
                          "no one here accepts pair streams from you")
            return
        wait = self.limits.pair_wait
        on = f" on thread {th}" if th else ""
        text = (f"{name} wants to pair{on}: run awp pair --accept --from {key} -- CMD"
                f" within {wait:g} s")
        await eng.writer.run(lambda c: ops.add_notice(c, eng.ids, key, "pair", text, now_ms(),
                                                      th=th, data={"id": ident}))
        eng.changes.publish({"kind": "notice", "peer": key})
        self.held.append(inc)
        try:
            with trio.move_on_after(wait):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_watch_gone, side, nursery.cancel_scope)
                    await inc.taken.wait()
                    nursery.cancel_scope.cancel()
        finally:
            inc.released.set()
            if not inc.taken.is_set():
                inc.taken.set()
                if inc in self.held:
                    self.held.remove(inc)
                inc.done.set()
        if inc.done.is_set():
            await _refuse(side, ident, errors.FORBIDDEN,
                          f"no one accepted the pair stream within {wait:g} s")
            return
        await inc.done.wait()


async def _watch_gone(side: Side, cancel: trio.CancelScope) -> None:
    """While a request is held its requester sends nothing: bytes or an end mean it
    gave up (or breaks the rules), and the request is dropped."""
    try:
        await side.stream.receive_some(1)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    cancel.cancel()


async def _refuse(side: Side, ident: str, code: str, detail: str) -> None:
    try:
        await side.send_line(wire.err(ident, code, detail))
        await side.stream.send_eof()
    except (SideClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
