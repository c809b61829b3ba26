"""The owner's award window: claims that arrive together are served best bid first.

A claim that may lose to another one does not take an item at once.  It
opens a window of ``limits.board_award_window`` (50 ms by default) on its
topic; every claim on that topic arriving before the window closes joins
it, and when it closes they are decided in one store transaction, in
:func:`awp.board.market.award_order` (fewest strikes, lowest price,
shortest expected time, earliest ask).  Each is then an ordinary ``claim``
event in the arbiter's log, in that order, so a replay after ``kill -9``
gives the same awards; a window that had not been committed when the owner
died left nothing behind, and its claimants' retries (same ``req``) start
over.

A claim that nothing could rank below is decided at once: no window is
open on its topic, it carries no bid, and its claimant has no strikes.
Waiting would only let a later claim go first that ranks the same (an
unbid clean claim, which arrives later, so ranks after it) or better (a
bid), and a queue whose workers do not bid would pay the window on every
claim for nothing.  A bid or a strike still waits the window, so a bidder
or a clean worker arriving within it is served first.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ..board.market import Ask, award_order
from ..board.queue import Decision, Event
from ..wire.board import Record
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .board_queue import BoardQueue


@dataclass
class _Waiting:
    ask: Ask
    done: trio.Event = field(default_factory=trio.Event)
    result: tuple[Decision, Record | None] | None = None
    error: BaseException | None = None


class AwardWindow:
    """Batches one host's claims per topic and decides each batch in award order."""

    def __init__(self, queue: BoardQueue) -> None:
        self.queue = queue
        self._open: dict[str, list[_Waiting]] = {}
        self._seq = 0

    def _count(self, n: int) -> None:
        """``claims_in_window`` in the board's status: claims waiting for their award."""
        stats = self.queue.board.stats
        stats["claims_in_window"] = stats.get("claims_in_window", 0) + n

    def _window(self) -> float:
        return self.queue.engine.config.limits.board_award_window

    async def claim(self, topic: str, who: str, req: str,
                    offers: tuple[str, ...], bid) -> tuple[Decision, Record | None]:
        """Join (or open) the topic's window; the answer once the window is decided."""
        self._seq += 1
        me = _Waiting(Ask(who, req, offers, bid, self._seq))
        if topic not in self._open and not bid.to_json():
            with trio.CancelScope(shield=True):  # as a window's: decided, then spread
                alone = await self._decide(topic, [me], alone=True)
            if alone:
                return self._result(me)
        batch = self._open.get(topic)
        self._count(+1)
        if batch is not None:
            batch.append(me)
        else:
            batch = self._open[topic] = [me]
            # The opener decides for everyone: shielded, so a claimant that goes
            # away (its HTTP caller, its link) cannot strand the others.
            with trio.CancelScope(shield=True):
                await trio.sleep(self._window())
                del self._open[topic]
                self._count(-len(batch))
                await self._decide(topic, batch)
        await me.done.wait()
        return self._result(me)

    @staticmethod
    def _result(w: _Waiting) -> tuple[Decision, Record | None]:
        if w.error is not None:
            raise w.error
        assert w.result is not None
        return w.result

    async def _decide(self, topic: str, batch: list[_Waiting], *, alone: bool = False) -> bool:
        """Decide ``batch`` in award order and answer each; ``alone``: a claim decided
        without a window, unless its claimant has strikes (False: it was not decided)."""
        q = self.queue

        def run(c: sqlite3.Connection) -> list[tuple[_Waiting, Decision, list[Record]]] | None:
            strikes = q.strikes(c, topic)
            if alone and strikes.get(batch[0].ask.who):
                return None  # a struck claimant waits the window: a clean one may come
            order = award_order([w.ask for w in batch], strikes)
            by_seq = {w.ask.seq: w for w in batch}
            now = now_ms()
            out = []
            for a in order:
                ev = Event("claim", now, who=a.who, req=a.req, offers=a.offers)
                answer, recs = q._decide(c, topic, ev)
                out.append((by_seq[a.seq], answer, recs))
            return out

        try:
            decided = await q.engine.writer.run(run)
        except Exception as e:  # the transaction was undone: replay the log next time
            q.forget()
            for w in batch:
                w.error = e
                w.done.set()
            return True
        if decided is None:
            return False
        fresh: list[Record] = []
        for _w, answer, recs in decided:
            fresh += [r for r in recs if not answer.again or r.doc.get("lease") != answer.lease]
        try:
            await q._spread(fresh)
        finally:
            for w, answer, recs in decided:
                mine = [r for r in recs if r.doc.get("lease") == answer.lease
                        and r.doc.get("state") == answer.state]
                w.result = (answer, mine[-1] if mine else None)
                q.answers.claimed(topic, w.ask.who, w.ask.req, answer, w.result[1])
                w.done.set()
        return True
