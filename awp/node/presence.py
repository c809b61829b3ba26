"""Presence gossip (cap ``presence``): who is out there and what they are doing.

Each node that opts in publishes a signed summary about 2 s after anything
changes and as a 60 s heartbeat, only over connections that already exist.
Every node, publishing or not, verifies what it receives, keeps the newest
document per origin, and forwards a document it had not seen to its other
presence-speaking peers, up to 8 hops.  On connect, both sides send what they
know (anti-entropy).  Documents older than 10 minutes are forgotten.

When documents leave is decided per link by :mod:`awp.node.presence_sched`
(changes at once, heartbeats gathered); a peer that lists ``presence-batch``
gets all of a link's due documents in one line, an older peer one line each.

What the agent is doing (``active``, ``waiting``) moves with nearly every
local API call, so it is not news to rush through the network: a change of
activity alone signs no document of its own; the next heartbeat (at most
:data:`ACTIVITY_S` later) carries it, and relays pass it on as a heartbeat,
in each link's next line (:func:`publish_reason`).  Board records are not presence either: storing
one does not wake the publisher.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import socket
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import trio

from .. import __version__
from ..store import ops, queries
from ..wire.presence import MAX_HOPS, check_doc, line_entries, presence_line, sign_doc
from ..wire.timefmt import format_ts, now_ms, parse_ts
from .extension import Extension
from .presence_sched import PresenceSchedule

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.presence")
RELAYED_RECORDS = 4  # our newest rotation records in our presence document

DEBOUNCE = 2.0
HEARTBEAT = 60.0
MAX_AGE_MS = 10 * 60 * 1000
FUTURE_MS = 5 * 60 * 1000
MAX_ORIGINS = 1000
MAX_PEERS = 64
MAX_THREADS = 64
ACTIVITY_GRAIN_MS = 30_000
ACTIVITY_S = 60.0  # a change of activity alone is signed at most this often: with the heartbeat
ACTIVITY_FIELDS = ("active", "waiting")
QUIET_KINDS = ("presence", "ack", "board")  # engine events that never change our document
BATCH_CAP = "presence-batch"
MAX_BATCH_BYTES = 512 * 1024  # keep a batch line well under the 1 MiB limit


def clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def speaks_presence(conn: Connection) -> bool:
    return "presence" in conn.peer_caps


class Presence(Extension):
    """Engine extension for the ``presence`` message type."""

    def __init__(self, engine: Engine, publish: bool,
                 describe: Callable[[], dict] | None = None) -> None:
        self.engine = engine
        self.publish = publish
        self.describe = describe or (lambda: {})
        self.own_raw: str | None = None
        self.sent_lines = 0  # presence lines written, for the bench
        self.signed = 0  # documents of our own signed, for the bench
        self.lines_to: dict[str, int] = {}  # per peer key
        self._changed = trio.Event()
        self._schedule = PresenceSchedule()
        self._scheduled = trio.Event()
        self._digests: dict[str, str] = {}  # origin -> content digest last stored

    # -- publishing ------------------------------------------------------------------

    async def on_start(self) -> None:
        async with trio.open_nursery() as n:
            n.start_soon(self._expiry_loop)
            n.start_soon(self._flush_loop)
            if self.publish:
                n.start_soon(self._watch_changes)
                n.start_soon(self._publish_loop)

    async def _watch_changes(self) -> None:
        with self.engine.changes.subscribe(ignore=QUIET_KINDS) as events:
            async for _ev in events:
                self._changed.set()

    async def _publish_loop(self) -> None:
        last_digest, last_activity, last_sent = "", "", -math.inf
        while True:
            # Woken by a change, or to look at activity (which raises no event).
            with trio.move_on_after(ACTIVITY_S):
                await self._changed.wait()
                # let a burst of changes settle into one document
                while True:
                    self._changed = trio.Event()
                    with trio.move_on_after(DEBOUNCE) as settle:
                        await self._changed.wait()
                    if settle.cancelled_caught:
                        break
            self._changed = trio.Event()
            if not self._presence_conns():
                continue
            try:
                doc = await self.engine.read(self._local_doc)
            except Exception as e:
                log.error("presence: %s", e)
                continue
            digest, activity = content_digest(doc), activity_digest(doc)
            now = trio.current_time()
            why = publish_reason(digest != last_digest, activity != last_activity,
                                 now - last_sent)
            if not why:
                continue
            await self.emit(doc, changed=why == "changed")
            last_digest, last_activity, last_sent = digest, activity, now

    def _local_doc(self, c: sqlite3.Connection) -> dict:
        eng = self.engine
        extra = self.describe()
        doc: dict = {"origin": eng.identity.key, "name": eng.config.name}
        if eng.config.about:
            doc["about"] = clip(eng.config.about, 200)
        doc.update({"version": __version__, "harness": extra.get("harness", ""),
                    "model": extra.get("model", ""),
                    "host": clip(socket.gethostname(), 100)})
        if eng.shares:
            doc["shares"] = list(eng.shares)
        rot = eng.rotation
        if rot is not None and rot.chain:  # hosts we never met learn where we moved
            doc["rotation"] = rot.chain[-RELAYED_RECORDS:]
        act = getattr(eng, "activity", None) or {}
        at = int(act.get("at") or 0)
        if at:
            doc["active"] = format_ts(at - at % ACTIVITY_GRAIN_MS)
        doc["waiting"] = bool(getattr(eng, "waiting", 0))
        peers = []
        for p in queries.peer_rows(c):
            if not p["name"] and not p["last_seen"] and not p["addresses"]:
                continue  # a key we only granted to or heard of
            if len(peers) == MAX_PEERS:
                break
            conn = eng.peers.active(p["key"])
            entry: dict = {"key": p["key"], "name": p["name"] or (p["aliases"] or [""])[0],
                           "up": conn is not None}
            if conn is not None and conn.rtt_ms is not None:
                entry["rtt"] = max(1, int(conn.rtt_ms))
            peers.append(entry)
        doc["peers"] = peers
        doc["threads"] = [
            {"th": t["th"], "peer": t["peer"], "subject": clip(t["subject"], 120),
             "mine": t["mine"], "theirs": t["theirs"], "updated": format_ts(t["updated"]),
             "unread": t["unread"]}
            for t in queries.thread_rows(c, limit=MAX_THREADS)]
        counts = queries.counts(c)
        doc["outbox"] = counts["queued"]
        doc["unread"] = counts["unread"]
        return doc

    async def emit(self, doc: dict, changed: bool = True) -> None:
        """Sign our document and queue it for every connected presence peer."""
        seq = await self.engine.writer.run(self._next_seq)
        doc = dict(doc, seq=seq, ts=format_ts(now_ms()))
        raw = sign_doc(self.engine.identity, doc)
        self.own_raw = raw
        self.signed += 1
        self._queue(self.engine.identity.key, raw, 0, 0.0, changed)

    def _next_seq(self, c: sqlite3.Connection) -> int:
        """Larger than any seq we used, across restarts and clock steps."""
        prev = int(ops.get_meta(c, "presence_seq", "0") or 0)
        nxt = max(prev + 1, now_ms())
        ops.set_meta(c, "presence_seq", str(nxt))
        return nxt

    def _presence_conns(self, *, except_keys: tuple[str, ...] = ()) -> list[Connection]:
        out = []
        for key, slot in self.engine.peers.slots.items():
            conn = slot.conn
            if (conn is not None and conn.established.is_set() and not conn.closed.is_set()
                    and speaks_presence(conn) and key not in except_keys):
                out.append(conn)
        return out

    def _queue(self, origin: str, raw: str, hops: int, age_s: float, changed: bool, *,
               except_keys: tuple[str, ...] = (), only: Connection | None = None) -> None:
        """Hand a document to the schedule of every presence link (or just ``only``)."""
        now = trio.current_time()
        conns = [only] if only is not None else self._presence_conns(except_keys=except_keys)
        for conn in conns:
            self._schedule.add(conn, origin, raw, hops, now=now, age_s=age_s, changed=changed)
        if conns:
            self._scheduled.set()

    async def _flush_loop(self) -> None:
        """Write each link's documents when the schedule says they are due.

        Each write runs in its own task, so a peer that stops reading holds up
        its own link only.
        """
        async with trio.open_nursery() as writers:
            while True:
                due = self._schedule.next_due()
                with trio.move_on_at(due if due is not None else math.inf):
                    await self._scheduled.wait()
                self._scheduled = trio.Event()
                for conn, items in self._schedule.take_due(trio.current_time()):
                    conn = cast("Connection", conn)
                    if conn.closed.is_set():
                        self._schedule.drop(conn)
                        continue
                    writers.start_soon(self._send, conn,
                                       [(hops, raw) for _origin, raw, hops in items])

    async def _send(self, conn: Connection, items: list[tuple[int, str]]) -> None:
        """Write documents to one peer: batched if it speaks ``presence-batch``."""
        try:
            await self._write(conn, items)
        except Exception:
            log.exception("presence: writing to %s failed", conn.peer_key[:18])

    async def _write(self, conn: Connection, items: list[tuple[int, str]]) -> None:
        if BATCH_CAP in conn.peer_caps:
            lines, size = [[]], 0  # type: list[list[tuple[int, str]]], int
            for hops, raw in items:
                if lines[-1] and size + len(raw) > MAX_BATCH_BYTES:
                    lines.append([])
                    size = 0
                lines[-1].append((hops, raw))
                size += len(raw) + 20
        else:
            lines = [[item] for item in items]
        for group in lines:
            (hops, raw), more = group[0], group[1:]
            data = presence_line(self.engine.ids.next(), format_ts(now_ms()), hops, raw, more)
            try:
                await conn.send_raw_line(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            self.sent_lines += 1
            self.lines_to[conn.peer_key] = self.lines_to.get(conn.peer_key, 0) + 1

    # -- receiving ---------------------------------------------------------------------

    async def on_line(self, conn: Connection, line: dict, raw: bytes) -> bool:
        if line.get("t") != "presence":
            return False
        now = now_ms()
        docs = []
        for hops, raw_doc, doc in line_entries(raw.decode("utf-8"), line, MAX_ORIGINS):
            why = check_doc(doc, len(raw_doc.encode("utf-8")))
            if why:
                log.info("presence from %s dropped: %s", conn.peer_key[:18], why)
                continue
            assert isinstance(doc, dict)
            if doc["origin"] == self.engine.identity.key:
                continue
            ts = parse_ts(doc["ts"])
            if now - ts > MAX_AGE_MS or ts - now > FUTURE_MS:
                continue
            docs.append((hops, raw_doc, doc, ts))
        if not docs:
            return True
        stored = await self.engine.writer.run(lambda c: [
            self._store_one(c, doc["origin"], doc, raw_doc, ts, now, conn.peer_key, hops)
            for hops, raw_doc, doc, ts in docs])
        for (hops, raw_doc, doc, ts), how in zip(docs, stored, strict=True):
            if not how:
                continue  # already had it: this is what ends the gossip
            origin = doc["origin"]
            self.engine.changes.publish({"kind": "presence", "origin": origin,
                                         "joined": how == "new"})
            rot = self.engine.rotation
            if rot is not None and "rotation" in doc:
                why = await rot.take_relayed(doc["rotation"], origin)
                if why:
                    log.info("presence of %s: %s", origin[:18], why)
            digest = content_digest(doc)
            changed = self._digests.get(origin) != digest
            self._digests[origin] = digest
            if len(self._digests) > MAX_ORIGINS * 2:
                self._digests.pop(next(iter(self._digests)))
            if hops + 1 < MAX_HOPS:
                self._queue(origin, raw_doc, hops + 1, max(0.0, (now - ts) / 1000), changed,
                            except_keys=(conn.peer_key, origin))
        return True

    @classmethod
    def _store_one(cls, c: sqlite3.Connection, origin: str, doc: dict, raw: str, ts: int,
                   now: int, via: str, hops: int) -> str:
        """:meth:`_store` in a savepoint of its own: an entry the database will
        not take costs that entry, not the rest of its batch."""
        c.execute("SAVEPOINT presence_doc")
        try:
            how = cls._store(c, origin, doc, raw, ts, now, via, hops)
        except (sqlite3.Error, OverflowError, ValueError) as e:
            c.execute("ROLLBACK TO presence_doc")
            log.info("presence from %s not stored: %s", via[:18], e)
            how = ""
        c.execute("RELEASE presence_doc")
        return how

    @staticmethod
    def _store(c: sqlite3.Connection, origin: str, doc: dict, raw: str, ts: int, now: int,
               via: str, hops: int) -> str:
        row = c.execute("SELECT seq FROM presence WHERE origin = ?", (origin,)).fetchone()
        if row is not None and row[0] >= doc["seq"]:
            return ""
        name = doc.get("name") if isinstance(doc.get("name"), str) else ""
        c.execute(
            "INSERT INTO presence (origin, name, seq, doc, doc_ts, received, via, hops)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET"
            " name = excluded.name, seq = excluded.seq, doc = excluded.doc,"
            " doc_ts = excluded.doc_ts, received = excluded.received, via = excluded.via,"
            " hops = excluded.hops", (origin, name[:200], doc["seq"], raw, ts, now, via, hops))
        if row is None:
            over = c.execute("SELECT count(*) FROM presence").fetchone()[0] - MAX_ORIGINS
            if over > 0:
                c.execute("DELETE FROM presence WHERE origin IN (SELECT origin FROM presence"
                          " ORDER BY received LIMIT ?)", (over,))
        return "new" if row is None else "newer"

    async def on_established(self, conn: Connection, prev: dict) -> None:
        """Anti-entropy: our own document and every fresh one we hold, in one go."""
        if not speaks_presence(conn):
            return
        if self.publish and self.own_raw:
            self._queue(self.engine.identity.key, self.own_raw, 0, 0.0, True, only=conn)
        now = now_ms()
        rows = await self.engine.read(lambda c: c.execute(
            "SELECT origin, doc, hops, doc_ts FROM presence WHERE doc_ts >= ?",
            (now - MAX_AGE_MS,)).fetchall())
        for origin, raw, hops, doc_ts in rows:
            if origin != conn.peer_key and hops + 1 < MAX_HOPS:
                self._queue(origin, raw, hops + 1, max(0.0, (now - doc_ts) / 1000), True,
                            only=conn)
        if self.publish:
            self._changed.set()

    async def _expiry_loop(self) -> None:
        while True:
            await trio.sleep(30)
            cutoff = now_ms() - MAX_AGE_MS
            gone = await self.engine.writer.run(lambda c, cut=cutoff: expire(c, cut))
            for origin in gone:
                self.engine.changes.publish({"kind": "presence", "origin": origin, "left": True})


def publish_reason(changed: bool, activity_changed: bool, since_last_s: float) -> str:
    """Whether to sign a new document now, and how it travels ("" for not now).

    ``changed``: what the document says changed (it is rushed through the
    network).  ``activity_changed``: only ``active``/``waiting`` moved; that
    waits until :data:`ACTIVITY_S` have passed since the last document (the
    heartbeat's period), and travels like a heartbeat.  Otherwise a
    heartbeat every :data:`HEARTBEAT` seconds.
    """
    if changed:
        return "changed"
    if since_last_s >= min(ACTIVITY_S, HEARTBEAT) - 1:
        return "activity" if activity_changed else "heartbeat"
    return ""


def activity_digest(doc: dict) -> str:
    """What the agent is doing, as far as the document says (see :data:`ACTIVITY_FIELDS`)."""
    return json.dumps([doc.get(k) for k in ACTIVITY_FIELDS])


def content_digest(doc: dict) -> str:
    """What a document says, ignoring what every heartbeat may change.

    That is ``seq``, ``ts`` and ``sig``; the link round-trip times, which
    wobble by a millisecond from one ping to the next; and the agent's
    activity, which moves with every local API call: a new RTT or activity
    alone is news for the next heartbeat, not a change to rush through the
    network.
    """
    body = {k: v for k, v in doc.items() if k not in ("seq", "ts", "sig", *ACTIVITY_FIELDS)}
    if isinstance(body.get("peers"), list):
        body["peers"] = [{k: v for k, v in p.items() if k != "rtt"} if isinstance(p, dict) else p
                         for p in body["peers"]]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def expire(c: sqlite3.Connection, cutoff_ms: int) -> list[str]:
    """Forget documents older than the cutoff; returns the origins forgotten."""
    return [r[0] for r in c.execute(
        "DELETE FROM presence WHERE doc_ts < ? RETURNING origin", (cutoff_ms,))]

