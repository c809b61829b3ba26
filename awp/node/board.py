"""The board (cap ``board``): topics replicated between subscribing hosts.

The pure rules live in :mod:`awp.board` and :mod:`awp.store.board`; this
module moves records between hosts (SPEC.md section 14):

* on connect, each side lists the topics it subscribes to (``board-sub``)
  with the grant that lets it read each;
* for every topic both sides hold, the topic documents are exchanged and the
  side with the smaller key opens a digest exchange (``board-digest``,
  ``board-want``, ``board-posts``) that moves only what one side lacks;
* a record stored for the first time is forwarded at once to every other
  subscribed peer allowed to read it, however far it has come; one already
  held ends there (records are named by hash, so dedup is what stops the
  flood, and no hop bound is needed: a live record reaches every subscriber
  of a connected network in one pass).

Every link has its own sender task and a byte-bounded queue, so a slow peer
never holds up reading from anyone.  When a link's queue is full, records are
dropped for that link and the topic is marked for a fresh digest exchange
once the queue drains: anti-entropy repairs what a live push lost.  The same
exchange runs on every link every :data:`RESYNC_S` seconds, which also
offers again records a peer refused as dated too far ahead.

Where each record, head and digest goes is decided by the replication rules
of :mod:`awp.board.replica`, which hold no I/O: this module feeds them what
happens (a link up or down, a ``board-sub``, what the store kept, a head, a
digest step, the time) and carries out the actions they answer
(:meth:`Board.act`), with the store, which stays the one place that
commits, and the links.  The work-queue arbiter is
:mod:`awp.node.board_queue`.

Why one module: it is the replication state machine of one host, and its
parts share that state: the links and their subscriptions, the topics we
hold, the heads we have heard and the documents in force.  A subscription
decides which links a record goes to, a head decides when a digest is asked
again, a document decides who may read: split, each part would reach into
the others' dictionaries.  What stands on its own has left: a link's send
queue (:mod:`awp.node.board_sendq`), the owner's stamps
(:mod:`awp.node.board_seq`), business with peers
(:mod:`awp.node.board_links`), the pure rules (:mod:`awp.board`) and every
query (:mod:`awp.store.board`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from ..base.cpu import ON as CPU_ON
from ..base.cpu import STEPS, clock
from ..board import heads as bheads
from ..board import perms
from ..board import replica_actions as A
from ..board import sync as bsync
from ..board.replica import HEAD_HOPS, HEAD_S, HOPS_CAP, MAX_SUBS, MAX_WANT, Action, Replica
from ..board.retention import DAY_MS
from ..store import board as sb
from ..store import board_conflicts as conflicts
from ..store import board_heads
from ..store.board_held import HeldCache
from ..wire.board import (
    CAP,
    FUTURE_MS,
    MAX_MEMBERS,
    BoardError,
    Policy,
    Record,
    check_head,
    check_policy,
    former_keys,
    is_owner,
    learn_rotation,
    make_head,
    make_topic,
    owned_by,
    parse_topic,
    sign_record,
)
from ..wire.boardline import recs_of
from ..wire.numbers import is_count
from ..wire.presence import raw_member
from ..wire.timefmt import format_ts, now_ms, parse_ts
from . import board_links
from .board_sendq import MAX_LINE, BoardLink, Records
from .board_seq import Sequencer
from .extension import Extension

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.board")

RELAXED_RECORDS = 32  # relayed records stored inline without an fsync, at most, per line
MAX_RECS = 4096  # records read from one board-posts line
MAX_MERGED_LINES = 64  # board-posts lines of one read taken with the first (_on_posts)
SWEEP_S = 60.0
# HOPS_CAP, MAX_SUBS, MAX_WANT, RESYNC_S, HEAD_S, GAP_WAIT_S, HEAD_HOPS: the rules'
# bounds, in awp.board.replica


_QUOTED: dict[str, str] = {}  # topic -> its JSON string, for the lines that carry records


class TooMany(BoardError):
    """Subscribing would pass ``limits.board_subscriptions``."""


def speaks_board(conn: Connection) -> bool:
    return CAP in conn.peer_caps


class Board(Extension):
    """Engine extension for the ``board`` lines."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.me = engine.identity.key
        # Our own past keys name our older topics: known before anything is read.
        self.my_chain = list(engine.rotation.chain) if engine.rotation is not None else []
        for r in self.my_chain:
            learn_rotation(str(r.get("old")), str(r.get("new")))
        # The replication decisions, without I/O (awp.board.replica): this class carries
        # out the actions it answers, with the store and the links.
        self.core = Replica(self.me, now=0.0)
        self.subs = self.core.subs  # topics we subscribe to
        self.links: dict[str, BoardLink] = {}  # peer key -> its current link
        self.policies: dict[str, Policy | None] = {}
        self.stats = dict.fromkeys(("lines_in", "bytes_in", "lines_out", "bytes_out",
                                    "records_in", "records_refused", "records_out",
                                    "asks_refused", "held_back", "claims_refused",
                                    "head_gaps", "seq_holes", "seq_gaps", "submits_refused",
                                    "equivocations", "heads_stale", "heads_old",
                                    "records_unstamped", "records_refused_by_owner"), 0)
        self.queue = None  # the work-queue part (awp.node.board_queue), set by the daemon
        # Local streams that take posts straight from a take's hint (awp.daemon.board_feed):
        # while there are any, a take says which new posts they follow are plain (no
        # stored record names them): this says which posts they follow.
        self.followed: Callable[[Record], bool] | None = None
        self._nursery: trio.Nursery | None = None
        self._started = trio.Event()
        self._last_ts = 0  # of the last record we signed
        board_links.register(engine)  # topics and queue work are business with peers
        self.heads = self.core.heads  # topic -> the owner's newest signed head we hold
        self.head_via = self.core.head_via  # topic -> the peer that brought that head
        # Topics we subscribe to whose owner told us (``board-none``) it has no
        # such topic: a post waiting for the document fails at once.
        self.none: set[str] = set()
        self.seq = Sequencer(self)  # the owner stamps others' records (awp.node.board_seq)
        # What we hold of each topic, brought up to date by what changed: a head, a gap
        # check and a digest cost what arrived since the last look, not the whole topic.
        self.held = HeldCache()

    # -- life ------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.subs.update(await self.engine.read(sb.subscriptions))
        self.core.start(trio.current_time())
        kept = await self.engine.read(board_heads.load)
        self.heads.update({t: h for t, h in kept.items() if t in self.subs
                           and not owned_by(t, self.me)})
        await self.seq.start()
        await self._resign_after_rotation()
        self.held.drop()  # the start may restamp rows in place: read every topic afresh
        async with trio.open_nursery() as n:
            self._nursery = n
            self._started.set()
            n.start_soon(self.seq.run)
            n.start_soon(self.seq.stamper)
            n.start_soon(self._sweep_loop)
            n.start_soon(self._head_loop)
            if self.queue is not None:
                n.start_soon(self.queue.run)

    async def _sweep_loop(self) -> None:
        """Retention moves with the clock (``keep_days``); links resync now and then."""
        while True:
            await trio.sleep(SWEEP_S)
            try:
                await self._sweep()
            except Exception:
                log.exception("board: the retention sweep failed")
            await self.act(self.core.tick(trio.current_time()))

    async def _head_loop(self) -> None:
        """Sign a head for each of our topics that changed, and for each of them at
        least every ``limits.board_head_every`` (silence then means something to a
        subscriber), send them to their readers, and judge the heads we follow."""
        limits = self.engine.config.limits
        while True:
            every = limits.board_head_every
            await trio.sleep(min(HEAD_S, every) if every > 0 else HEAD_S)
            for topic in self.core.heads_due(trio.current_time(), every):
                try:
                    await self._sign_head(topic)
                except Exception:
                    log.exception("board: signing the head of %s failed", topic)
            await self._judge_staleness()

    def stale(self, topic: str) -> dict | None:
        """``{"since", "via", "heads"}`` when the owner's newest head we hold is
        ``limits.board_stale_heads`` heads overdue, else None (:meth:`Replica.stale`)."""
        return self.core.stale(topic, now_ms(), self.engine.config.limits.board_stale_heads,
                               _head_ms)

    async def _judge_staleness(self) -> None:
        """Say so once when a topic goes stale, and ask every peer for it then and every
        few heads' worth after (:meth:`Replica.judge_staleness`)."""
        await self.act(self.core.judge_staleness(
            trio.current_time(), now_ms(), self.engine.config.limits.board_stale_heads,
            _head_ms))

    async def _sign_head(self, topic: str) -> None:
        pol = await self.policy(topic)
        if pol is None:
            return
        floor = now_ms() - pol.keep_days * DAY_MS
        ts = max(now_ms(), self._last_ts + 1)
        self._last_ts = ts

        def job(c: sqlite3.Connection) -> tuple[dict, int]:
            body = self.held.using(c, topic, lambda h: bsync.opening(h, floor, ts, 0))
            return body, sb.top_seq(c, topic)

        body, top = await self.engine.read(job)
        every = int(self.engine.config.limits.board_head_every * 1000)
        head = make_head(self.engine.identity, topic, ts, pol.seq, floor, body["ranges"], top,
                         every)
        await self.act(self.core.signed_head(topic, head))

    async def _on_head(self, link: BoardLink, line: dict) -> None:
        """A head from the owner, relayed: keep the newest, pass it on, and look for gaps.

        A range where we hold fewer records than the owner, or a newer
        document than ours, means a relay withheld something (or it is on
        its way): every peer that lists the topic is asked again, so another
        path fills the gap (the rules: :meth:`Replica.on_head`).
        """
        hops = line.get("hops")
        if not isinstance(hops, int) or isinstance(hops, bool) or not 0 <= hops < HEAD_HOPS:
            return
        doc = line.get("doc")
        topic = doc.get("topic") if isinstance(doc, dict) else None
        if isinstance(topic, str) and self.heads.get(topic) == doc:
            return  # the head we hold, again from another path: checked once, not news
        head = check_head(doc)
        acts = self.core.on_head(link.conn.peer_key, head, hops, newer=_newer)
        if acts and acts[0][0] == A.STAT:
            held = self.heads[head["topic"]]
            log.info("board: an older head of %s from %s ignored (%s; we hold %s)",
                     head["topic"], link.conn.peer_key[:18], head["ts"], held["ts"])
        await self.act(acts)

    async def _gap_wait(self, topic: str, delay: float) -> None:
        await trio.sleep(delay)
        await self.act(self.core.gap_due(topic))

    async def _check_gap(self, topic: str, first: dict) -> None:
        """After the exchanges under way have had time to finish, ask every peer again
        if the copy still lacks what the head held *when the check began* names.

        Comparing with the newest head instead would count the records signed
        since (still on their way, not withheld) and ask every peer again on
        each head under steady traffic.  One check a topic at a time: heads that
        come meanwhile are looked at by the next check.
        """
        def job(c: sqlite3.Connection) -> bool:
            pol = sb.policy(c, topic)
            floor = now_ms() - (pol.keep_days if pol else 30) * DAY_MS
            return self.held.using(c, topic, lambda h: bheads.still_lacking(
                first, h, pol.seq if pol else None, floor))

        await self.act(self.core.gap_checked(topic, first, await self.engine.read(job)))

    def gap(self, c: sqlite3.Connection, topic: str) -> bheads.Gap | None:
        """How our copy of ``topic`` differs from the owner's newest head (None: no head)."""
        head = self.heads.get(topic)
        if head is None:
            return None
        pol = sb.policy(c, topic)
        floor = now_ms() - (pol.keep_days if pol else 30) * DAY_MS
        return self.held.using(c, topic, lambda h: bheads.compare(
            head, h, pol.seq if pol else None, floor))

    async def _sweep(self) -> None:
        """Deferred asks become digests; retention catches up with the clock."""
        for link in list(self.links.values()):
            if link.deferred:
                link.resync |= link.deferred
                link.deferred = set()
                link.wake.set()
        for topic in sorted(self.subs):
            pol = await self.policy(topic)
            if pol is not None:
                await self.engine.writer.run(
                    lambda c, t=topic, p=pol: sb.enforce_retention(c, t, p, now_ms()))

    async def policy(self, topic: str) -> Policy | None:
        if topic not in self.policies:
            self.policies[topic] = await self.engine.read(lambda c: sb.policy(c, topic))
        return self.policies[topic]

    # -- links -----------------------------------------------------------------------

    async def on_established(self, conn: Connection, prev: object = None) -> None:
        if speaks_board(conn):
            await self._link_for(conn)

    async def _link_for(self, conn: Connection) -> BoardLink:
        """The link of ``conn``, made (and our board-sub queued) on first use.

        The peer's first board lines may come before the engine has told us
        the connection is up, so reading makes the link as well.
        """
        link = self.links.get(conn.peer_key)
        if link is not None and link.conn is conn:
            return link
        await self._started.wait()
        link = self.links.get(conn.peer_key)
        if link is not None and link.conn is conn:
            return link
        link = BoardLink(conn, self.engine.config.limits.board_link_bytes, self.stats)
        self.links[conn.peer_key] = link
        assert self._nursery is not None
        self._nursery.start_soon(self._sender, link)
        acts = self.core.link_up(conn.peer_key)
        link.subs = self.core.peers[conn.peer_key].subs  # one dict: the rules' and the link's
        await self.act(acts)
        return link

    async def _sender(self, link: BoardLink) -> None:
        conn = link.conn
        async with trio.open_nursery() as n:
            async def watch() -> None:
                await conn.closed.wait()
                n.cancel_scope.cancel()

            n.start_soon(watch)
            try:
                # The link is made as the engine learns of the connection, just
                # before our resume is sent: nothing of ours goes ahead of it.
                await conn.established.wait()
                while True:
                    if link.partial is not None:
                        await link.finish_partial()
                    while link.queue:
                        item = link.queue.popleft()
                        if isinstance(item, Records):
                            link.size -= item.size
                            data = self._posts_line(item.topic, item.raws, item.hops)
                        else:
                            link.size -= len(item)
                            data = item
                        await conn.send_raw_line(data)
                        self.stats["lines_out"] += 1
                        self.stats["bytes_out"] += len(data)
                    if link.resync:
                        topics, link.resync = sorted(link.resync), set()
                        for topic in topics:
                            if topic in self.subs and await self._may_read(link, topic):
                                link.push(await self._opening(topic), topic)
                        continue
                    await link.wake.wait()
                    link.wake = trio.Event()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            except Exception:  # the store failed us: this link ends, the others go on
                log.exception("board: the link to %s failed", conn.peer_key[:18])
            finally:
                n.cancel_scope.cancel()
                link.drop_partial()
                if self.links.get(conn.peer_key) is link:
                    del self.links[conn.peer_key]
                    self.core.link_down(conn.peer_key)

    def line(self, t: str, body: str, ident: str = "") -> bytes:
        """A board line: the envelope, then ``body`` (JSON members, already encoded)."""
        ident = ident or self.engine.ids.next()
        head = f'{{"t":"{t}","id":"{ident}","ts":"{format_ts(now_ms())}"'
        return (head + ("," + body if body else "") + "}\n").encode("utf-8")

    async def _sub_line(self, topics: list[str], drop: list[str]) -> bytes:
        def q(c: sqlite3.Connection) -> list[dict]:
            out = []
            for t in topics[:MAX_SUBS]:
                entry: dict = {"topic": t}
                grant, via = sb.sub_authority(c, t)
                if grant is not None:
                    entry["grant"] = grant
                    if via is not None:
                        entry["via"] = via
                out.append(entry)
            return out

        entries = await self.engine.read(q)
        return self.line("board-sub", '"topics":' + json.dumps(entries, separators=(",", ":"))
                          + ',"drop":' + json.dumps(drop[:MAX_SUBS]))

    async def announce(self, topics: list[str], drop: list[str]) -> None:
        """Tell every board peer about subscriptions that changed."""
        await self.act([(A.SUB, list(self.links), topics, drop)])

    async def act(self, actions: Iterable[Action]) -> None:
        """Carry out the replica's actions (:mod:`awp.board.replica_actions`), in order."""
        for a in actions:
            await self._act(a)

    async def _act(self, a: Action) -> None:  # noqa: C901 - one branch an action
        name = a[0]
        if name == A.FORWARD:
            _, topic, raws, hops, keys = a
            await self._forward(topic, raws, hops, keys)
            return
        if name == A.STAT:
            self.stats[a[1]] += 1
            return
        if name == A.STALE:
            _, topic, st = a
            self.stats["heads_stale"] += 1
            log.warning("board: %s is stale via %s: no head from the owner for %d s"
                        " (%d heads' worth); asking every peer", topic,
                        st["via"][:18] or "?", (now_ms() - st["since"]) // 1000, st["heads"])
            return
        if name == A.KEEP_HEAD:
            head = a[1]
            # Kept for a restart only (a newer one comes every few seconds): the commit
            # is relaxed, inline and with no fsync, as a relayed record's.
            await self.engine.writer.run_relaxed(lambda c: board_heads.keep(c, head))
            self.seq.head(head["topic"], head)
            return
        if name == A.WAIT_GAP:
            if self._nursery is not None:
                self._nursery.start_soon(self._gap_wait, a[1], a[2])
            else:
                self.core.gap_due(a[1])
            return
        if name == A.CHECK_GAP:
            await self._check_gap(a[1], a[2])
            return
        if name == A.EXPLAINED:
            self.seq.explained(a[1], a[2])
            return
        if name == A.HEARD:
            _, key, topics, dropped = a
            if topics:
                self.seq.link_up()  # a path towards an owner our waiting records need
            await board_links.heard(self.engine, key, topics, dropped)
            return
        if name == A.SUB:
            _, keys, topics, drop = a
            for key in keys:
                link = self.links.get(key)
                if link is not None:
                    link.push(await self._sub_line(topics, drop))
            return
        if name == A.HEAD:
            _, topic, head, hops, keys = a
            text = json.dumps(head, separators=(",", ":"), ensure_ascii=False)
            for key in keys:
                link = self.links.get(key)
                if link is not None and await self._may_read(link, topic):
                    link.push(self.line("board-head", f'"hops":{hops},"doc":' + text))
            return
        if name == A.FORWARD_DOC:
            _, topic, raw, hops, keys = a
            for key in keys:
                link = self.links.get(key)
                if link is not None and self._may_see_doc(link, topic):
                    link.push(self.line("board-topic", f'"hops":{hops},"doc":' + raw))
            return
        link = self.links.get(a[1])
        if link is None:
            return
        if name == A.RESYNC:
            link.resync.update(a[2])
            link.wake.set()
        elif name == A.OPEN:
            link.push(await self._opening(a[2]), a[2])
        elif name == A.DOC:
            doc = await self.engine.read(lambda c: sb.topic_doc(c, a[2]))
            if doc is not None:
                link.push(self.line("board-topic", '"hops":0,"doc":' + doc), a[2])
        elif name == A.NONE:
            link.push(self.line("board-none", '"topic":' + json.dumps(a[2])))
        elif name == A.DIGEST:
            link.push(self._digest_line(a[2], a[3]), a[2])
        elif name == A.WANT:
            link.push(self.line("board-want", f'"topic":{json.dumps(a[2])},"ids":'
                                 + json.dumps(a[3])), a[2])

    async def _may_read(self, link: BoardLink, topic: str) -> bool:
        if topic not in link.subs:
            return False
        await self.policy(topic)
        return self._may_read_now(link, topic)

    def _may_read_now(self, link: BoardLink, topic: str) -> bool:
        """:meth:`_may_read` once the topic's policy is in memory."""
        if topic not in link.subs:
            return False
        grant, via = link.subs[topic]
        owner = topic.split("/", 1)[0]
        return perms.may_read(link.conn.peer_key, topic=topic, owner=owner,
                              policy=self.policies.get(topic), now_ms=now_ms(),
                              grant=grant, via=via)

    # -- receiving -------------------------------------------------------------------

    async def on_line(self, conn: Connection, line: dict, raw: bytes) -> bool:
        t = line.get("t")
        if not isinstance(t, str) or not t.startswith("board-"):
            return False
        if not speaks_board(conn) or conn.closed.is_set():
            return True  # only peers that announced board are heard
        link = await self._link_for(conn)
        self.stats["lines_in"] += 1
        self.stats["bytes_in"] += len(raw)
        try:
            if t == "board-sub":
                await self._on_sub(link, line)
            elif t == "board-topic":
                await self._on_topic(link, line, raw)
            elif t == "board-posts":
                await self._on_posts(link, line, raw)
            elif t == "board-digest":
                await self._on_digest(link, line)
            elif t == "board-want":
                await self._on_want(link, line)
            elif t == "board-head":
                await self._on_head(link, line)
            elif t == "board-none":
                self._on_none(link, line)
            elif t == "board-submit":
                await self.seq.on_submit(link, line, raw)
            elif t == "board-refused":
                await self.seq.on_refused(link, line)
            elif self.queue is not None:
                await self.queue.on_line(link, t, line)
        except (BoardError, ValueError, TypeError, KeyError) as e:
            log.info("board line from %s dropped: %s", conn.peer_key[:18], e)
        return True

    async def _on_sub(self, link: BoardLink, line: dict) -> None:
        topics, drop = line.get("topics"), line.get("drop")
        entries = []  # listed again too: a new grant may let the peer read now
        for e in topics[:MAX_SUBS] if isinstance(topics, list) else []:
            if not isinstance(e, dict):
                continue
            try:
                parse_topic(e.get("topic"))
            except BoardError:
                continue
            entries.append((e["topic"], e.get("grant"), e.get("via")))
        dropped = [t for t in (drop[:MAX_SUBS] if isinstance(drop, list) else [])
                   if isinstance(t, str)]
        for topic, _g, _v in entries:
            if topic in self.subs:
                await self.policy(topic)  # the rules below read it from memory
        key = link.conn.peer_key
        for a in self.core.on_sub(key, entries, dropped, full=link.full,
                                  may_read=lambda _k, t: self._may_read_now(link, t),
                                  may_see_doc=lambda _k, t: self._may_see_doc(link, t)):
            await self._act(a)

    def _on_none(self, link: BoardLink, line: dict) -> None:
        """The owner of a topic we subscribe to says it has no such topic.

        Believed only from the owner itself: a relay cannot know, and must
        not be able to make our posts fail.  The mark goes when we subscribe
        again or a document comes.
        """
        topic = line.get("topic")
        parse_topic(topic)
        if topic in self.subs and topic.split("/", 1)[0] == link.conn.peer_key:
            self.none.add(topic)
            self.engine.changes.publish({"kind": "board", "topic": topic, "rec": "none"})

    async def _on_topic(self, link: BoardLink, line: dict, raw: bytes) -> None:
        hops = line.get("hops")
        doc = raw_member(raw.decode("utf-8"), "doc")
        if doc is None or not is_count(hops):
            return
        hops = min(hops, HOPS_CAP)
        taken = await self.engine.writer.run(
            lambda c: sb.take(c, [doc], now_ms(), via=link.conn.peer_key, hops=hops))
        self._equivocated(taken, link.conn.peer_key)
        for rec in taken.new:
            # the document may be what we lacked to take anything: every link compares now
            await self._topic_changed(rec, hops, link.conn.peer_key)

    def _equivocated(self, taken: sb.Taken, via: str) -> None:
        """Say so, once a proof, when the owner signed two statements that cannot both
        be true: the topic's history may differ from host to host for good."""
        for topic, kind, ref in taken.conflicts:
            self.stats["equivocations"] += 1
            log.warning("board: the owner of %s equivocated: %s (%s %s; met via %s); both"
                        " signed statements are kept (awp topic show --json)", topic,
                        conflicts.WHAT.get(kind, kind), kind, ref[:32], via[:18] or "us")
            self.engine.changes.publish({"kind": "board", "topic": topic, "rec": "conflict"})

    async def _topic_changed(self, rec: Record, hops: int, via: str) -> None:
        """A newer document: it may let subscribers read (a new member), so compare again.

        Permissions travel in the document, so a host two hops from the
        owner learns it may read from the document itself, and its
        neighbours learn it from the same document: each link that lists
        the topic gets a fresh digest (the sender skips those that still
        may not read).
        """
        self.policies[rec.topic] = check_policy(rec.doc)
        self.none.discard(rec.topic)
        self.engine.changes.publish({"kind": "board", "topic": rec.topic, "rec": "topic"})
        await self.act(self.core.stored_doc(rec.topic, rec.raw, hops, via))

    def _may_see_doc(self, link: BoardLink, topic: str) -> bool:
        """Topic documents go to every subscriber that is not banned, reader or not.

        The document is the topic's public face (policy, title, who is revoked
        or banned): it is how a subscriber learns that it may not read yet, or
        no longer, and it lets every host judge posts by the same policy.
        """
        if topic not in link.subs:
            return False
        pol = self.policies.get(topic)
        return pol is None or link.conn.peer_key not in pol.banned

    async def _on_posts(self, link: BoardLink, line: dict, raw: bytes) -> None:
        """A ``board-posts`` line, and those right behind it in the same read.

        Records that arrive together are stored together: the lines of one
        read for one topic (and one ``hops``) make one take, so one
        transaction, and what was new leaves as one line per link.  A group
        stays within :data:`RELAXED_RECORDS` (unless one line is larger), so
        merging never moves relayed records off the inline relaxed commit.
        """
        more = link.conn.session.more_of("board-posts", MAX_MERGED_LINES)
        for _line, extra_raw in more:
            self.stats["lines_in"] += 1
            self.stats["bytes_in"] += len(extra_raw)
        group: list[tuple[str, object]] = []
        key: tuple[str, int] | None = None
        for ln, rw in [(line, raw), *more]:
            topic, hops = ln.get("topic"), ln.get("hops")
            if not isinstance(topic, str) or topic not in self.subs or not is_count(hops):
                continue
            recs = recs_of(ln, rw, MAX_RECS)
            if not recs:
                continue
            here = (topic, min(hops, HOPS_CAP))
            if group and (here != key or len(group) + len(recs) > RELAXED_RECORDS):
                await self._take_group(link, key, group)  # type: ignore[arg-type]
                group = []
            key = here
            group.extend(recs)
        if group:
            await self._take_group(link, key, group)  # type: ignore[arg-type]

    async def _take_group(self, link: BoardLink, key: tuple[str, int],
                          recs: list[tuple[str, object]]) -> None:
        topic, hops = key
        try:
            await self.take([r for r, _doc in recs], via=link.conn.peer_key, hops=hops,
                            owner=owned_by(topic, self.me),
                            docs=[doc for _r, doc in recs])
        except (BoardError, ValueError, TypeError, KeyError) as e:  # as on_line: the group goes
            log.info("board records from %s dropped: %s", link.conn.peer_key[:18], e)

    async def take(self, raws: list[str] | list[Record], *, via: str = "",
                   hops: int = 0, owner: bool = False,
                   docs: list[object] | None = None) -> sb.Taken:
        """Store records (from a peer or from us) and forward what was new.

        ``owner``: the records are for a topic of ours, so this take may stamp
        some (:mod:`awp.node.board_seq`): its commit is durable before any
        stamp leaves, so a seq is never given twice, even after ``kill -9``.
        ``docs``: the records already decoded (:func:`~awp.wire.boardline.recs_of`).
        """
        loop = threading.get_ident()
        plain: set[str] | None = None
        followed = self.followed  # read before the job: it may run on the writer's thread

        def job(c: sqlite3.Connection) -> sb.Taken:
            nonlocal plain
            # Our subscriptions as the store holds them: read from memory when the job
            # runs inline (they change on this thread only), from the store elsewhere.
            subs = self.subs if threading.get_ident() == loop else None
            taken = sb.take(c, raws, now_ms(), via=via, hops=hops, me=self.me,
                            signer=self.seq.signer, subs=subs, docs=docs)
            if followed is not None and taken.new:  # for the feed's followers
                asked = [r for r in taken.new if r.kind == "post" and followed(r)]
                plain = {r.hash for r in asked} - sb.named(c, asked)
            if self.queue is not None:
                self.queue.stored(c, taken)
            return taken

        t, inside = clock(), STEPS["parse"] + STEPS["verify"]
        try:
            taken = await self._store(job, len(raws) if via and not owner else 0, len(raws))
            STEPS["store"] += clock() - t - (STEPS["parse"] + STEPS["verify"] - inside)
        except Exception:
            if self.queue is not None:
                self.queue.forget()
            raise
        self._equivocated(taken, via)
        if via:
            self.stats["records_in"] += len(taken.new)
            self.stats["records_refused"] += len(taken.refused)
            if taken.refused:
                log.debug("board: %d records from %s refused: %s", len(taken.refused),
                          via[:18], taken.refused[:3])
        by_topic: dict[str, list[str]] = {}
        for rec in taken.new:
            if rec.kind == "topic":
                await self._topic_changed(rec, hops, via)
                continue
            if rec.hash not in taken.waiting:  # ours waits for the owner's stamp first
                by_topic.setdefault(rec.topic, []).extend(taken.wire(rec))
            self.core.changed(rec.topic)
            # "record", "taken", "plain": in-process only (the board's feed, which takes
            # the whole commit at its first hint, and pushes it to the local followers)
            self.engine.changes.publish({
                "kind": "board", "topic": rec.topic, "hash": rec.hash, "rec": rec.kind,
                "seq": taken.seqs.get(rec.hash, 0), "mine": rec.author == self.me,
                "record": rec, "taken": taken, **({"plain": plain} if plain is not None else {})})
        t = clock()
        for topic, raws_out in by_topic.items():
            await self.act(self.core.stored(topic, raws_out, hops, via))
        STEPS["forward"] += clock() - t
        self.seq.stored(taken)
        if self.queue is not None and taken.new:
            self.queue.after_stored(taken)
        return taken

    async def _store(self, job: Callable[[sqlite3.Connection], sb.Taken],
                     relayed: int, count: int) -> sb.Taken:
        """Run a store job of ``count`` records: ``relayed`` ones from a peer go in a
        relaxed commit.

        A record a peer relayed is held by every subscriber, so no one needs
        it on disk before it goes on: a small batch of them is stored inline
        without the fsync (:meth:`Writer.run_relaxed`), which is most of what
        a relay spends per record.  Our own records, what the owner stamps,
        and large batches (a catch-up) take the durable path: a small one
        inline too when the writer is quiet and its commits are fast
        (:meth:`Writer.submit`, which saves the two thread hand-overs), a
        large one on the writer's thread, since it would hold up the event
        loop.
        """
        writer = self.engine.writer
        if 0 < relayed <= RELAXED_RECORDS:
            return await writer.run_relaxed(job)
        if count <= RELAXED_RECORDS:  # inline when the writer is quiet and commits are fast
            return await writer.submit(job).wait()
        return await writer.run(job)

    async def _forward(self, topic: str, raws: list[str], hops: int,
                       keys: list[str] | None = None, only: BoardLink | None = None) -> None:
        """Send records to the links ``keys`` (every link when None, ``only`` when
        given) that may read them, each group's line built once for all."""
        if only is not None:
            links = [only]
        else:
            links = [link for link in map(self.links.get, keys if keys is not None
                                          else list(self.links)) if link is not None]
        groups: list[tuple[list[str], int]] | None = None
        lines: dict[int, bytes] = {}  # group -> its line, built once for every link

        def line_of(i: int) -> bytes:
            if i not in lines:
                lines[i] = self._posts_line(topic, groups[i][0], hops)  # type: ignore[index]
            return lines[i]

        for link in links:
            if not await self._may_read(link, topic):
                continue
            if groups is None:
                groups = _groups(raws)
            for i, (group, size) in enumerate(groups):
                if not link.push_records(topic, hops, group, size, lambda i=i: line_of(i)):
                    self.stats["held_back"] += 1
                    break
                self.stats["records_out"] += len(group)

    def _posts_line(self, topic: str, raws: list[str], hops: int) -> bytes:
        quoted = _QUOTED.get(topic)
        if quoted is None:
            if len(_QUOTED) >= 4096:
                _QUOTED.clear()
            quoted = _QUOTED[topic] = json.dumps(topic)
        return self.line("board-posts", f'"topic":{quoted},"hops":{hops},'
                          f'"recs":[{",".join(raws)}]')

    # -- anti-entropy ----------------------------------------------------------------

    def _floor(self, c: sqlite3.Connection, topic: str, pol: Policy | None) -> int:
        if pol is None:
            return 0
        return sb.enforce_retention(c, topic, pol, now_ms())

    async def _opening(self, topic: str) -> bytes:
        pol = await self.policy(topic)

        def job(c: sqlite3.Connection) -> dict:
            floor = self._floor(c, topic, pol)
            return self.held.using(c, topic, lambda h: bsync.opening(h, floor, now_ms(),
                                                                     FUTURE_MS))

        body = await self.engine.writer.run(job)
        return self._digest_line(topic, body)

    def _digest_line(self, topic: str, body: dict) -> bytes:
        return self.line("board-digest", f'"topic":{json.dumps(topic)},'
                          f'"floor":{body["floor"]},"ranges":'
                          + json.dumps(body["ranges"], separators=(",", ":")))

    async def _on_digest(self, link: BoardLink, line: dict) -> None:
        topic = line.get("topic")
        if not isinstance(topic, str) or topic not in self.subs:
            return
        if not await self._may_read(link, topic):
            return
        pol = await self.policy(topic)

        def job(c: sqlite3.Connection) -> tuple[bsync.Step, list[str]]:
            floor = self._floor(c, topic, pol)
            step = self.held.using(c, topic, lambda h: bsync.respond(h, floor, line))
            return step, sb.raw_records(c, topic, step.push)

        step, push = await self.engine.writer.run(job)
        push = self._serve(link, push) if push else []
        await self.act(self.core.digest_step(link.conn.peer_key, topic, step.reply, push,
                                             step.want, step.truncated))

    async def _on_want(self, link: BoardLink, line: dict) -> None:
        topic, ids = line.get("topic"), line.get("ids")
        if not isinstance(topic, str) or topic not in self.subs or not isinstance(ids, list):
            return
        if not await self._may_read(link, topic):
            return
        want = [i for i in ids[:MAX_WANT] if isinstance(i, str)]
        raws = await self.engine.read(lambda c: sb.raw_records(c, topic, want))
        raws = self._serve(link, raws) if raws else []
        if raws:
            await self._forward(topic, raws, 0, only=link)

    def _serve(self, link: BoardLink, raws: list[str]) -> list[str]:
        """What of ``raws`` the peer's asking may have now (``board_serve_bytes``).

        A want is a few bytes that can ask for megabytes: past the budget a
        minute, the rest is left for a digest at the next sweep.
        """
        left = link.served.left(self.engine.config.limits.board_serve_bytes)
        out = []
        for r in raws:
            if len(r) > left:
                self.stats["asks_refused"] += 1
                link.deferred.add(_topic_of(r))
                break
            left -= len(r)
            out.append(r)
        link.served.used += sum(len(r) for r in out)
        return out

    # -- local actions ---------------------------------------------------------------

    async def subscribe(self, topic: str) -> bool:
        """Subscribe (with the read grant we hold, if any); False when already subscribed."""
        if topic in self.subs:
            return False
        if len(self.subs) >= self.engine.config.limits.board_subscriptions:
            raise TooMany(f"this host subscribes to {len(self.subs)} topics already"
                          " (limits.board_subscriptions)")
        pol = await self.policy(topic)

        def job(c: sqlite3.Connection) -> None:
            found = (sb.find_authority(c, self.me, topic, "post", now_ms(), pol)
                     or sb.find_authority(c, self.me, topic, "read", now_ms(), pol))
            grant, via = found if found else (None, None)
            sb.subscribe(c, topic, now_ms(), grant, via)

        await self.engine.writer.run(job)
        self.none.discard(topic)  # the owner answers this board-sub afresh
        # our board-sub to every link; neighbours that carry it already are heard
        await self.act(self.core.subscribe(topic))
        owner = topic.split("/", 1)[0]
        if not is_owner(owner, self.me):
            await self.engine.business.begun(owner)  # a subscription is business with its owner
        return True

    def on_grants(self, conn: Connection) -> None:
        """A peer gave us a grant: it may let us read topics we subscribe to."""
        if self.subs and self._nursery is not None:
            self._nursery.start_soon(self.refresh_authority)

    async def refresh_authority(self, topics: Iterable[str] | None = None) -> list[str]:
        """Look for better grants for our subscriptions; re-announce those that changed."""
        wanted = sorted(self.subs if topics is None else set(topics) & self.subs)
        pols = {t: await self.policy(t) for t in wanted}

        def job(c: sqlite3.Connection) -> list[str]:
            changed = []
            now = now_ms()
            for t in wanted:
                found = (sb.find_authority(c, self.me, t, "post", now, pols[t])
                         or sb.find_authority(c, self.me, t, "read", now, pols[t]))
                if found and found != sb.sub_authority(c, t):
                    sb.subscribe(c, t, now, *found)
                    changed.append(t)
            return changed

        changed = await self.engine.writer.run(job)
        if changed:
            await self.announce(changed, [])
        return changed

    async def unsubscribe(self, topic: str) -> bool:
        if topic not in self.subs:
            return False
        await self.engine.writer.run(lambda c: sb.unsubscribe(c, topic))
        self.none.discard(topic)
        self.held.drop(topic)  # no more heads or digests of it: its copy goes
        await self.act(self.core.unsubscribe(topic))
        return True

    def my_topic(self, c: sqlite3.Connection, name: str) -> str:
        """Our topic ``name``: named by our key, or by a key we rotated from that
        holds it (a topic keeps its first owner key as its name)."""
        for key in former_keys(self.me):
            topic = f"{key}/{name}"
            if sb.topic_doc(c, topic) is not None:
                return topic
        return f"{self.me}/{name}"

    def _chain_from(self, owner: str) -> list[dict]:
        """Our rotation records from ``owner`` (one of our past keys) to our key."""
        keys = [str(r.get("old")) for r in self.my_chain]
        return self.my_chain[keys.index(owner):] if owner in keys else []

    async def _resign_after_rotation(self) -> None:
        """Re-sign, under our key, the document of each topic named by a key we
        rotated from, so every host learns the succession from the topic itself
        (one that never met us included) before our first stamp under this key."""
        def stale(c: sqlite3.Connection) -> list[str]:
            out = []
            for topic in sb.known_topics(c):
                owner = topic.split("/", 1)[0]
                if owner == self.me or not is_owner(owner, self.me):
                    continue
                raw = sb.topic_doc(c, topic)
                if raw is not None and json.loads(raw).get("author", owner) != self.me:
                    out.append(topic)
            return out

        for topic in await self.engine.read(stale):
            try:
                await self.publish_topic(topic.split("/", 1)[1], {})
            except (BoardError, TooMany) as e:
                log.warning("board: could not re-sign %s under our new key: %s", topic, e)

    async def publish_topic(self, name: str, changes: dict) -> Record:
        """Sign a new document for one of our topics (policy fields ``changes``)."""
        topic = await self.engine.read(lambda c: self.my_topic(c, name))
        prev = await self.engine.read(lambda c: sb.topic_doc(c, topic))
        doc = json.loads(prev) if prev else {}
        seq = int(doc.get("seq", 0)) + 1
        policy = {k: v for k, v in doc.items()
                  if k not in ("k", "topic", "seq", "ts", "sig", "author", "rotation")}
        policy.update(changes)
        policy = {k: v for k, v in policy.items() if v is not None}
        if self.engine.config.name:  # signed, so hosts that never met us can call us by it
            policy["owner_name"] = self.engine.config.name[:64]
        owner = topic.split("/", 1)[0]
        rec = make_topic(self.engine.identity, name, seq, now_ms(), topic_owner=owner,
                         rotation=self._chain_from(owner), **policy)
        if topic not in self.subs:
            if len(self.subs) >= self.engine.config.limits.board_subscriptions:
                raise TooMany(f"this host holds {len(self.subs)} topics already"
                              " (limits.board_subscriptions)")
            await self.engine.writer.run(lambda c: sb.subscribe(c, topic, now_ms()))
            self.subs.add(topic)
            await self.announce([topic], [])
        taken = await self.take([rec])
        if not taken.new:
            raise BoardError("; ".join(taken.refused) or "the topic document was not kept")
        return rec

    async def add_member(self, topic: str, key: str, can: str, until: str) -> Record:
        """Name ``key`` in the ``members`` of our ``topic`` until ``until`` (``awp topic
        grant``, and the topic rights an invite carries): the document travels to every
        subscriber over any path of readers."""
        doc = json.loads(await self.engine.read(lambda c: sb.topic_doc(c, topic)) or "{}")
        listed = doc.get("members", [])
        members = [e for e in (listed if isinstance(listed, list) else [])
                   if isinstance(e, dict) and e.get("key") != key]
        members.append({"key": key, "can": can, "until": until})
        if len(members) > MAX_MEMBERS:
            raise BoardError(f"a topic lists at most {MAX_MEMBERS} members; revoke some first")
        return await self.publish_topic(topic.split("/", 1)[1], {"members": members})

    async def on_invited(self, key: str, topics: list[dict]) -> None:
        """An invite admitted ``key``: make it a member of the topics the invite names."""
        for t in topics:
            try:
                await self.add_member(t["topic"], key, t["can"], format_ts(t["until_ms"]))
            except (BoardError, KeyError, TypeError) as e:
                log.error("invite: cannot add %s to %s: %s", key[:18], t, e)

    async def sign_and_take(self, doc: dict) -> tuple[Record, sb.Taken]:
        """Sign one of our records and store it (then it goes out like any other).

        Our records' times strictly increase: two identical posts in one
        millisecond would otherwise be one record (a record is named by its
        content), and the second would vanish.
        """
        recs, taken = await self.sign_many([doc])
        return recs[0], taken

    async def sign_many(self, docs: list[dict]) -> tuple[list[Record], sb.Taken]:
        """Sign several of our records and store them in one transaction."""
        recs = []
        for doc in docs:
            ts = max(now_ms(), self._last_ts + 1)
            self._last_ts = ts
            recs.append(sign_record(self.engine.identity, dict(doc, ts=format_ts(ts))))
        return recs, await self.take(recs)

    async def readers(self, topic: str) -> list[str]:
        """Peers a new record of ``topic`` is sent to now (linked, subscribed, allowed)."""
        return sorted([k for k, link in list(self.links.items())
                       if await self._may_read(link, topic)])

    def status(self) -> dict:
        return {**self.stats, "subscribed": len(self.subs), "links": len(self.links),
                "queued_bytes": sum(link.size for link in list(self.links.values())),
                **({"cpu_ns": dict(STEPS)} if CPU_ON else {})}


def _head_ms(head: dict) -> int:
    return parse_ts(head["ts"])


def _newer(a: dict, b: dict) -> bool:
    """Whether head ``a`` is dated after head ``b``."""
    return parse_ts(a["ts"]) > parse_ts(b["ts"])


def _groups(raws: Iterable[str]) -> list[tuple[list[str], int]]:
    """Records in groups that each fit one ``board-posts`` line, with their sizes."""
    out: list[tuple[list[str], int]] = []
    group: list[str] = []
    size = 0
    for r in raws:
        n = len(r.encode("utf-8")) + 1
        if group and size + n > MAX_LINE - 1024:
            out.append((group, size))
            group, size = [], 0
        group.append(r)
        size += n
    if group:
        out.append((group, size))
    return out


def _topic_of(raw: str) -> str:
    """The topic a stored record names (records we hold were checked when stored)."""
    return str(json.loads(raw).get("topic", ""))


__all__ = ["Board", "HOPS_CAP", "speaks_board"]
