"""Work queues on board topics: the owner's daemon arbitrates, everyone else asks it.

On the owner, each queue topic has one :class:`awp.board.queue.Arbiter`
whose state is its log replayed (``board_queue_log``).  Every request is
written to the log in the same transaction as the lease records it
produces, and only answered after that commit: after ``kill -9`` the owner
restarts into the state it answered from.  Items come from the topic
itself: a top-level post stored here is logged as ``add``, its deletion or
hiding as ``remove``.

Anyone else sends ``board-claim`` with a request signed by its key (an
``ask``) to the owner, directly when linked, otherwise to its linked
subscribers of the topic, which carry it on towards the owner and route the
``board-lease`` answer back (issue 19: claims worked only over a direct
link).  Each host passes one ask on once (by its signature), so the owner
decides it once however many paths reach it.  With no link to the owner nor
to any subscriber, a claim fails at once (:class:`NoOwner`).  A
``complete`` or ``fail`` that cannot reach the owner is kept
(``board_pending``) and sent when a path is back, until its lease would have
run out; a retried ``complete`` the owner had committed is answered "done".

Why one module: the arbiter's side (decide, log, lease records) and the
asker's side (route, wait, keep, retry) are the two ends of one exchange;
the market's award windows already live apart (``board_market``), and
what is left shares the request ids, routes and answers as one protocol.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from typing import TYPE_CHECKING

import trio

from ..board import perms
from ..board.asks import REPLAYED, AskGuard
from ..board.market import STANDING_MS, Bid, needs_of
from ..board.queue import Arbiter, Decision, Event
from ..store import board as sb
from ..wire.board import (
    FUTURE_MS,
    LEASE_STATES,
    MAX_OWNER_NAME,
    BoardError,
    Policy,
    Record,
    check_ask,
    check_record,
    check_tags,
    is_owner,
    make_ask,
    make_lease,
    owned_by,
)
from ..wire.names import clean_name
from ..wire.timefmt import RisingClock, now_ms, parse_ts
from .board_market import AwardWindow
from .queue_answers import RetryAnswers

if TYPE_CHECKING:
    from .board import Board
    from .board_sendq import BoardLink

log = logging.getLogger("awp.board.queue")

OPS = ("claim", "renew", "release", "complete", "fail")
KEPT_OPS = ("complete", "fail", "release")  # retried while the owner is away
RETRY_S = 5.0
MAX_ROUTE = 16  # hosts an ask passes on its way to the owner
ROUTE_S = 60.0  # how long a relay remembers where to send an answer back
MAX_ROUTES = 4096  # answers a relay waits to route back, and asks it remembers having passed
UNREACHABLE = "unreachable: no path to the queue's owner from here"


class NoOwner(Exception):
    """Neither the queue's owner nor any subscriber of its topic is linked: no claim now."""


class Refused(Exception):
    """The arbiter said no (not the holder, no such lease, not a queue...)."""


class BoardQueue:
    """The queue half of the board extension (see the module docstring)."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.engine = board.engine
        self.me = board.me
        self.arbiters: dict[str, Arbiter] = {}  # our queue topics, touched on the writer only
        self._rows: dict[str, int] = {}  # rows in each arbiter's log
        self._lease_ts: dict[str, int] = {}  # the newest lease record's ts, per topic
        # our request id -> (links asked, answered, answers, links still to answer)
        self._answers: dict[str, tuple[set[str], trio.Event, list[dict], list[int]]] = {}
        # an ask we passed on: our id -> (from, their id, when, branches still to answer)
        self._routes: dict[str, tuple[BoardLink, str, float, list[int]]] = {}
        self._seen: dict[str, float] = {}  # signatures of asks already passed on (relays)
        # our asks' times: two renews of one lease in one millisecond would otherwise
        # be one signature, and the owner would take the second for the first met again
        self._ask_clock = RisingClock()
        # claimants' own names, from their signed asks or their hellos: lease records
        # carry them, so hosts that never met a worker show it by name (issue 38)
        self.holder_names: dict[str, str] = {}
        lim = self.engine.config.limits
        self.asks = AskGuard(int(lim.board_ask_window * 1000), int(lim.board_ask_reorder * 1000),
                             lim.board_asks_per_claimant, lim.board_ask_claimants)
        self.answers = RetryAnswers(lim.board_answers_kept)  # retries answered off the writer
        self._spent: dict[str, float] = {}  # writer seconds per claimant, not yet charged
        self._compact_s = 0.0  # of the request being decided, what compacting took
        self._wake = trio.Event()
        self.window = AwardWindow(self)  # claims are decided in award windows (the market)

    # -- the arbiter (owner side; runs on the writer thread) ---------------------------

    def _arbiter(self, c: sqlite3.Connection, topic: str, pol: Policy) -> Arbiter:
        arb = self.arbiters.get(topic)
        if arb is None:
            events = sb.queue_log(c, topic)
            arb = Arbiter.replay(pol.lease_s * 1000, pol.attempts, events)
            self._rows[topic] = len(events)
            known = set(arb.items())
            for h, ts in sb.queue_items(c, topic):
                if h not in known:  # posted before the topic became a queue
                    self._log(c, topic, arb, Event("add", now_ms(), item=h, ts=ts,
                                                   needs=_needs(c, topic, h)))
            self.arbiters[topic] = arb
        arb.lease_ms, arb.attempts = pol.lease_s * 1000, pol.attempts
        arb.bar = self.engine.config.limits.board_strikes_bar
        return arb

    def _log(self, c: sqlite3.Connection, topic: str, arb: Arbiter,
             ev: Event) -> list[Decision]:
        """Apply an event, and keep it in the log when it changed anything.

        A refused request, a claim on an empty queue or a retried claim
        changes no state, and replaying the log without it gives the same
        state: leaving it out keeps a claimant's noise off the disk.
        """
        out = arb.apply(ev)
        if ev.op in ("add", "remove") or any(d.state in LEASE_STATES and not d.again
                                             for d in out):
            sb.log_event(c, topic, ev)
            self._rows[topic] += 1
            self._compact(c, topic, arb)
        return out

    def _compact(self, c: sqlite3.Connection, topic: str, arb: Arbiter) -> None:
        """Rewrite the log as the arbiter's state once it is long.

        Past ``limits.board_queue_log`` rows, or twice the items tracked
        when that is more: the rewrite writes a row an item and the next one
        is at least as many events away, so it costs at most one row per
        event.  Finished items whose post the topic no longer holds
        (retention, deletion) are forgotten here.
        """
        if self._rows[topic] <= max(self.engine.config.limits.board_queue_log, 2 * len(arb)):
            return
        t0 = time.perf_counter()
        events = arb.compact({h for h, _ts in sb.queue_items(c, topic)})
        sb.replace_log(c, topic, events)
        self._rows[topic] = len(events)
        self._compact_s += time.perf_counter() - t0

    def _leases(self, c: sqlite3.Connection, topic: str, decisions: list[Decision],
                now: int) -> list[Record]:
        """Sign and store a lease record for each decision that changed a lease.

        Their times strictly increase, one millisecond apart when decisions
        come together (an expiry and the claim that follows it): every host
        orders lease records by ``(ts, hash)``, which must be the order the
        arbiter decided in.
        """
        recs = []
        for d in decisions:
            if d.state not in LEASE_STATES or d.again:
                continue
            last = self._lease_ts.get(topic)
            if last is None:
                last = c.execute("SELECT coalesce(max(ts), 0) FROM board_records WHERE topic = ?"
                                 " AND kind = 'lease'", (topic,)).fetchone()[0]
            ts = max(now, last + 1)
            self._lease_ts[topic] = ts
            recs.append(make_lease(self.engine.identity, topic, d.item, d.holder, d.state,
                                   d.lease, d.until, ts, self.holder_names.get(d.holder, "")))
        return sb.take(c, recs, now).new if recs else []

    def _owned_queue(self, c: sqlite3.Connection, topic: str) -> Policy | None:
        if not owned_by(topic, self.me):
            return None
        pol = sb.policy(c, topic)
        return pol if pol is not None and pol.queue else None

    def stored(self, c: sqlite3.Connection, taken: sb.Taken) -> None:
        """In the transaction that stored new records: items come and go with them."""
        for rec in list(taken.new):
            if rec.kind not in ("post", "delete", "hide") or (rec.kind == "post" and rec.parent):
                continue
            pol = self._owned_queue(c, rec.topic)
            if pol is None:
                continue
            arb = self._arbiter(c, rec.topic, pol)
            now = now_ms()
            if rec.kind == "post":
                self._log(c, rec.topic, arb, Event("add", now, item=rec.hash, ts=rec.ts,
                                                   needs=needs_of(rec.doc) or ()))
                continue
            row = c.execute("SELECT author FROM board_records WHERE topic = ? AND hash = ?",
                            (rec.topic, rec.of)).fetchone()
            if row is None or (rec.kind == "delete" and row[0] != rec.author):
                continue
            taken.new.extend(self._leases(c, rec.topic, self._log(
                c, rec.topic, arb, Event("remove", now, item=rec.of)), now))

    def forget(self) -> None:
        """Drop the arbiters' memory; each is replayed from its log when next used.

        Called when a transaction that applied events failed: the log (on
        disk) is the truth, and memory may be ahead of it.
        """
        self.arbiters.clear()
        self._rows.clear()
        self._lease_ts.clear()
        self.answers.clear()

    def after_stored(self, taken: sb.Taken) -> None:
        """A new lease may need an expiry tick, but only in a queue we arbitrate.

        Waking costs the loop a writer round trip (:meth:`_next_expiry`), so
        records of topics without an arbiter here (every record a relay or a
        plain subscriber stores) do not wake it.
        """
        if any(r.topic in self.arbiters for r in taken.new):
            self.answers.note([r for r in taken.new if r.topic in self.arbiters])
            self._wake.set()

    def _decide(self, c: sqlite3.Connection, topic: str,
                ev: Event) -> tuple[Decision, list[Record]]:
        pol = self._owned_queue(c, topic)
        if pol is None:
            return Decision("refused", why="not a queue of this host's"), []
        arb = self._arbiter(c, topic, pol)  # a replay after a restart is nobody's cost
        cap = self.engine.config.limits.board_leases_per_claimant
        if (ev.op == "claim" and cap and not arb.retry_of(ev.who, ev.req)
                and arb.held_by(ev.who) >= cap):
            # before the log: a refusal changes nothing, and replay never depends on the cap
            return Decision("refused", why=f"this claimant holds {cap} leases of this queue"
                            " already (the owner's limits.board_leases_per_claimant): complete"
                            " or release one first"), []
        t0, self._compact_s = time.perf_counter(), 0.0
        decisions = self._log(c, topic, arb, ev)
        recs = self._leases(c, topic, decisions, ev.now)
        answer = decisions[-1] if decisions else Decision("refused", why="no answer")
        if answer.again:  # the answer is the record announced with the first answer
            recs += self._announced(c, topic, answer)
        # a compaction pays for the queue's whole history, not for this request
        spent = time.perf_counter() - t0 - self._compact_s
        self._spent[ev.who] = self._spent.get(ev.who, 0.0) + max(0.0, spent)
        return answer, recs

    def _announced(self, c: sqlite3.Connection, topic: str, answer: Decision) -> list[Record]:
        """The lease record first sent with ``answer`` (a retry missed by
        :class:`RetryAnswers`): read by the item's index, a few records, never the topic."""
        out = []
        for raw in sb.item_history(c, topic, answer.item)[0]:
            doc = json.loads(raw)
            if doc.get("lease") == answer.lease and doc.get("state") == answer.state:
                out.append(check_record(raw))
        return sorted(out, key=lambda r: (r.ts, r.hash))[-1:]

    async def _arbitrate(self, topic: str, ev: Event) -> tuple[Decision, Record | None]:
        try:
            answer, recs = await self.engine.writer.run(lambda c: self._decide(c, topic, ev))
        except Exception:
            self.forget()  # the transaction was undone: replay the log next time
            raise
        await self._spread([r for r in recs if not answer.again or r.doc.get("lease")
                            != answer.lease])
        mine = [r for r in recs if r.doc.get("lease") == answer.lease
                and r.doc.get("state") == answer.state]
        return answer, mine[-1] if mine else None

    async def _spread(self, recs: list[Record]) -> None:
        """Send lease records the arbiter just stored to the topic's readers."""
        self.answers.note(recs)
        by_topic: dict[str, list[Record]] = {}
        for r in recs:
            by_topic.setdefault(r.topic, []).append(r)
        for topic, rs in by_topic.items():
            for r in rs:
                self.engine.changes.publish({"kind": "board", "topic": topic, "hash": r.hash,
                                             "rec": "lease", "mine": True})
            await self.board._forward(topic, [r.raw for r in rs], 0)
        self._wake.set()

    async def run(self) -> None:
        """Expire leases on time, and retry kept operations while the owner is away."""
        next_retry = trio.current_time() + RETRY_S
        while True:
            try:
                due = await self.engine.writer.run(self._next_expiry)
            except Exception:
                log.exception("queue: reading the arbiters failed")
                due = 0
            wake_at = next_retry
            if due:
                wake_at = min(wake_at, trio.current_time() + max(0.0, (due - now_ms()) / 1000))
            with trio.move_on_at(wake_at):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                if due and due <= now_ms():
                    await self._spread(await self.engine.writer.run(self._tick))
                if trio.current_time() >= next_retry:
                    next_retry = trio.current_time() + RETRY_S
                    await self._retry_kept()
            except Exception:  # a failing store: the log stays the truth; try again soon
                log.exception("queue: expiring or retrying failed")
                self.forget()
                await trio.sleep(1.0)

    def _next_expiry(self, c: sqlite3.Connection) -> int:
        return min((d for d in (a.next_expiry() for a in self.arbiters.values()) if d),
                   default=0)

    def _tick(self, c: sqlite3.Connection) -> list[Record]:
        """Expire what ran out (logged, since it costs attempts); the lease records made."""
        now, out = now_ms(), []
        for topic, arb in list(self.arbiters.items()):
            if arb.next_expiry() and arb.next_expiry() <= now:
                out.extend(self._leases(c, topic, self._log(c, topic, arb, Event("tick", now)),
                                        now))
        return out

    def strikes(self, c: sqlite3.Connection, topic: str) -> dict[str, int]:
        """Current strikes against each worker on one of our queues (the market)."""
        pol = self._owned_queue(c, topic)
        return self._arbiter(c, topic, pol).standing.strikes(now_ms()) if pol else {}

    def snapshot(self, c: sqlite3.Connection, topic: str) -> list[dict] | None:
        """The arbiter's view of one of our queues (None when not ours or not a queue)."""
        pol = self._owned_queue(c, topic)
        return self._arbiter(c, topic, pol).snapshot() if pol is not None else None

    # -- requests from others (owner side) -----------------------------------------

    async def on_line(self, link: BoardLink, t: str, line: dict) -> None:
        if t == "board-claim":
            await self._on_claim(link, line)
        elif t == "board-lease":
            re = line.get("re")
            if not isinstance(re, str):
                return
            unreachable = line.get("error") == UNREACHABLE
            waiter = self._answers.get(re)
            if waiter is not None and link.conn.peer_key in waiter[0]:
                # "unreachable" counts only once every path asked has said so
                waiter[3][0] -= 1
                if not unreachable or waiter[3][0] <= 0:
                    waiter[2].append(line)
                    waiter[1].set()
                return
            route = self._routes.pop(re, None)
            if route is None:
                return
            route[3][0] -= 1
            if unreachable and route[3][0] > 0:
                return  # another branch may still reach the owner
            topic = line.get("topic")
            if isinstance(topic, str) and not route[0].conn.closed.is_set():
                back = {k: v for k, v in line.items() if k not in ("t", "id", "ts")}
                back["re"] = route[1]
                route[0].push(self.board.line("board-lease", json.dumps(
                    back, separators=(",", ":"), ensure_ascii=False)[1:-1]), topic)

    def _first_time(self, ask: dict) -> bool:
        """Whether this host meets this ask for the first time (then it remembers it)."""
        now = trio.current_time()
        if len(self._seen) >= MAX_ROUTES:
            self._seen = {k: t for k, t in self._seen.items() if now - t < 2 * FUTURE_MS / 1000}
            while len(self._seen) >= MAX_ROUTES:
                del self._seen[next(iter(self._seen))]
        if ask["sig"] in self._seen:
            return False
        self._seen[ask["sig"]] = now
        return True

    async def _on_claim(self, link: BoardLink, line: dict) -> None:
        topic, op = line.get("topic"), line.get("op")
        ident = line.get("id")
        if not isinstance(topic, str) or op not in OPS or not isinstance(ident, str):
            return
        ask = line.get("ask")
        if ask is not None:
            try:
                check_ask(ask)
            except BoardError as e:
                log.info("queue: an ask from %s dropped: %s", link.conn.peer_key[:18], e)
                return
            if ask["topic"] != topic or ask["op"] != op:
                return
            if not owned_by(topic, self.me):
                if abs(parse_ts(ask["ts"]) - now_ms()) > FUTURE_MS or not self._first_time(ask):
                    return  # stale, or met on another path: passed on once
                await self._pass_on(link, line, ident, ask)
                return
        who = ask["by"] if ask is not None else link.conn.peer_key
        direct = who == link.conn.peer_key
        why = self._over_rate(link) or await self._may_claim(link, topic, who, direct)
        if not why:
            self._remember_name(who, ask.get("name") if ask is not None and not direct
                                else link.conn.peer_name)
        if not why and ask is not None:
            # only now, for a granted claimant: a stranger's asks never take its place
            seen = self.asks.admit(who, ask["sig"], parse_ts(ask["ts"]), now_ms())
            if seen == REPLAYED:
                return  # met on another path, or captured and sent again: decided once
            if seen:
                why = (f"the ask is dated {ask['ts']}, more than"
                       f" {self.asks.window_ms // 1000} s from the queue owner's clock"
                       " (limits.board_ask_window): check the claimant's clock")
        if why:
            answer, rec = Decision("refused", why=why), None
        else:
            # over the mesh, what the claimant asks is in its signed ask, so no
            # host in between can change its offers or bid
            src = ask if ask is not None else line
            req = src.get("req") if isinstance(src.get("req"), str) else ""
            lease = src.get("lease") if isinstance(src.get("lease"), str) else ""
            try:
                offers = check_tags(src.get("offers", []), "offers")
                bid = Bid.check(src.get("bid"))
            except BoardError as e:
                offers, bid, why = (), Bid(), str(e)
            hit = (self.answers.claim(topic, who, req[:64], now_ms()) if op == "claim" else
                   self.answers.complete(topic, who, lease[:80]) if op == "complete" else None)
            if why:
                answer, rec = Decision("refused", why=why), None
            elif hit is not None:  # a retry, answered as before without the writer
                answer, rec = hit
            elif op == "claim" and self.board._nursery is not None:
                # Decided when its award window closes: meanwhile this peer's other
                # lines (and its other claims, which may join the same window) go on.
                self.board._nursery.start_soon(self._claim_for, link, topic, ident, who,
                                               req[:64], offers, bid)
                return
            elif op == "claim":
                answer, rec = await self.window.claim(topic, who, req[:64], offers, bid)
            else:
                ev = Event(op, now_ms(), who=who, req=req[:64], lease=lease[:80])
                try:
                    answer, rec = await self._arbitrate(topic, ev)
                finally:
                    self._charge(link, who)
        await self._send_answer(link, topic, ident, answer, rec)

    def _remember_name(self, who: str, name: object) -> None:
        """Keep a granted claimant's own name (bounded like the asks' claimants)."""
        name = clean_name(name)[:MAX_OWNER_NAME] if isinstance(name, str) else ""
        if not name or self.holder_names.get(who) == name:
            return
        self.holder_names.pop(who, None)
        self.holder_names[who] = name
        while len(self.holder_names) > self.engine.config.limits.board_ask_claimants:
            self.holder_names.pop(next(iter(self.holder_names)))

    async def _claim_for(self, link: BoardLink, topic: str, ident: str, who: str, req: str,
                         offers: tuple[str, ...], bid: Bid) -> None:
        """A peer's claim, decided in its award window and answered (its own task)."""
        try:
            answer, rec = await self.window.claim(topic, who, req, offers, bid)
        except Exception:  # a failing store: the claimant's retry (same req) asks again
            log.exception("queue %s: a claim could not be decided", topic)
            return
        finally:
            self._charge(link, who)
        await self._send_answer(link, topic, ident, answer, rec)

    async def _send_answer(self, link: BoardLink, topic: str, ident: str, answer: Decision,
                           rec: Record | None) -> None:
        body = {"topic": topic, "re": ident}
        if rec is not None and answer.state == "claimed":
            # the item first, so the claimant can show it with the answer
            items = await self.engine.read(lambda c: sb.raw_records(c, topic, [answer.item]))
            await self.board._forward(topic, items, 0, only=link)
        if rec is not None:
            text = f'"topic":{json.dumps(topic)},"re":{json.dumps(ident)},"doc":' + rec.raw
        else:
            body["error"] = answer.state if answer.state == "empty" else (answer.why or
                                                                          answer.state)
            text = json.dumps(body, separators=(",", ":"))[1:-1]
        # Tagged with the topic, so the answer counts against the link's bound: a peer
        # that asks and never reads cannot make us queue without end. A dropped answer
        # costs nothing but time: the claimant's retry (same req) gets the same decision.
        link.push(self.board.line("board-lease", text), topic)

    def _over_rate(self, link: BoardLink) -> str:
        """``limits.board_claims_per_minute``: each request the arbiter takes costs a
        log row and lease records that every subscriber stores; and
        ``limits.board_queue_seconds``: what its requests cost the store's writer, so
        that cheap-looking requests that are dear to decide cannot hold it either."""
        lim = self.engine.config.limits
        if not link.claims.take(1, lim.board_claims_per_minute):
            self.board.stats["claims_refused"] += 1
            return "too many queue requests from this peer: wait a minute"
        if link.queue_us.left(int(lim.board_queue_seconds * 1e6)) <= 0:
            self.board.stats["claims_refused"] += 1
            return (f"this peer's queue requests took {lim.board_queue_seconds:g} s of the"
                    " owner's store writer this minute (limits.board_queue_seconds): wait a"
                    " minute")
        return ""

    def _charge(self, link: BoardLink, who: str) -> None:
        """Count what deciding ``who``'s requests cost the writer against the link."""
        spent = self._spent.pop(who, 0.0)
        if spent:
            link.queue_us.take(int(spent * 1e6),
                               int(self.engine.config.limits.board_queue_seconds * 1e6))

    async def _pass_on(self, link: BoardLink, line: dict, ident: str, ask: dict) -> None:
        """Carry a claimant's ask towards the topic's owner; remember where to answer.

        Straight to the owner when linked, otherwise to every other linked
        subscriber of the topic (each passes an ask on once, so the flood
        ends), up to :data:`MAX_ROUTE` hosts.
        """
        topic = ask["topic"]
        hops = line.get("hops", 0)
        if (topic not in self.board.subs or not isinstance(hops, int) or isinstance(hops, bool)
                or not 0 <= hops < MAX_ROUTE or self._over_rate(link)):
            return
        owner = topic.split("/", 1)[0]
        nexts = self._paths(topic, owner, except_key=link.conn.peer_key)
        if not nexts:
            link.push(self.board.line("board-lease", json.dumps(
                {"topic": topic, "re": ident, "error": UNREACHABLE},
                separators=(",", ":"))[1:-1]), topic)
            return
        now = trio.current_time()
        branches = [len(nexts)]
        if len(self._routes) >= MAX_ROUTES:
            self._routes = {k: r for k, r in self._routes.items() if now - r[2] < ROUTE_S}
            while len(self._routes) >= MAX_ROUTES:
                del self._routes[next(iter(self._routes))]
        for nxt in nexts:
            mine = self.engine.ids.next()
            self._routes[mine] = (link, ident, now, branches)
            body = {k: v for k, v in line.items() if k not in ("t", "id", "ts")}
            body["hops"] = hops + 1
            nxt.push(self.board.line("board-claim", json.dumps(
                body, separators=(",", ":"), ensure_ascii=False)[1:-1], mine), topic)

    def _paths(self, topic: str, owner: str, except_key: str = "") -> list[BoardLink]:
        """Where a request for ``owner``'s queue goes: the owner's link, else its subscribers."""
        direct = self.board.links.get(owner)
        if direct is not None and not direct.conn.closed.is_set():
            return [direct]
        return [lk for key, lk in list(self.board.links.items())
                if key != except_key and topic in lk.subs and not lk.conn.closed.is_set()]

    async def _may_claim(self, link: BoardLink, topic: str, who: str, direct: bool) -> str:
        if not owned_by(topic, self.me):
            return "not a queue of this host's"
        pol = await self.board.policy(topic)
        if pol is None or not pol.queue:
            return "not a queue"
        grant, via = link.subs.get(topic, (None, None)) if direct else (None, None)
        if who in pol.banned:
            return "banned from this topic"
        if pol.post_open or pol.member(who, "post", now_ms()) or perms.grant_counts(grant, owner=topic.split("/", 1)[0], sub=who, topic=topic,
                                               what="post", at_ms=now_ms(), policy=pol,
                                               via=via):
            return ""
        return "no grant to post here (claiming needs one)"

    # -- asking (claimant side) ----------------------------------------------------

    async def request(self, topic: str, op: str, *, req: str = "", lease: str = "",
                      timeout: float = 10.0, offers: tuple[str, ...] = (),
                      bid: Bid | None = None) -> tuple[Decision, Record | None]:
        """Ask the arbiter; raises :class:`NoOwner`, :class:`Refused` or trio.TooSlowError.

        A claim carries what the claimant ``offers`` and its ``bid`` (the market).
        """
        owner = topic.split("/", 1)[0]
        bid = bid or Bid()
        if is_owner(owner, self.me) and op == "claim":
            answer, rec = await self.window.claim(topic, self.me, req or self.engine.ids.next(),
                                                  offers, bid)
        elif is_owner(owner, self.me):
            ev = Event(op, now_ms(), who=self.me, req=req, lease=lease)
            answer, rec = await self._arbitrate(topic, ev)
        else:
            answer, rec = await self._ask(owner, topic, op, req, lease, timeout, offers, bid)
        self._spent.pop(self.me, None)  # the owner's own requests are not bounded here
        if answer.state == "refused":
            raise Refused(answer.why or "refused")
        return answer, rec

    async def _ask(self, owner: str, topic: str, op: str, req: str, lease: str,
                   timeout: float, offers: tuple[str, ...] = (),
                   bid: Bid | None = None) -> tuple[Decision, Record | None]:
        links = self._paths(topic, owner)
        if not links:
            raise NoOwner(topic)
        ident = self.engine.ids.next()
        body: dict = {"topic": topic, "op": op}
        if op == "claim":
            body["req"] = req or ident
            if offers:
                body["offers"] = list(offers)
            if bid is not None and bid.to_json():
                body["bid"] = bid.to_json()
        else:
            body["lease"] = lease
        body["ask"] = make_ask(self.engine.identity, topic, op, self._ask_clock.next(),
                               req=body.get("req", ""), lease=lease if op != "claim" else "",
                               offers=body.get("offers", ()), bid=body.get("bid"),
                               name=self.engine.config.name)
        got: list[dict] = []
        done = trio.Event()
        self._answers[ident] = ({lk.conn.peer_key for lk in links}, done, got, [len(links)])
        text = json.dumps(body, separators=(",", ":"))[1:-1]
        try:
            for link in links:
                link.push(self.board.line("board-claim", text, ident))
            with trio.fail_after(timeout):
                await done.wait()
        finally:
            self._answers.pop(ident, None)
        return await self._answer(got[0], topic)

    async def _answer(self, line: dict, topic: str) -> tuple[Decision, Record | None]:
        err = line.get("error")
        if err == UNREACHABLE:
            raise NoOwner(topic)
        if isinstance(err, str):
            return Decision("empty" if err == "empty" else "refused", why=err[:200]), None
        doc = line.get("doc")
        if not isinstance(doc, dict):
            return Decision("refused", why="the owner's answer had no lease"), None
        try:
            rec = check_record(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
        except BoardError as e:
            return Decision("refused", why=f"the owner's lease record is bad: {e}"), None
        if rec.kind != "lease" or rec.topic != topic:
            return Decision("refused", why="the owner's answer is not a lease of this topic"), None
        await self.board.take([rec.raw])
        d = rec.doc
        return Decision(d["state"], rec.of, d["holder"], d["lease"], parse_ts(d["until"])), rec

    # -- operations kept while the owner is away -------------------------------------

    async def keep(self, topic: str, op: str, lease: str, until: int) -> None:
        await self.engine.writer.run(lambda c: c.execute(
            "INSERT OR REPLACE INTO board_pending (lease, topic, op, until) VALUES (?, ?, ?, ?)",
            (lease, topic, op, until)))
        await self.engine.business.begun(topic.split("/", 1)[0])  # redial the owner for it

    async def _retry_kept(self) -> None:
        now = now_ms()
        rows = await self.engine.writer.run(lambda c: (
            c.execute("DELETE FROM board_pending WHERE until <= ?", (now,)),
            c.execute("SELECT lease, topic, op FROM board_pending").fetchall())[1])
        for lease, topic, op in rows:
            try:
                await self.request(topic, op, lease=lease, timeout=RETRY_S)
            except NoOwner:
                continue
            except trio.TooSlowError:
                continue
            except Refused as e:
                log.info("queue %s: kept %s of %s refused: %s", topic, op, lease, e)
            await self.engine.writer.run(lambda c, lease=lease: c.execute(
                "DELETE FROM board_pending WHERE lease = ?", (lease,)))

    def lease_view(self, recs: list[Record], pol: Policy | None, now: int) -> dict[str, dict]:
        """What lease records say about each item, for hosts that are not the arbiter."""
        out: dict[str, dict] = {}
        struck: dict[str, int] = {}  # holder -> its latest strike (the arbiter's standing)
        for r in sorted(recs, key=lambda r: (r.ts, r.hash)):
            if r.kind != "lease":
                continue
            d = r.doc
            e = out.setdefault(r.of, {"attempts": 0})
            if d["state"] in ("failed", "expired"):
                # as the arbiter counts: only a holder in good standing costs an attempt
                last = struck.get(d["holder"])
                if last is None or r.ts - last >= STANDING_MS:
                    e["attempts"] += 1
                struck[d["holder"]] = r.ts
            until = parse_ts(d["until"])
            held = d["state"] in ("claimed", "renewed") and until > now
            e.update(status="done" if d["state"] == "done" else "claimed" if held else "open",
                     holder=d["holder"] if held else "", lease=d["lease"] if held else "",
                     until=until if held else 0)
            if pol is not None and e["status"] == "open" and e["attempts"] >= pol.attempts:
                e["status"] = "dead"
        return out


def _needs(c: sqlite3.Connection, topic: str, item: str) -> tuple[str, ...]:
    """An item's needs, read from its stored post."""
    raws = sb.raw_records(c, topic, [item])
    return (needs_of(json.loads(raws[0])) or ()) if raws else ()


__all__ = ["BoardQueue", "NoOwner", "Refused"]
