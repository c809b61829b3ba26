"""The protocol engine: identity, store, connections; the agent's verbs mix in
from :mod:`awp.node.verbs`.

One :class:`Engine` runs per home inside the daemon's trio loop.  Writes go
through the group-commit :class:`~awp.store.writer.Writer`; reads run in worker
threads on their own connections (WAL lets them run beside the writer).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import trio

from ..store import blobs as blobstore
from ..store import grants as grantstore
from ..store import invites as invitestore
from ..store import links, ops, usage
from ..store.checkpoint import Checkpointer
from ..store.db import connect, open_store
from ..store.idfloor import IdFloor
from ..store.writer import Writer
from ..wire import errors
from ..wire.address import Address, AddressError, parse_address
from ..wire.b64 import b64std
from ..wire.canonical import compact_json
from ..wire.ids import IdGenerator
from ..wire.keys import Identity
from ..wire.timefmt import now_ms
from .admission import admit
from .budgets import Budgets
from .business import Business
from .config import NodeConfig
from .connection import Connection
from .dialer import DialError, key_check
from .events import Broadcaster
from .extension import Extension
from .handshake import Handshake, LocalHello
from .inbound_store import InboundStore
from .intake import Intake
from .invites import Invites
from .network import Network, NoNetwork
from .operators import Operators
from .pausewatch import PauseWatcher
from .peers import PeerManager
from .reach import hello_addrs, store_hello_endpoints
from .rotate import Rotations
from .verbs import AgentVerbs
from .wake import looks_waking, looks_waking_text

log = logging.getLogger("awp.node")


class Engine(InboundStore, AgentVerbs):
    def __init__(self, identity: Identity, db_path: str, config: NodeConfig,
                 net: Network | None = None) -> None:
        self.identity = identity
        self.net: Network = net or NoNetwork()  # handed in: node imports no transport
        self.db_path = db_path
        self.config = config
        self.ids = IdGenerator()
        self.peers = PeerManager(self)
        self.pause_watch = PauseWatcher(self)  # notices that we slept, then redials
        self.business = Business(self)  # why links are kept; the board adds its own
        self.budgets = Budgets(config.limits)
        self.changes = Broadcaster()
        self.listen_addrs: list[Address] = []
        # A wildcard TCP listener's concrete addresses (the daemon hands in the
        # transport's lister): what hello.addrs and invites advertise.
        self.expand: Callable[[Address], list[str]] | None = None
        self.invites = Invites(self)
        self.rotation: Rotations | None = None  # key rotation (the daemon hands in our chain)
        self.operators: Operators | None = None  # operator keys (also in ``extensions``)
        self.keylinks: Any = None  # key links, node/keylinks.py (also in ``extensions``)
        self.shares: list[str] | None = None
        self.started_at = now_ms()
        self._listeners: list[Any] = []
        # Our line id -> (the peer it was sent to, set when that peer acks it).
        # An ack counts only from that peer: ids are guessable, so another
        # peer's ack for the same id must complete nothing.
        self._ack_waiters: dict[str, tuple[str, trio.Event]] = {}
        self._recent_acks: dict[tuple[str, str], None] = {}  # (peer, id)
        # When recent inbound lines were committed (CLOCK_MONOTONIC ns), so a
        # bench on the same host can measure one-way latency (GET /v1/timings).
        self.commit_stamps: dict[str, int] = {}
        self._local = threading.local()
        self._nursery: trio.Nursery | None = None
        self.writer: Writer
        self.extensions: list[Extension] = []  # presence, board, mirror, serving
        self._takers: list[Extension] = []  # those of them that take lines (_line_takers)
        self._takers_n = -1  # len(extensions) when _takers was made (they are only appended)
        self.waiting = 0  # local API calls blocked in wait (activity reporting)
        self.mirror: Any = None  # the conversation-sharing extension, when loaded
        self.intake: Intake | None = None  # lone inbound lines acked from a journal
        # When the agent last acted through awp (Unix ms) and through what
        # (hook, send, mcp, ...); kept by awp.daemon.api_agent for presence/web.
        self.activity: dict[str, Any] = {"at": 0, "source": ""}
        self.blobs_dir = os.path.join(os.path.dirname(os.path.abspath(db_path)), "blobs")

    # -- life -----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        conn = await trio.to_thread.run_sync(open_store, self.db_path)
        floor = IdFloor(self.ids, os.path.dirname(os.path.abspath(self.db_path)))
        await trio.to_thread.run_sync(floor.load, conn)
        self.intake = await trio.to_thread.run_sync(
            Intake.start, os.path.dirname(os.path.abspath(self.db_path)), conn)
        await trio.to_thread.run_sync(usage.settle, conn)
        self.budgets.load_stored(await trio.to_thread.run_sync(usage.load, conn))
        self.writer = Writer(conn, policy=floor,
                             checkpointer=Checkpointer(lambda: connect(self.db_path)))
        self.writer.start()
        try:
            await self._drop_unreadable()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.peers.bind(nursery)
                nursery.start_soon(self._sweeper)
                nursery.start_soon(self.writer.keep_synced)
                nursery.start_soon(self._blob_expiry)
                nursery.start_soon(self.business.run)
                nursery.start_soon(self.pause_watch.run)
                # A restart redials every peer it has business with, former
                # neighbours included, at once: no backoff, no dial-back grace.
                if self.rotation is not None:  # owed records are business: before the redials
                    await self.rotation.start()
                kept = await self.read(lambda c: self.business.peers(c, now_ms()))
                for key, why in sorted(kept.items()):
                    log.info("redialing %s at start (%s)", key[:18], why)
                    self.peers.ensure_loop(key)
                for ext in self.extensions:
                    self.spawn(ext.on_start)
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                for lst in self._listeners:
                    try:
                        await lst.aclose()
                    except Exception:
                        pass
                await self.writer.stop()
                if self.intake is not None:
                    self.intake.close()
                try:  # autocommit: the writer thread is gone
                    await trio.to_thread.run_sync(floor.release, conn)
                except sqlite3.Error as e:
                    log.warning("could not drop the id reservation: %s", e)

    def spawn(self, make: Callable[[], Any]) -> None:
        """Start background work (an async call) that must not die with a connection."""
        async def run() -> None:
            try:
                await make()
            except Exception:
                log.exception("background task failed")

        assert self._nursery is not None
        self._nursery.start_soon(run)

    async def _blob_expiry(self) -> None:
        """Drop blobs no msg named within ``unclaimed_blob_ttl``, and give their bytes back."""
        ttl = self.config.limits.unclaimed_blob_ttl
        every = min(60.0, max(0.2, ttl / 4))

        def job(c: sqlite3.Connection, cutoff: int) -> list[tuple[str, int]]:
            freed = usage.expire_unclaimed(c, self.blobs_dir, cutoff)
            # Whatever a failed job counted in memory, the table is the truth.
            self.budgets.load_stored(usage.load(c))
            return freed

        while True:
            await trio.sleep(every)
            cutoff = now_ms() - int(ttl * 1000)
            try:
                freed = await self.writer.run(lambda c, cut=cutoff: job(c, cut))
            except Exception as e:
                log.error("unclaimed blob expiry failed: %s", e)
                continue
            if freed:
                log.info("dropped %d blobs no message named within %gs (%d bytes)",
                         len(freed), ttl, sum(n for _k, n in freed))

    async def _drop_unreadable(self) -> None:
        """Before any peer is dialed: see :func:`ops.drop_unreadable`."""
        try:
            for peer, ident in await self.writer.run(ops.drop_unreadable):
                log.error("dropped line %s queued for %s: an older awp wrote NaN or an"
                          " infinity into it, which no peer can read", ident, peer[:18])
        except Exception as e:  # a failing store: the connections will say so too
            log.error("checking the outbox for unreadable lines failed: %s", e)

    async def _sweeper(self) -> None:
        while True:
            cutoff = now_ms() - int(self.config.outbox_ttl * 1000)
            try:
                n = await self.writer.run(lambda c, cut=cutoff: ops.sweep_outbox(c, cut))
                if n:
                    log.info("dropped %d unacked lines older than the outbox retention", n)
                await self.writer.run(lambda c, t=now_ms(): (grantstore.prune(c, t),
                                                             invitestore.prune(c, t)))
            except Exception as e:
                log.error("outbox sweep failed: %s", e)
            await trio.sleep(60)

    # -- store access ----------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = connect(self.db_path)
        return c

    async def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run a read-only query function on a worker thread's connection."""
        return await trio.to_thread.run_sync(lambda: fn(self._reader()))

    def read_sync(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        return fn(self._reader())

    async def fetch_outbox(self, key: str, after: int) -> list:
        return await self.read(lambda c: ops.fetch_outbox(c, key, after))

    async def resume_seen(self, key: str) -> dict[str, str]:
        since = now_ms() - int(self.config.outbox_ttl * 1000)
        return await self.read(lambda c: ops.resume_seen(c, key, since))

    async def business_with(self, key: str) -> str:
        """Why the link to ``key`` is kept (a kind of business), or "" (see :mod:`.business`)."""
        return await self.read(lambda c: self.business.reason(c, key, now_ms()))

    async def dial_addresses(self, key: str) -> list[tuple[str, str]]:
        rows = await self.read(lambda c: ops.ranked_addresses(c, key))
        return [(r["addr"], r["source"]) for r in rows]

    # -- listening and dialing -------------------------------------------------------

    async def listen(self, addr: Address) -> Address:
        lst = await self.net.listen(addr, allow_plaintext=self.config.allow_plaintext)
        self._listeners.append(lst)
        assert self._nursery is not None
        await self._nursery.start(lst.serve, self.handle_inbound)
        self.listen_addrs.append(lst.bound)
        return lst.bound

    async def handle_inbound(self, stream: trio.abc.HalfCloseableStream) -> None:
        conn = Connection(self, stream, outbound=False, desc=self.net.peer_description(stream))
        if not self.budgets.open_inbound(conn):
            await conn.turn_away(f"too many connections ({self.config.limits.connections}"
                                 " open; limits.connections)")
            return
        await conn.run()

    def advertised(self) -> str | None:
        adv = self.config.advertise
        if adv is not None:
            return None if adv.strip().lower() in ("", "none") else adv
        for a in sorted(self.listen_addrs, key=lambda a: a.kind != "tailcat"):
            if ep := a.endpoint():
                return ep
        return None

    def local_hello(self, outbound: bool) -> LocalHello:
        return LocalHello(
            name=self.config.name, caps=list(self.config.caps), about=self.config.about,
            addr=self.advertised(), shares=self.shares, addrs=hello_addrs(self),
        )

    async def dial_and_run(self, addr: str, *, expect_key: str | None = None,
                           background: bool = True, timeout: float | None = None,
                           check_peer: Callable[[str], str] | None = None,
                           auth_extra: Callable[[bytes, bytes], dict] | None = None,
                           ) -> Connection:
        """Dial ``addr``, run the connection in the background, and return it
        once the peer has resumed (the dialer's definition of established).
        ``timeout`` replaces the configured dial timeout (``awp connect --timeout``).

        With ``expect_key``, a peer whose hello names another key is dropped
        before our auth ("key mismatch"); ``check_peer`` replaces that check
        (the endpoint race of :mod:`.dialer`), ``auth_extra`` adds to our
        auth (an invite's proof).  Cancelled, it closes what it opened."""
        try:
            target = parse_address(addr)
            stream = await self.net.dial(
                target, timeout=timeout or self.config.dial_timeout,
                allow_plaintext=self.config.allow_plaintext,
            )
        except (AddressError, Exception) as e:
            if expect_key:
                await self._address_error(expect_key, addr, str(e))
            raise DialError(str(e), waking=looks_waking(e)) from None
        conn = Connection(self, stream, outbound=True, dialed=addr)
        if check_peer is None and expect_key:
            check_peer = key_check(addr, expect_key)
        conn.hs.check_peer, conn.hs.expect = check_peer, expect_key or ""
        conn.hs.auth_extra = auth_extra
        assert self._nursery is not None
        self._nursery.start_soon(conn.run)
        try:
            with trio.move_on_after(self.config.handshake_timeout + 1):
                async with trio.open_nursery() as n:
                    async def until(ev: trio.Event) -> None:
                        await ev.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(until, conn.peer_resumed)
                    n.start_soon(until, conn.closed)
        except BaseException:
            if not conn.peer_resumed.is_set():
                conn.close("dial cancelled")
            raise
        if not conn.peer_resumed.is_set() or conn.closed.is_set() and not conn.peer_key:
            conn.close("no resume from peer")
            other = self.peers.active(conn.peer_key) if conn.peer_key else None
            if other is not None and other is not conn:
                # Lost a simultaneous-open tie-break: the peer is connected.
                return other
            reason = conn.failure or conn.close_reason or "handshake did not complete"
            if expect_key:
                await self._address_error(expect_key, addr, reason)
            # An err after the key's own hello is its policy, not this endpoint's fault.
            # Ended before the peer's hello, and not by a refusal or our deadline
            # (those set ``failure``): a platform that accepted and dropped the
            # stream while the sandbox wakes.
            waking = (not conn.hs.peer and not conn.failure
                      and looks_waking_text(conn.close_reason))
            raise DialError(reason, refused=bool(conn.hs.peer_key)
                            and reason.startswith("peer refused"), waking=waking)
        return conn

    async def _address_error(self, key: str, addr: str, error: str) -> None:
        now = now_ms()
        try:
            await self.writer.run(lambda c: ops.address_result(c, key, addr, now, error))
        except Exception:
            pass

    async def connect(self, addr: str, timeout: float | None = None
                      ) -> tuple[Connection | None, str]:
        """Connect to an address, remembering it as the peer's best source.

        Returns ``(connection, peer_key)``; the connection is ``None`` when the
        peer was already connected through this address.  Either way a park
        (``bye``) ends: the user wants this link.
        """
        known = await self.read(
            lambda c: c.execute("SELECT peer FROM addresses WHERE addr = ?", (addr,)).fetchall()
        )
        for (key,) in known:
            if self.peers.active(key):
                await self.business.unpark(key)
                return None, key
        conn = await self.dial_and_run(addr, timeout=timeout)
        now = now_ms()
        await self.writer.run(lambda c: ops.add_address(c, conn.peer_key, addr, "connect", now))
        return conn, conn.peer_key  # (the new connection ended any park)

    # -- connection callbacks ---------------------------------------------------------

    def current_key(self, key: str) -> str:  # the key ``key`` rotated to, as far as we know
        return self.rotation.current(key) if self.rotation is not None else key

    async def took_rotation(self, conn: Connection) -> str:  # "" or why its records are refused
        return await self.rotation.take(conn) if self.rotation is not None else ""

    async def admission(self, conn: Connection) -> str:
        """Empty string to admit; otherwise the reason for ``err auth`` (node/admission.py)."""
        return await admit(self, conn)

    async def serve_side(self, conn: Connection, rest: bytes) -> None:
        """Hand an admitted side connection to the extension serving its name."""
        name = conn.hs.peer.get("side")
        for ext in self.extensions:
            if name in ext.sides:
                return await ext.serve_side(conn, rest)
        await conn.refuse(errors.UNSUPPORTED, f"no side connection named {str(name)[:40]!r} here")

    def audiences(self) -> frozenset[str]:
        """Grant audiences that count here besides our key: the operator certifying us."""
        return self.operators.audiences(now_ms()) if self.operators is not None else frozenset()

    def bind_handshake(self, hs: Handshake) -> None:
        """The parts of a handshake that rotation and operator keys decide."""
        if self.rotation is not None:
            self.rotation.bind(hs)  # retired keys, our records
        if self.operators is not None:
            self.operators.bind(hs)  # our certificate, the revocations we hold
        if self.keylinks is not None:
            self.keylinks.bind(hs)  # the key links we carry

    async def on_connection_established(self, conn: Connection) -> None:
        now = now_ms()
        hello = conn.hs.peer
        addr = hello.get("addr")
        try:
            dialback = str(parse_address(addr)) if isinstance(addr, str) and addr else ""
        except AddressError:
            dialback = ""

        def job(c: sqlite3.Connection) -> tuple[dict, list[dict]]:
            prev = ops.record_hello(c, conn.peer_key, hello, now)
            if prev["parked"]:  # a new connection ends a bye: the link is kept again
                ops.set_parked(c, conn.peer_key, False)
            if dialback and not conn.outbound:
                ops.add_address(c, conn.peer_key, dialback, "hello", now)
            if conn.outbound and conn.dialed:
                ops.add_address(c, conn.peer_key, conn.dialed, "hello", now)
                ops.address_result(c, conn.peer_key, conn.dialed, now)
            store_hello_endpoints(c, conn, now)
            return prev, [ev for ext in self.extensions
                          for ev in ext.stored_hello(c, conn, prev, now)]

        prev, events = await self.writer.run(job)
        for ev in events:
            self.changes.publish(ev)
        if conn.hs.peer_grants:
            await self.writer.run(
                lambda c: self.store_grants(c, conn, conn.hs.peer_grants, now_ms()))
        for ext in self.extensions:
            await ext.on_established(conn, prev)
        log.info("connected %s %s (%s)", "to" if conn.outbound else "from",
                 conn.peer_name, conn.peer_key)
        self.changes.publish({"kind": "peer", "peer": conn.peer_key, "up": True})

    async def on_connection_closed(self, conn: Connection) -> None:
        if conn.peer_key:
            self.peers.detach(conn)
            if conn.established.is_set():
                # when the link was last alive: whether to keep it warm, and
                # (after a restart) who our neighbours were
                try:
                    await self.writer.run(
                        lambda c, t=now_ms(): links.touch(c, [conn.peer_key], t))
                except Exception as e:
                    log.error("marking the link to %s closed failed: %s", conn.peer_key[:18], e)
                log.info("disconnected %s: %s", conn.peer_name or conn.peer_key,
                         conn.close_reason)
                self.changes.publish({"kind": "peer", "peer": conn.peer_key, "up": False})

    async def fill_chunk(self, template: str) -> bytes:
        """A queued chunk line with its data read from our copy of the file."""
        line = json.loads(template)
        path = os.path.join(self.blobs_dir, "out", blobstore.safe_name(line.get("ref", "")))
        offset = int(line.get("n", 0)) * blobstore.CHUNK

        def read() -> bytes:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    return f.read(blobstore.CHUNK)
            except OSError as e:
                log.error("cannot read %s for a queued chunk: %s", path, e)
                return b""

        data = await trio.to_thread.run_sync(read)
        return (template[:-1] + ',"data":"' + b64std(data) + '"}\n').encode("utf-8")

    def on_inbound_committed(self, conn: Connection, line: dict, seq: object,
                             committed_ns: int = 0) -> None:
        self.commit_stamps[line["id"]] = committed_ns or time.perf_counter_ns()
        if len(self.commit_stamps) > 4096:
            for old in list(self.commit_stamps)[:2048]:
                del self.commit_stamps[old]
        if seq:
            self.changes.publish({"kind": line["t"], "peer": conn.peer_key,
                                  "th": line.get("th") or "", "seq": seq})

    def ack_received(self, key: str, ident: str) -> None:
        """Peer ``key`` acked ``ident``: wake whoever waits, if the line went to it."""
        waiter = self._ack_waiters.get(ident)
        if waiter is not None and waiter[0] == key:
            del self._ack_waiters[ident]
            waiter[1].set()
        # Remember recent acks: a waiter may ask after the ack arrived but
        # before our own bookkeeping of it has committed.
        self._recent_acks[(key, ident)] = None
        if len(self._recent_acks) > 10_000:
            for old in list(self._recent_acks)[:5_000]:
                del self._recent_acks[old]

    def on_acked(self, key: str, ids: list[str]) -> None:
        for i in ids:
            self.ack_received(key, i)
        self.changes.publish({"kind": "ack", "peer": key, "ids": ids[:50]})

    def on_peer_resumed(self, conn: Connection) -> None:
        """Re-send the grants we issued to this peer (it dedups by hash)."""
        key, now = conn.peer_key, now_ms()

        async def resend() -> None:
            try:
                grants = await self.read(lambda c: grantstore.issued_to(c, key, now))
                if grants:
                    await conn.send_grants(grants)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

        if self._nursery is not None:
            self._nursery.start_soon(resend)

    def grants_to_present(self, peer: str) -> list[dict]:
        """Held grants for our auth (a quick read on the event loop thread)."""
        try:
            return self.read_sync(lambda c: grantstore.to_present(
                c, peer, now_ms(), self.config.limits, self.config.trust))
        except sqlite3.Error as e:
            log.error("cannot read grants to present: %s", e)
            return []

    async def on_peer_bye(self, conn: Connection, reason: str) -> None:
        key, name, now = conn.peer_key, conn.peer_name or conn.peer_key, now_ms()
        text = f"{name} said bye" + (f": {reason}" if reason else "")
        await self.writer.run(lambda c: (
            ops.set_parked(c, key, True, reason),
            ops.add_notice(c, self.ids, key, "bye", text, now),
        ))
        self.changes.publish({"kind": "notice", "peer": key})

    def on_peer_err(self, conn: Connection, line: dict) -> None:
        """Keep a peer's answer to one of our lines where the agent sees it.

        ``forbidden`` (a request without a grant), ``blob_refused`` and the
        other non-closing errors that name a line of ours are stored as an
        inbound record in that line's thread, so ``read`` shows them and a
        ``wait`` on the thread ends.
        """
        re, ident = line.get("re"), line.get("id")
        if isinstance(re, str) and re and isinstance(ident, str) and ident:
            key, now = conn.peer_key, now_ms()
            text = compact_json(line)

            def keep(c: sqlite3.Connection) -> int:
                row = c.execute("SELECT th FROM log WHERE peer = ? AND dir = 'out' AND id = ?",
                                (key, re)).fetchone()
                nbytes = usage.line_cost(len(text.encode("utf-8")))
                if row is None or self.budgets.over_stored(key, nbytes):
                    return 0
                n = c.execute(
                    "INSERT OR IGNORE INTO log (peer, dir, t, id, th, re, ts, at, line, read,"
                    " acked) VALUES (?, 'in', 'err', ?, ?, ?, ?, ?, ?, 0, 1)",
                    (key, ident, row[0], re, now, now, text)).rowcount
                if n:
                    self._charge(c, key, log=nbytes)
                return n

            self.writer.submit_nowait(
                keep, lambda n: n and self.changes.publish({"kind": "err", "peer": key}))
        ref = line.get("ref")
        if line.get("code") == "blob_refused" and isinstance(ref, str) and ref:
            key, now = conn.peer_key, now_ms()
            detail = line.get("detail") if isinstance(line.get("detail"), str) else ""
            self.writer.submit_nowait(lambda c: ops.blob_refused_out(c, key, ref, detail, now))
        for ext in self.extensions:
            ext.on_err(conn, line)

    def on_grants_stored(self, conn: Connection) -> None:
        """A grant line was stored: extensions that act on held grants look again."""
        for ext in self.extensions:
            ext.on_grants(conn)

    async def on_other_line(self, conn: Connection, line: dict, raw: bytes) -> None:
        for ext in self._line_takers():
            if await ext.on_line(conn, line, raw):
                return
        # Anything else is an unknown type: ignored, the connection stays up.

    def _line_takers(self) -> list[Extension]:
        """The extensions that take lines (override ``on_line``), in their order: every
        board post is one such line on each host, and asking those that never
        take one cost a coroutine each."""
        exts = self.extensions
        if len(exts) != self._takers_n:
            self._takers = [e for e in exts if type(e).on_line is not Extension.on_line]
            self._takers_n = len(exts)
        return self._takers

    def on_rtt(self, conn: Connection) -> None:
        pass
