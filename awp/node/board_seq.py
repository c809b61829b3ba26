"""The topic owner as sequencer, on the wire (SPEC.md section 14, "The owner stamps").

The rules are in :mod:`awp.board.sequencer` and :func:`awp.store.board.take`;
this module moves what they need between hosts:

* our own record on another's topic is stored as *waiting* and handed
  towards the owner in a ``board-submit`` line: to the owner when linked,
  otherwise to every linked subscriber of the topic, each of which passes it
  on the same way (never back), as queue asks travel.  A host that already
  holds the record stamped answers with it instead, so a retry after a lost
  answer costs one hop;
* the owner stores it through the same ``take`` as everything else, which
  judges it once and stamps it; the stamped record then goes out like any
  new record, and back to the link it came from;
* a refusal is an owner-signed ``board-refused`` line routed back hop by hop
  (each host remembers for a while where a record came from); the author's
  host drops a finally refused record and offers again one refused for now
  (a rate).  Signed, so that no relay can make an author drop a post;
* while no path reaches the owner the record stays waiting (its author sees
  it, marked waiting) and is offered again every :data:`RETRY_S` seconds and
  when a link comes up; the owner is business already (a subscription), so
  the daemon keeps redialling the path;
* every host notes the stamp seqs it takes (:class:`awp.board.sequencer.Holes`):
  a hole, or a head naming a later seq than any seen, makes it ask every peer
  again a few seconds later, so another path fills what a relay withheld.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import TYPE_CHECKING

import trio

from ..board import perms
from ..board.sequencer import Holes, final
from ..store import board as sb
from ..wire.board import (
    BoardError,
    Record,
    check_refusal,
    current_owner,
    make_refusal,
    make_stamp,
    owned_by,
    parse_unverified,
    verify_record,
)
from ..wire.boardline import recs_of
from ..wire.numbers import is_count
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .board import Board
    from .board_sendq import BoardLink

log = logging.getLogger("awp.board.seq")

RETRY_S = 5.0  # our waiting records are offered again this often
PASS_S = 2.0  # a record passed on towards the owner is not passed again this soon
ROUTE_S = 120.0  # how long a host remembers where a record came from (to route a refusal)
MAX_ROUTES = 16384  # records remembered for routing back, and as passed on
MAX_SUBMIT = 256  # records in one board-submit line
STAMP_BATCH = 1024  # records the owner stamps in one transaction at most
GAP_WAIT_S = 5.0  # a hole in the seqs is looked at again this long after it opened


class Sequencer:
    """The stamping half of the board extension (see the module docstring)."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.engine = board.engine
        self.me = board.me
        self.routes: dict[str, tuple[str, float]] = {}  # record hash -> (from peer, when)
        self.passed: dict[str, float] = {}  # record hash -> when we last passed it on
        self.holes: dict[str, Holes] = {}  # topic -> the stamp seqs seen and missing
        self.later: dict[str, str] = {}  # our waiting record -> why the owner said "later"
        self._checking: set[str] = set()
        self._wake = trio.Event()
        # submits to our topics waiting for the stamper: (link, topic, records, hops)
        self._queued: list[tuple[BoardLink, str, list[tuple[str, object]], int]] = []
        self._stamp_wake = trio.Event()

    # -- the owner's side ------------------------------------------------------------

    def signer(self, topic: str, of: str, seq: int, ts: int) -> Record:
        """Sign a stamp (runs inside the writer's transaction that stores it)."""
        return make_stamp(self.engine.identity, topic, of, seq, ts)

    async def start(self) -> None:
        """Records stored under the old rule meet the new one; hole tracking starts at
        the highest seq held."""
        changed = await self.engine.writer.run(
            lambda c: sb.unstamped_at_start(c, self.me, self.signer))
        if changed:
            log.info("board: %d records kept under the old rule were stamped, set waiting"
                     " or dropped", changed)
        tops = await self.engine.read(sb.top_seqs)
        for topic, top in tops.items():
            self.holes[topic] = Holes(top=top)

    # -- our own records -----------------------------------------------------------

    def stored(self, taken: sb.Taken) -> None:
        """After a take: hand our new waiting records on now; note the seqs that came."""
        mine = []
        for rec in taken.new:
            seq = taken.sseqs.get(rec.hash)
            if seq is not None:
                self._saw(rec.topic, seq)
                self.later.pop(rec.hash, None)
            elif rec.hash in taken.waiting:
                mine.append(rec)
        if mine:
            self.send(mine)  # at once: the retry loop is for when no path was there

    async def run(self) -> None:
        """Offer our waiting records now and then, until each is stamped or refused."""
        while True:
            with trio.move_on_after(RETRY_S):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                recs = await self.engine.read(sb.waiting)
            except Exception:
                log.exception("board: reading the waiting records failed")
                continue
            self._prune()
            for topic in {r.topic for r in recs}:
                await self.board.policy(topic)  # loaded for _reader
            self.send(recs)

    def link_up(self) -> None:
        """A link came up (or listed new topics): a path to an owner may be back."""
        self._wake.set()

    def send(self, recs: list[Record]) -> None:
        """Hand our waiting records towards their owners (queued on the links, no wait)."""
        by_topic: dict[str, list[str]] = {}
        for r in recs:
            by_topic.setdefault(r.topic, []).append(r.raw)
        for topic, raws in by_topic.items():
            for i in range(0, len(raws), MAX_SUBMIT):
                self._pass_on(topic, raws[i:i + MAX_SUBMIT], 0, "")

    def _pass_on(self, topic: str, raws: list[str], hops: int, from_key: str) -> int:
        """Towards the owner: to it when linked, else to every other linked subscriber
        that may read the topic (a relay that may not read never sees a post, SPEC.md
        section 14, "Replication": not even on its way to the owner)."""
        owner = current_owner(topic.split("/", 1)[0])  # its link is under its newest key
        links = self.board.links
        targets = [links[owner]] if owner in links and owner != from_key else [
            link for key, link in list(links.items())
            if key != from_key and self._reader(link, topic)]
        line = self.board.line("board-submit", f'"topic":{json.dumps(topic)},"hops":{hops},'
                                f'"recs":[{",".join(raws)}]')
        for link in targets:
            link.push(line, topic)
        return len(targets)

    def _reader(self, link: BoardLink, topic: str) -> bool:
        """Whether the peer may read ``topic`` now (the policy is loaded by whoever
        stored or passed the record: :meth:`run` and :meth:`on_submit` make sure)."""
        if topic not in link.subs:
            return False
        grant, via = link.subs[topic]
        return perms.may_read(link.conn.peer_key, topic=topic, owner=topic.split("/", 1)[0],
                              policy=self.board.policies.get(topic), now_ms=now_ms(),
                              grant=grant, via=via)

    # -- lines -----------------------------------------------------------------------

    async def on_submit(self, link: BoardLink, line: dict, raw: bytes) -> None:
        topic, hops = line.get("topic"), line.get("hops")
        if not isinstance(topic, str) or topic not in self.board.subs or not is_count(hops):
            return
        recs = recs_of(line, raw, MAX_SUBMIT)  # each decoded once
        if not recs or not self._budget(link, len(recs)):
            return
        await self.board.policy(topic)  # loaded for _reader
        if owned_by(topic, self.me):
            self._queued.append((link, topic, recs, hops))
            self._stamp_wake.set()
        else:
            await self._relay(link, topic, recs, hops)

    def _budget(self, link: BoardLink, n: int) -> bool:
        """``limits.board_submits_per_minute``: records one peer hands us a minute."""
        if not link.submits.take(n, self.engine.config.limits.board_submits_per_minute):
            self.board.stats["submits_refused"] += n
            return False
        return True

    async def stamper(self) -> None:
        """Stamp what came meanwhile in one store transaction a link and topic.

        The line handler only queues a submit: stamping waits for a durable
        commit, and a link's next line would wait behind it.  Whatever
        arrives while one batch commits goes into the next (a group commit),
        so the owner pays one fsync for many records.
        """
        while True:
            await self._stamp_wake.wait()
            self._stamp_wake = trio.Event()
            batch, self._queued = self._queued, []
            merged: dict[tuple[int, str],
                         tuple[BoardLink, str, list[tuple[str, object]], int]] = {}
            for link, topic, recs, hops in batch:
                got = merged.get((id(link), topic))
                if got is None:
                    merged[(id(link), topic)] = (link, topic, list(recs), hops)
                else:
                    got[2].extend(recs)
            for link, topic, recs, hops in merged.values():
                if link.conn.closed.is_set():
                    continue  # its author's host offers them again on another path
                try:
                    for i in range(0, len(recs), STAMP_BATCH):
                        await self._stamp(link, topic, recs[i:i + STAMP_BATCH], hops)
                except Exception:  # the store failed us: the authors' hosts offer them again
                    log.exception("board: stamping records of %s failed", topic)

    async def _stamp(self, link: BoardLink, topic: str, recs: list[tuple[str, object]],
                     hops: int) -> None:
        """On the owner: judge and stamp, then answer the link: the stamped record, or why not.

        ``recs``: each record's text and its value, decoded from the line once."""
        taken = await self.board.take([r for r, _d in recs], via=link.conn.peer_key, hops=hops,
                                      owner=True, docs=[d for _r, d in recs])
        back = [raw for rec in taken.new for raw in taken.wire(rec)]
        if taken.held:
            back += await self.engine.read(
                lambda c: [r for h in taken.held for r in sb.stamped_raws(c, topic, h)])
        if back:
            await self.board._forward(topic, back, 0, only=link)
        for h, why in taken.why.items():
            later = not final(why)
            doc = make_refusal(self.engine.identity, topic, h, why, later, now_ms())
            self.board.stats["records_unstamped"] += 1
            link.push(self.board.line("board-refused", '"doc":' + json.dumps(
                doc, separators=(",", ":"), ensure_ascii=False)), topic)

    async def _relay(self, link: BoardLink, topic: str, recs: list[tuple[str, object]],
                     hops: int) -> None:
        """Not the owner: answer with what we hold stamped, pass the rest on."""
        on: list[str] = []
        named: list[tuple[str, str, Record]] = []
        for r, doc in recs:
            try:
                rec = parse_unverified(r, doc=doc)
            except BoardError:
                continue
            if rec.topic != topic or rec.kind in ("topic", "stamp") or rec.author == rec.owner:
                continue
            named.append((rec.hash, r, rec))
        # Only a record offered again (its answer was lost, or the owner was away) can be
        # one we hold stamped by now: a first offer goes on without a store read.
        again = [h for h, _r, _rec in named if h in self.routes]
        held = await self.engine.read(
            lambda c: {h: sb.stamped_raws(c, topic, h) for h in again}) if again else {}
        now = trio.current_time()
        back: list[str] = []
        for h, r, rec in named:
            if held.get(h):
                back.extend(held[h])
                continue
            if now - self.passed.get(h, -PASS_S) < PASS_S:
                continue
            if not verify_record(rec):
                continue  # we carry only what its author signed
            self.passed[h] = now
            self.routes[h] = (link.conn.peer_key, now)
            on.append(r)
        if back:
            await self.board._forward(topic, back, 0, only=link)
        if on:
            self._pass_on(topic, on, min(hops + 1, 1 << 20), link.conn.peer_key)

    async def on_refused(self, link: BoardLink, line: dict) -> None:
        """The owner's refusal: ours is dropped (or offered again later), others' routed back."""
        doc = check_refusal(line.get("doc"))
        topic, h = doc["topic"], doc["of"]
        if topic not in self.board.subs:
            return
        if doc["later"]:
            gone = False
            if await self.engine.read(lambda c: _is_waiting(c, topic, h)):
                self.later[h] = doc["why"]
                return
        else:
            gone = await self.engine.writer.run(lambda c: sb.refuse_waiting(c, topic, h))
        if gone:
            self.later.pop(h, None)
            self.board.stats["records_refused_by_owner"] += 1
            self.engine.changes.publish({"kind": "board", "topic": topic, "hash": h,
                                         "rec": "refused", "why": doc["why"], "mine": True})
            return
        route = self.routes.get(h)
        back = self.board.links.get(route[0]) if route else None
        if back is not None and back is not link:
            back.push(self.board.line("board-refused", '"doc":' + json.dumps(
                doc, separators=(",", ":"), ensure_ascii=False)), topic)

    # -- holes in the owner's seqs -----------------------------------------------------

    def _saw(self, topic: str, seq: int) -> None:
        holes = self.holes.setdefault(topic, Holes())
        if holes.saw(seq):
            self.board.stats["seq_holes"] += 1
            self._check_soon(topic)

    def head(self, topic: str, head: dict) -> None:
        """The owner's head names its last seq: below it, we lack its newest records."""
        seq = head.get("seq", 0)
        if seq and self.holes.setdefault(topic, Holes()).behind(seq):
            self._check_soon(topic)

    def explained(self, topic: str, head: dict) -> None:
        """We hold what ``head`` names: its seqs we never saw are not withheld."""
        holes = self.holes.get(topic)
        if holes is not None:
            holes.explained(head.get("seq", 0))

    def _check_soon(self, topic: str) -> None:
        nursery = self.board._nursery
        if nursery is not None and topic not in self._checking:
            self._checking.add(topic)
            nursery.start_soon(self._check, topic)

    async def _check(self, topic: str) -> None:
        """Still missing after the exchanges under way had time: ask every peer again,
        once (a seq that never comes, say a record every host refuses, is not asked
        for without end)."""
        try:
            await trio.sleep(GAP_WAIT_S)
        finally:
            self._checking.discard(topic)
        holes = self.holes.get(topic)
        head = self.board.heads.get(topic) or {}
        if holes is None or not (holes.missing - holes.asked or holes.behind(head.get("seq", 0))):
            return
        # The missing seqs stay shown until they come or the owner's head explains
        # them (:meth:`explained`): asking again does not make a record less missing.
        holes.asked |= holes.missing
        self.board.stats["seq_gaps"] += 1
        await self.board.announce([topic], [])  # each peer answers with its document and a digest

    def view(self, c: sqlite3.Connection, topic: str) -> dict:
        """What ``awp topic show --json`` says of the stamps (runs on a reader)."""
        holes = self.holes.get(topic) or Holes()
        head = self.board.heads.get(topic) or {}
        mine = [{"hash": h, "why": self.later.get(h, "")} for (h,) in c.execute(
            "SELECT hash FROM board_records WHERE topic = ? AND waiting = 1 ORDER BY seq"
            " LIMIT 100", (topic,))]
        return {"top": sb.top_seq(c, topic) if owned_by(topic, self.me) else holes.top,
                "missing": sorted(holes.missing)[:100], "behind": holes.behind(head.get("seq", 0)),
                "waiting": mine}

    def _prune(self) -> None:
        now = trio.current_time()
        for k in [k for k, (_p, t) in self.routes.items() if now - t > ROUTE_S]:
            del self.routes[k]
        for k in [k for k, t in self.passed.items() if now - t > PASS_S]:
            del self.passed[k]
        while len(self.routes) > MAX_ROUTES:
            del self.routes[next(iter(self.routes))]


def _is_waiting(c: sqlite3.Connection, topic: str, h: str) -> bool:
    return c.execute("SELECT 1 FROM board_records WHERE topic = ? AND hash = ? AND waiting = 1",
                     (topic, h)).fetchone() is not None


__all__ = ["Sequencer"]
