"""The protocol engine: identity, store, connections and the agent's verbs.

One :class:`Engine` runs per home inside the daemon's trio loop.  Writes go
through the group-commit :class:`~awp.store.writer.Writer`; reads run in worker
threads on their own connections (WAL lets them run beside the writer).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

import trio

from ..store import blobs as blobstore
from ..store import grants as grantstore
from ..store import links, ops, usage
from ..store.db import connect, open_store
from ..store.idfloor import IdFloor
from ..store.writer import Writer
from ..wire import errors
from ..wire.address import Address, AddressError, parse_address
from ..wire.b64 import b64std
from ..wire.canonical import compact_json
from ..wire.framing import MAX_LINE
from ..wire.grants import make_grant
from ..wire.ids import IdGenerator, new_thread_id
from ..wire.keys import Identity, KeyError_, normalize_key
from ..wire.messages import default_subject
from ..wire.timefmt import format_ts, now_ms
from .budgets import Budgets
from .business import Business
from .config import NodeConfig
from .connection import Connection
from .events import Broadcaster
from .extension import Extension
from .handshake import LocalHello
from .intake import Intake
from .mime import guess_mime, sniff_file
from .network import Network, NoNetwork
from .peers import PeerManager

log = logging.getLogger("awp.node")


class DialError(Exception):
    """Could not reach or handshake with a peer."""


def _refusal_line(r: blobstore.Refusal) -> dict:
    line = {"t": "err", "code": "blob_refused", "ref": r.ref, "detail": r.detail}
    if r.re:
        line["re"] = r.re
    return line


class Engine:
    def __init__(self, identity: Identity, db_path: str, config: NodeConfig,
                 net: Network | None = None) -> None:
        self.identity = identity
        self.net: Network = net or NoNetwork()  # handed in: node imports no transport
        self.db_path = db_path
        self.config = config
        self.ids = IdGenerator()
        self.peers = PeerManager(self)
        self.business = Business(self)  # why links are kept; the board adds its own
        self.budgets = Budgets(config.limits)
        self.changes = Broadcaster()
        self.listen_addrs: list[Address] = []
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
        self.writer = Writer(conn, policy=floor)
        self.writer.start()
        try:
            await self._drop_unreadable()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.peers.bind(nursery)
                nursery.start_soon(self._sweeper)
                nursery.start_soon(self._blob_expiry)
                nursery.start_soon(self.business.run)
                # A restart redials every peer it has business with, former
                # neighbours included, at once: no backoff, no dial-back grace.
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

    def _charge(self, c: sqlite3.Connection, key: str, log: int = 0, blob: int = 0) -> None:
        """Writer thread: ``key`` made us store (or we freed) bytes; count them."""
        usage.add(c, key, log, blob)
        self.budgets.add_stored(key, log, blob)

    def _over_stored(self, c: sqlite3.Connection, conn: Connection, line: dict,
                     nbytes: int) -> dict | None:
        """Writer thread: the ``err quota`` for a content line over the stored budgets.

        Once one line is refused, every later one on the connection is too,
        so the resume point never passes a refused line and the sender's next
        connection replays them all in order.  A duplicate is acked as usual.
        """
        why = "an earlier line on this connection was refused" if conn.quota_refused else \
            self.budgets.over_stored(conn.peer_key, nbytes)
        if not why:
            return None
        ident = line.get("id")
        if line["t"] in ("msg", "state") and c.execute(
                "SELECT 1 FROM log WHERE peer = ? AND dir = 'in' AND id = ?",
                (conn.peer_key, ident)).fetchone():
            return None
        conn.quota_refused += 1
        self.budgets.refused["quota"] += 1
        err = {"t": "err", "code": errors.QUOTA,
               "detail": f"not stored: {why} is used up; send it again later"}
        if isinstance(ident, str):
            err["re"] = ident
        return err

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
                await self.writer.run(lambda c, t=now_ms(): grantstore.prune(c, t))
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
            if a.kind == "tcp" and a.host in ("0.0.0.0", "::", ""):
                continue
            return str(a)
        return None

    def local_hello(self, outbound: bool) -> LocalHello:
        return LocalHello(
            name=self.config.name, caps=list(self.config.caps), about=self.config.about,
            addr=self.advertised(), shares=self.shares,
        )

    async def dial_and_run(self, addr: str, *, expect_key: str | None = None,
                           background: bool = True, timeout: float | None = None) -> Connection:
        """Dial ``addr``, run the connection in the background, and return it
        once the peer has resumed (the dialer's definition of established).
        ``timeout`` replaces the configured dial timeout (``awp connect --timeout``)."""
        try:
            target = parse_address(addr)
            stream = await self.net.dial(
                target, timeout=timeout or self.config.dial_timeout,
                allow_plaintext=self.config.allow_plaintext,
            )
        except (AddressError, Exception) as e:
            if expect_key:
                await self._address_error(expect_key, addr, str(e))
            raise DialError(str(e)) from None
        conn = Connection(self, stream, outbound=True, dialed=addr)
        assert self._nursery is not None
        self._nursery.start_soon(conn.run)
        with trio.move_on_after(self.config.handshake_timeout + 1):
            async with trio.open_nursery() as n:
                async def until(ev: trio.Event) -> None:
                    await ev.wait()
                    n.cancel_scope.cancel()
                n.start_soon(until, conn.peer_resumed)
                n.start_soon(until, conn.closed)
        if not conn.peer_resumed.is_set() or conn.closed.is_set() and not conn.peer_key:
            conn.close("no resume from peer")
            other = self.peers.active(conn.peer_key) if conn.peer_key else None
            if other is not None and other is not conn:
                # Lost a simultaneous-open tie-break: the peer is connected.
                return other
            reason = conn.failure or conn.close_reason or "handshake did not complete"
            if expect_key:
                await self._address_error(expect_key, addr, reason)
            raise DialError(reason)
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

    async def admission(self, conn: Connection) -> str:
        """Empty string to admit; otherwise the reason for ``err auth``."""
        cfg = self.config
        if cfg.accept != "allowlist":
            log.info("admitted %s (%s) under policy any", conn.peer_name, conn.peer_key)
            return ""
        key = conn.peer_key
        if conn.outbound or key in cfg.allow or key in cfg.trust:
            return ""
        dialed = await self.read(lambda c: c.execute(
            "SELECT 1 FROM addresses WHERE peer = ? AND last_success > 0 LIMIT 1",
            (key,)).fetchone())
        if dialed:  # a key we reached ourselves before (dial-back, a restart)
            return ""
        presented = conn.hs.peer_grants
        if presented:
            await self.writer.run(lambda c: self.store_grants(c, conn, presented, now_ms()))
            if await self.read(lambda c: grantstore.honored(
                    c, key, self.identity.key, cfg.trust, now_ms())):
                return ""
        for ext in self.extensions:
            if await ext.admits(conn):
                return ""
        name = conn.peer_name or "a peer"
        now = now_ms()
        try:
            await self.writer.run(lambda c: (
                ops.ensure_peer(c, key, now),
                ops.add_notice(c, self.ids, key, "refused",
                               f"refused a connection from {name} ({key}): not on the allowlist",
                               now),
            ))
        except Exception:
            pass
        self.changes.publish({"kind": "notice", "peer": key})
        return "not on the allowlist"

    async def on_connection_established(self, conn: Connection) -> None:
        now = now_ms()
        hello = conn.hs.peer
        addr = hello.get("addr")
        try:
            dialback = str(parse_address(addr)) if isinstance(addr, str) and addr else ""
        except AddressError:
            dialback = ""

        def job(c: sqlite3.Connection) -> dict:
            prev = ops.record_hello(c, conn.peer_key, hello, now)
            if prev["parked"]:  # a new connection ends a bye: the link is kept again
                ops.set_parked(c, conn.peer_key, False)
            if dialback and not conn.outbound:
                ops.add_address(c, conn.peer_key, dialback, "hello", now)
            if conn.outbound and conn.dialed:
                ops.add_address(c, conn.peer_key, conn.dialed, "hello", now)
                ops.address_result(c, conn.peer_key, conn.dialed, now)
            return prev

        prev = await self.writer.run(job)
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

    def store_inbound_run(self, c: sqlite3.Connection, conn: Connection,
                          texts: list[tuple[dict, str]], now: int) -> list:
        """Runs on the writer thread: store a run of content lines, counted at once."""
        owed = [0]
        out = [self.store_inbound(c, conn, line, text, now, owed) for line, text in texts]
        if owed[0]:
            usage.add(c, conn.peer_key, log=owed[0])
        return out

    def store_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, text: str,
                      now: int, owed: list[int] | None = None) -> tuple[int, list[dict]]:
        """Runs on the writer thread: store a content line.

        Returns its log seq (0 for a duplicate) and the lines to send after the
        ack (refusals of the blobs it names, a ``forbidden``...).
        """
        replies: list = []
        if self.intake is not None:
            self.intake.store_unstored(c)
        th = line.get("th") or ""
        nbytes = usage.line_cost(len(text.encode("utf-8")), bool(th) and c.execute(
            "SELECT 1 FROM seen WHERE peer = ? AND th = ?", (conn.peer_key, th)).fetchone() is None)
        refusal = self._over_stored(c, conn, line, nbytes)
        if refusal is not None:
            return -1, [refusal]
        if line["t"] in ("mirror", "private"):
            # Extension lines: kept by their extension, never in the agent's inbox.
            seen = c.execute("SELECT last_id FROM seen WHERE peer = ? AND th = ?",
                             (conn.peer_key, th)).fetchone()
            if th:
                ops.note_seen(c, conn.peer_key, th, line["id"], now)
            if seen is not None and line["id"] <= seen[0]:
                return 0, replies
            seq = 1
        else:
            seq = ops.store_inbound(c, conn.peer_key, line, text, now)
        if not seq:
            return seq, replies
        if owed is None:
            self._charge(c, conn.peer_key, log=nbytes)
        else:  # the caller adds them to the table once for the run
            owed[0] += nbytes
            self.budgets.add_stored(conn.peer_key, log=nbytes)
        if line["t"] == "msg":
            for r in blobstore.msg_named_blobs(c, self.blobs_dir, conn.peer_key, line,
                                               self.config.blob_limit, now):
                replies.append(_refusal_line(r))
        for ext in self.extensions:
            replies.extend(ext.stored_inbound(c, conn, line, seq, now))
        return seq, replies

    def store_chunk(self, c: sqlite3.Connection, conn: Connection, line: dict,
                    now: int) -> list[dict]:
        """Runs on the writer thread: apply a chunk; returns lines to send."""
        key, ref = conn.peer_key, line.get("ref")
        before = c.execute("SELECT * FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                           (key, ref)).fetchone() if isinstance(ref, str) else None
        data = line.get("data")
        size = len(data) * 3 // 4 if isinstance(data, str) else 0
        refused = self._over_stored(c, conn, line, size + usage.BLOB_ROW)
        if refused is not None:
            return [refused]
        live = before is None or before["status"] == "pending"
        lim = self.config.limits.peer_unclaimed_blob_bytes
        if (live and isinstance(ref, str) and ref and (before is None or not before["msg_id"])
                and usage.unclaimed(c, key) + size > lim):
            self.budgets.refused["unclaimed"] += 1
            blobstore._refuse(c, self.blobs_dir, key, ref, "too many unclaimed blob bytes", now)
            refusal, done = blobstore.Refusal(
                ref, f"no message names it yet and {lim} unclaimed bytes are held"
                " (peer_unclaimed_blob_bytes)"), None
        else:
            refusal, done = blobstore.chunk_in(c, self.blobs_dir, key, line,
                                               self.config.blob_limit, now)
        if isinstance(ref, str):
            after = c.execute("SELECT * FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                              (key, ref)).fetchone()
            delta = usage.blob_cost(after) - usage.blob_cost(before)
            if delta:
                self._charge(c, key, blob=delta)
        th = line.get("th") if isinstance(line.get("th"), str) else ""
        if th and isinstance(line.get("id"), str) and refusal is None:
            ops.note_seen(c, conn.peer_key, th, line["id"], now)
        if done:
            name = os.path.basename(done)
            ops.add_notice(c, self.ids, conn.peer_key, "blob",
                           f"file {name} from {conn.peer_name or conn.peer_key} is complete: "
                           f"{done}", now, th=th, data={"path": done})
        return [_refusal_line(refusal)] if refusal else []

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

    def store_grants(self, c: sqlite3.Connection, conn: Connection, grants: list,
                     now: int) -> int:
        """Runs on the writer thread: keep the valid grants a peer sent.

        An auth line may list any number of grants; we look at no more than we
        would present ourselves (``present_count``).
        """
        n = 0
        lim = self.config.limits
        for g in grants[:lim.present_count]:
            if grantstore.receive(c, g, self.identity.key, conn.peer_key, now, lim):
                n += 1
        return n

    def store_introduce(self, c: sqlite3.Connection, conn: Connection, line: dict, text: str,
                        now: int) -> int:
        """Runs on the writer thread: an introduction to another peer.

        Keeps its grant (meant for the introduced peer), remembers the peer's
        key, name and address, and shows the agent how to connect.
        """
        peer = line.get("peer")
        th = line.get("th") if isinstance(line.get("th"), str) else ""
        ident = line.get("id")
        if not isinstance(peer, dict) or not isinstance(ident, str):
            return 0
        try:
            key = normalize_key(peer.get("key"))
        except (KeyError_, TypeError):
            return 0
        nbytes = usage.line_cost(len(text.encode("utf-8")), bool(th))
        if self._over_stored(c, conn, line, nbytes) is not None:
            return 0  # not seen: it comes again with the sender's next connection
        if th:
            ops.note_seen(c, conn.peer_key, th, ident, now)
        cur = c.execute(
            "INSERT OR IGNORE INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
            " VALUES (?, 'in', 'introduce', ?, ?, '', ?, ?, ?, 0, 1)",
            (conn.peer_key, ident, th, now, now, text))
        if cur.rowcount:
            self._charge(c, conn.peer_key, log=nbytes)
        if cur.rowcount == 0 or key == self.identity.key:
            return 0
        grantstore.receive(c, line.get("grant"), self.identity.key, conn.peer_key, now,
                           self.config.limits)
        ops.ensure_peer(c, key, now)
        # The introduced name is not the peer's name: only the peer itself says
        # that (hello). It stays in the logged line, where `connect NAME` finds
        # it as a last resort, and never shadows or crowds a name.
        addr = peer.get("address")
        if isinstance(addr, str) and addr:
            try:
                ops.add_address(c, key, str(parse_address(addr)), "introduce", now)
            except AddressError:
                pass
        return 1

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
        for ext in self.extensions:
            if await ext.on_line(conn, line, raw):
                return
        # Anything else is an unknown type: ignored, the connection stays up.

    def on_rtt(self, conn: Connection) -> None:
        pass

    # -- the agent's verbs ------------------------------------------------------------

    def queued_elsewhere(self, key: str) -> None:
        """A line for ``key`` was queued outside commit order: rescan or redial."""
        conn = self.peers.active(key)
        if conn is not None:
            conn.rescan()
        else:
            self.peers.kick(key)

    def hand_over(self, key: str, result: tuple, pushed: dict | None = None,
                  committed: bool = True) -> None:
        """Writer hook, in commit order: give a queued line to ``key``'s connection.

        Our own sends call it twice (see :meth:`_send_hooks`): possibly before
        the commit, while its fsync runs, and again after it; ``pushed`` records
        which connection already has the line so it is handed over once.  A
        redial is only started after the commit, when the line can be found.
        """
        for host, copy in result[4] if len(result) > 4 else ():
            self.hand_over(host, copy, pushed, committed)
        ident = result[1]["id"]
        if ident not in self._ack_waiters and (key, ident) not in self._recent_acks:
            if len(self._ack_waiters) > 10_000:  # lines whose ack nobody awaits
                for stale in list(self._ack_waiters)[:5_000]:
                    del self._ack_waiters[stale]
            self._ack_waiters[ident] = (key, trio.Event())
        conn = self.peers.active(key)
        if conn is not None:
            how, to = pushed.get(key, ("", None)) if pushed is not None else ("", None)
            if to is not conn:
                for seq, t, text in result[3]:
                    conn.push(seq, t, text)
                conn.push(result[0], result[1]["t"], result[2])
                if pushed is not None:
                    pushed[key] = ("pushed", conn)
            elif how == "written":  # written before it was stored: now it has its place
                conn.sent_first(result[0])
        elif committed:
            self.peers.kick(key)

    async def _send_first(self, key: str, build: Callable[[str, str], dict], now: int,
                          pushed: dict) -> tuple[str, dict, str] | None:
        """With the store held: write the line now if the connection is idle.

        Returns the id drawn for it with the line and its text, for the job
        to store as they are (None if nothing was drawn).
        """
        conn = self.peers.active(key)
        if conn is None or not conn.caught_up():
            return None
        ident = self.ids.next()
        line = build(ident, format_ts(now))
        first = (ident, line, compact_json(line))
        if len(first[2].encode("utf-8")) > MAX_LINE or not self.writer.may_send_early():
            return first
        if await conn.send_first(first[2]):
            pushed[key] = ("written", conn)
        return first

    def _send_hooks(self, key: str) -> dict:
        """Writer hooks for a line we queue: early hand-over, then the committed one.

        ``pushed`` (also returned) maps a peer to how (``"pushed"`` to its send
        queue or ``"written"`` before it was stored) and to which connection
        the line was already handed.
        """
        pushed: dict = {}
        return {"early": lambda r: self.hand_over(key, r, pushed, committed=False),
                "on_commit": lambda r: self.hand_over(key, r, pushed), "pushed": pushed}

    def _mirror_copies(self, c: sqlite3.Connection, key: str, line: dict, now: int) -> list:
        return self.mirror.queue_copies(c, key, line, "out", now) if self.mirror else []

    async def stage_files(self, files: list[dict]) -> list[dict]:
        """Copy files to send into the home, so later edits cannot tear them.

        Each item is ``{"path", "name"?, "mime"?}``; returns blob descriptions.
        Refuses (``BlobTooLarge``) before anything is queued.
        """
        staged = []
        out_dir = os.path.join(self.blobs_dir, "out")
        for f in files:
            path = f["path"]
            st = await trio.to_thread.run_sync(os.stat, path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{path} is not a regular file")
            if st.st_size > self.config.blob_limit:
                raise blobstore.BlobTooLarge(path, st.st_size, self.config.blob_limit)
            ref = "b_" + self.ids.next()
            dest = os.path.join(out_dir, blobstore.safe_name(ref))
            size = await trio.to_thread.run_sync(blobstore.copy_private, path, dest,
                                                 self.config.blob_limit)
            name = f.get("name") or os.path.basename(path)
            mime = f.get("mime") or guess_mime(name, await trio.to_thread.run_sync(
                sniff_file, dest))
            staged.append({"ref": ref, "name": name, "mime": mime, "size": size, "path": dest})
        return staged

    async def send_msg(
        self, key: str, parts: list[dict], *, th: str | None = None,
        subject: str | None = None, re: str | None = None, files: list[dict] | None = None,
        also: Callable[[sqlite3.Connection], None] | None = None,
    ) -> dict:
        """Queue a msg (and its files' chunks) in one transaction.

        ``also`` runs inside that transaction: what must be true exactly when
        the msg is queued (e.g. a served request's row closing).
        """
        new_thread = not th
        th = th or new_thread_id()
        now = now_ms()
        staged = await self.stage_files(files) if files else []
        parts = list(parts) + [
            {"k": "blob", "ref": b["ref"], "name": b["name"], "mime": b["mime"], "size": b["size"]}
            for b in staged]
        subj = subject or (default_subject(parts) if new_thread else "")

        def build(ident: str, ts: str) -> dict:
            line: dict = {"t": "msg", "id": ident, "ts": ts, "th": th}
            if re:
                line["re"] = re
            if subj and (new_thread or subject):
                line["subject"] = subj
            line["parts"] = parts
            return line

        def job(c: sqlite3.Connection, first: tuple | None) -> tuple:
            ops.ensure_peer(c, key, now)
            chunks = [row for b in staged
                      for row in ops.queue_chunks(c, self.ids, key, th, b, now)]
            res = ops.queue_line(c, self.ids, key, build, now=now, max_bytes=MAX_LINE,
                                 first=first)
            for b in staged:
                c.execute("UPDATE blobs SET msg_id = ? WHERE peer = ? AND dir = 'out' AND ref = ?",
                          (res[1]["id"], key, b["ref"]))
            ops.touch_thread_out(c, key, th, now, subject=subj)
            if also is not None:
                also(c)
            return (*res, chunks, self._mirror_copies(c, key, res[1], now))

        return await self._queue_own(key, build, job, now, direct=not staged)

    async def send_state(self, key: str, th: str, state: str, note: str = "") -> dict:
        now = now_ms()

        def build(ident: str, ts: str) -> dict:
            line = {"t": "state", "id": ident, "ts": ts, "th": th, "state": state}
            if note:
                line["note"] = note
            return line

        def job(c: sqlite3.Connection, first: tuple | None) -> tuple:
            ops.ensure_peer(c, key, now)
            res = ops.queue_line(c, self.ids, key, build, now=now, max_bytes=MAX_LINE,
                                 first=first)
            ops.touch_thread_out(c, key, th, now, state=state, note=note)
            return (*res, [], self._mirror_copies(c, key, res[1], now))

        return await self._queue_own(key, build, job, now)

    async def _queue_own(self, key: str, build: Callable[[str, str], dict],
                         job: Callable[[sqlite3.Connection, tuple | None], tuple], now: int,
                         direct: bool = True) -> dict:
        """Queue a msg or state of ours and get it to the peer as soon as it may go.

        The fast way, when the store is quiet and the connection has written
        everything queued before: hold the store (no other line can be queued
        meanwhile, so this id is next in outbox order too), write the line,
        then store it; the id reservation and disk checks of ``may_send_early``
        make that as safe as sending after the commit.  Otherwise the line is
        queued and handed over by the writer's hooks.
        """
        hooks = self._send_hooks(key)
        on_commit, early = hooks["on_commit"], hooks["early"]
        if not self.writer.hold():
            res = await self.writer.submit_nowait(lambda c: job(c, None), on_commit,
                                                  early=early).wait()
        else:
            with trio.CancelScope(shield=True):  # the store is held: finish what we start
                try:
                    first = await self._send_first(key, build, now, hooks["pushed"]) \
                        if direct else None
                except BaseException:
                    self.writer.release()
                    raise
                res = await self.writer.run_held(lambda c: job(c, first), on_commit,
                                                 early=early)
        self.changes.publish({"kind": "sent", "peer": key, "th": res[1]["th"], "seq": res[0]})
        return {"id": res[1]["id"], "th": res[1]["th"], "line": res[1]}

    async def wait_ack(self, ident: str, timeout: float, peer: str = "") -> bool:
        """True once the peer our line ``ident`` went to acked it (or had already).

        Lines queued by this process have an event from the moment they were
        committed, so the common case needs no query; ``peer``, when the
        caller knows it, saves one when the ack came first.
        """
        if peer and (peer, ident) in self._recent_acks:
            return True
        waiter = self._ack_waiters.get(ident)
        if waiter is None:
            row = await self.read(lambda c: c.execute(
                "SELECT peer, acked FROM log WHERE dir = 'out' AND id = ?", (ident,)).fetchone())
            if row is None or row[1] or (row[0], ident) in self._recent_acks:
                return row is not None
            waiter = self._ack_waiters.setdefault(ident, (row[0], trio.Event()))
        ev = waiter[1]
        with trio.move_on_after(max(0.0, timeout)):
            await ev.wait()
            return True
        return False

    async def bye(self, key: str, reason: str = "") -> bool:
        """Park the peer and say bye if connected; returns whether a bye went out
        (not when the connection stalled or broke: it is dropped instead)."""
        await self.writer.run(lambda c: ops.set_parked(c, key, True, reason))
        conn = self.peers.active(key)
        if conn is None:
            return False
        return await conn.send_bye(reason)

    async def grant(self, key: str, caps: list[str], ttl: float,
                    aud: str | None = None) -> dict:
        """Sign a grant for ``key``, keep it, and hand it over now if connected."""
        now = now_ms()
        g = make_grant(self.identity, key, caps, now + int(ttl * 1000), aud=aud)
        h = await self.writer.run(lambda c: (ops.ensure_peer(c, key, now),
                                             grantstore.put(c, g, "issued", now))[1])
        conn = self.peers.active(key)
        delivered = False
        if conn is not None and conn.established.is_set():
            try:
                await conn.send_grants([g])
                delivered = True
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        return {"hash": h, "grant": g, "delivered": delivered}

    async def introduce(self, to: str, peer: str, caps: list[str], ttl: float,
                        th: str | None = None) -> dict:
        """Send ``to`` the key and address of ``peer`` with a grant bound to ``peer``."""
        now = now_ms()

        def info(c: sqlite3.Connection) -> dict:
            row = c.execute("SELECT name FROM peers WHERE key = ?", (peer,)).fetchone()
            addrs = ops.ranked_addresses(c, peer)
            return {"key": peer, "name": row[0] if row else "",
                    "address": addrs[0]["addr"] if addrs else ""}

        about = await self.read(info)
        g = make_grant(self.identity, to, caps, now + int(ttl * 1000), aud=peer)
        th = th or new_thread_id()
        peer_info = {k: v for k, v in about.items() if v}

        def build(ident: str, ts: str) -> dict:
            return {"t": "introduce", "id": ident, "ts": ts, "th": th, "peer": peer_info,
                    "grant": g}

        def job(c: sqlite3.Connection) -> tuple:
            ops.ensure_peer(c, to, now)
            grantstore.put(c, g, "issued", now)
            res = ops.queue_line(c, self.ids, to, build, now=now, max_bytes=MAX_LINE)
            ops.touch_thread_out(c, to, th, now, subject=f"introduction to {about['name'] or peer}")
            return (*res, [])

        res = await self.writer.run_with_hook(job, lambda r: self.hand_over(to, r))
        return {"id": res[1]["id"], "th": th, "grant": g, "peer": peer_info}

    async def private(self, key: str, th: str) -> None:
        """Keep a thread out of sharing, on both sides, and withdraw hosts' copies."""
        now = now_ms()

        def build(ident: str, ts: str) -> dict:
            return {"t": "private", "id": ident, "ts": ts, "th": th}

        def job(c: sqlite3.Connection) -> tuple:
            c.execute("UPDATE threads SET private = 1 WHERE peer = ? AND th = ?", (key, th))
            res = ops.queue_line(c, self.ids, key, build, log=False, now=now)
            copies = self.mirror.withdraw(c, th, now, key) if self.mirror else []
            return (*res, [], copies)

        await self.writer.run_with_hook(job, lambda r: self.hand_over(key, r))

    async def set_shares(self, hosts: list[str]) -> None:
        """Replace the list of hosts we mirror to (remembered)."""
        self.shares = list(dict.fromkeys(hosts)) or None
        await self.writer.run(lambda c: ops.set_meta(c, "remember.share_with",
                                                      json.dumps(self.shares or [])))

