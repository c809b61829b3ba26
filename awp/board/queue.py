"""The work-queue arbiter: who holds which item, as a pure function of its log.

A queue topic's items are its top-level posts, oldest first by ``(ts,
hash)``.  One daemon decides every claim: the topic owner's.  It appends each
request to its log (durably) before answering, and its state is nothing but
that log replayed, so after ``kill -9`` it restarts into the same state and,
asked the same request again (same claimant, same ``req``) while that lease
is current, gives the same answer.  Exactly one claimant wins an item because one log orders all
claims; links that partition only delay requests, they never split the
decision.

Lease rules:

* ``claim`` hands out the oldest item that is neither done, dead, nor under
  an unexpired lease, for ``lease_ms``; the answer for an empty queue is no
  lease.
* ``renew``, ``release``, ``complete`` and ``fail`` count only from the
  lease's holder, naming the current lease, before it expires.
* An expired lease, or ``fail``, is a strike against its holder, and costs
  the item one attempt only when the holder had no current strike before
  it; after ``attempts`` of them the item is dead and never handed out
  again.  ``release`` gives it back without costing one.  So a worker's
  failures cost its standing before they cost the items: one in a bad run
  (a fail loop, a hoard left to expire) uses up at most one attempt of
  one item until its strikes lapse, and an item dies only when it has
  failed for several workers in good standing (or for one, in separate
  standing periods).
* A claimant with ``bar`` current strikes or more is refused every claim
  until they lapse (:data:`awp.board.market.STANDING_MS` after the last).
* ``remove`` (the item was deleted or hidden) ends any lease on it and
  makes it dead.
* The market (:mod:`awp.board.market`): a claim takes only an item whose
  ``needs`` its ``offers`` cover, and a ``fail`` or an expiry is a strike
  against the holder's standing (which orders claims that arrive together;
  the node decides that order before it logs them).
* Time in the log never goes backwards: each event's clock is the larger of
  its own and the previous one.

The log is compacted (:meth:`Arbiter.compact`): the whole state written as
one ``restore`` event an item, so replaying the short log gives the same
arbiter as replaying the long one.  Finished items stay in it (as one row
each) for as long as their post is held, or the post would come back as a
new item; once the post is gone they are forgotten.  Memory is bounded the
same way: what the arbiter holds is what a replay of its log would hold.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import asdict, dataclass, field, replace

from ..wire.timefmt import format_ts
from .market import STANDING_MS, STRIKE_BAR, Standing, covers

OPS = ("add", "remove", "claim", "renew", "release", "complete", "fail", "tick", "restore",
       "standing")


@dataclass(frozen=True)
class Event:
    op: str
    now: int  # the arbiter's clock, ms
    who: str = ""  # the claimant's key
    item: str = ""  # for ``add``: the item's hash
    ts: int = 0  # for ``add``: the item's ts
    lease: str = ""  # for renew/release/complete/fail
    req: str = ""  # for claim: the claimant's request id (retries repeat it)
    # for ``restore`` only: the rest of one item's state (``who`` is its holder)
    attempts: int = 0
    grants: int = 0
    until: int = 0
    end: str = ""  # "done", "dead" or "" (still to do)
    # the market (:mod:`awp.board.market`): an item's needs (``add``, ``restore``)
    # and a claimant's offers (``claim``); ``standing`` restores a worker's strikes
    # (``attempts`` of them, the last at ``until``)
    needs: tuple[str, ...] = ()
    offers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # a log row read back from JSON holds lists
        object.__setattr__(self, "needs", tuple(self.needs))
        object.__setattr__(self, "offers", tuple(self.offers))
    done_lease: str = ""  # for a done item: the lease that completed it (a retry is answered)

    def to_json(self) -> dict:
        """The fields that differ from their defaults: a log row as short as it can be."""
        return {k: v for k, v in asdict(self).items() if v or k in ("op", "now")}


@dataclass(frozen=True)
class Decision:
    """One answer; ``state`` is a lease record's state (SPEC.md), or "refused"/"empty"."""

    state: str
    item: str = ""
    holder: str = ""
    lease: str = ""
    until: int = 0
    why: str = ""
    again: bool = field(default=False, compare=False)  # a retried claim, answered again


@dataclass
class _Item:
    item: str
    ts: int
    attempts: int = 0
    grants: int = 0
    holder: str = ""
    lease: str = ""
    until: int = 0
    done: bool = False
    dead: bool = False
    req: str = ""  # the request id of the claim that made the current lease
    needs: tuple[str, ...] = ()
    done_lease: str = ""  # the lease that completed it, and its holder (``holder`` is cleared)
    done_by: str = ""

    @property
    def key(self) -> tuple[int, str]:
        return (self.ts, self.item)


@dataclass
class Arbiter:
    lease_ms: int
    attempts: int
    bar: int = STRIKE_BAR  # current strikes that bar a claimant (0: never barred)
    _items: dict[str, _Item] = field(default_factory=dict)  # every item, finished ones too
    _order: list[tuple[int, str]] = field(default_factory=list)  # (ts, item) of those to do
    _leases: dict[str, str] = field(default_factory=dict)  # current lease -> item
    _reqs: dict[tuple[str, str], Decision] = field(default_factory=dict)  # of current leases
    _done: dict[str, str] = field(default_factory=dict)  # lease that completed an item -> item
    _clock: int = 0
    standing: Standing = field(default_factory=Standing)  # workers' strikes (the market)

    @classmethod
    def replay(cls, lease_ms: int, attempts: int, log: list[Event]) -> Arbiter:
        a = cls(lease_ms, attempts)
        for ev in log:
            a.apply(ev)
        return a

    def apply(self, ev: Event) -> list[Decision]:
        """Apply ``ev`` and return what it decided (expiries first)."""
        if ev.op not in OPS:
            return [Decision("refused", why="unknown operation")]
        self._clock = max(self._clock, ev.now)
        out = self._expire()
        if ev.op == "add":
            self._add(ev.item, ev.ts, ev.needs)
        elif ev.op == "remove":
            out.extend(self._remove(ev.item))
        elif ev.op == "claim":
            out.append(self._claim(ev.who, ev.req, ev.offers))
        elif ev.op == "restore":
            self._restore(ev)
        elif ev.op == "standing":
            self.standing.set(ev.who, ev.attempts, ev.until)
        elif ev.op != "tick":
            out.append(self._act(ev.op, ev.who, ev.lease))
        return out

    # -- state ---------------------------------------------------------------------------

    def holder_of(self, item: str) -> str:
        it = self._items.get(item)
        return it.holder if it and it.lease and it.until > self._clock else ""

    def status(self, item: str) -> str:
        it = self._items.get(item)
        if it is None:
            return "unknown"
        if it.done:
            return "done"
        if it.dead:
            return "dead"
        return "claimed" if self.holder_of(item) else "open"

    def items(self) -> list[str]:
        return [it.item for it in sorted(self._items.values(), key=lambda it: it.key)]

    def __len__(self) -> int:
        return len(self._items)

    def next_expiry(self) -> int:
        """When the earliest current lease runs out (0: none is held)."""
        return min((self._items[h].until for h in self._leases.values()), default=0)

    def compact(self, keep: set[str]) -> list[Event]:
        """The state as a log of ``restore`` events, one an item, oldest first.

        Items not in ``keep`` (their post is no longer held) are forgotten,
        here and in the events, unless a lease on one is current: its
        holder may still complete it.
        """
        for h in [h for h, it in self._items.items() if h not in keep and not it.lease]:
            it = self._items.pop(h)
            if not (it.done or it.dead):
                del self._order[bisect_left(self._order, it.key)]
        self._done = {k: h for k, h in self._done.items() if h in self._items}
        return [Event("restore", self._clock, who=it.holder or it.done_by, item=it.item,
                      ts=it.ts, lease=it.lease, req=it.req, attempts=it.attempts,
                      grants=it.grants, until=it.until,
                      end="done" if it.done else "dead" if it.dead else "",
                      needs=it.needs, done_lease=it.done_lease)
                for it in sorted(self._items.values(), key=lambda it: it.key)] + [
            Event("standing", self._clock, who=w, attempts=n, until=last)
            for w, n, last in self.standing.items() if w in self.standing.strikes(self._clock)]

    def needs(self, item: str) -> tuple[str, ...]:
        it = self._items.get(item)
        return it.needs if it else ()

    def snapshot(self) -> list[dict]:
        """Every item, oldest first: status, holder, lease, until and attempts used."""
        out = []
        for h in self.items():
            it = self._items[h]
            out.append({"item": h, "status": self.status(h), "holder": self.holder_of(h),
                        "lease": it.lease if self.holder_of(h) else "",
                        "until": it.until if self.holder_of(h) else 0,
                        "attempts": it.attempts})
        return out

    # -- transitions ---------------------------------------------------------------------

    def _add(self, item: str, ts: int, needs: tuple[str, ...] = ()) -> None:
        if item not in self._items:
            self._items[item] = _Item(item, ts, needs=needs)
            insort(self._order, (ts, item))

    def _restore(self, ev: Event) -> None:
        done = ev.end == "done"
        it = _Item(ev.item, ev.ts, ev.attempts, ev.grants, "" if done else ev.who, ev.lease,
                   ev.until, done, ev.end == "dead", ev.req, ev.needs)
        if done and ev.done_lease:
            it.done_lease, it.done_by = ev.done_lease, ev.who
            self._done[ev.done_lease] = it.item
        self._items[it.item] = it
        if not (it.done or it.dead):
            insort(self._order, it.key)
        if it.lease:
            self._leases[it.lease] = it.item
            if it.req:
                self._reqs[(it.holder, it.req)] = Decision("claimed", it.item, it.holder,
                                                           it.lease, it.until)

    def _finish(self, it: _Item, *, done: bool) -> None:
        """Done or dead: never handed out again."""
        if not (it.done or it.dead):
            del self._order[bisect_left(self._order, it.key)]
        if done:
            it.done = True
        else:
            it.dead = True

    def _remove(self, item: str) -> list[Decision]:
        """The item was deleted by its author or hidden by the owner: never hand it out."""
        it = self._items.get(item)
        if it is None or it.done or it.dead:
            return []
        out = []
        if it.lease:
            out.append(Decision("released", it.item, it.holder, it.lease, it.until,
                                "item withdrawn"))
            self._end(it, failed=False)
        self._finish(it, done=False)
        return out

    def _expire(self) -> list[Decision]:
        """End the leases that ran out, in queue order (however they were made)."""
        out = []
        ran_out = [self._items[h] for h in self._leases.values()
                   if self._items[h].until <= self._clock]
        for it in sorted(ran_out, key=lambda it: it.key):
            out.append(Decision("expired", it.item, it.holder, it.lease, it.until))
            self._end(it, failed=True)
        return out

    def _end(self, it: _Item, *, failed: bool) -> None:
        del self._leases[it.lease]
        # the item pays only for a holder in good standing: its strikes pay for the rest
        charged = failed and not self.standing.count(it.holder, self._clock)
        if failed:
            self.standing.strike(it.holder, self._clock)
        self._reqs.pop((it.holder, it.req), None)
        it.holder, it.lease, it.until, it.req = "", "", 0, ""
        if charged:
            it.attempts += 1
            if it.attempts >= self.attempts:
                self._finish(it, done=False)

    def _claim(self, who: str, req: str, offers: tuple[str, ...] = ()) -> Decision:
        if not who:
            return Decision("refused", why="no claimant")
        key = (who, req)
        prev = self._reqs.get(key) if req else None
        if prev is not None and self._items[prev.item].lease == prev.lease:
            # a retry after a lost answer: the same lease, still current (and
            # nothing new to announce)
            return replace(prev, until=self._items[prev.item].until, again=True)
        struck = self.standing.count(who, self._clock)
        if self.bar and struck >= self.bar:
            return Decision("refused", why=(
                f"this claimant has {struck} strikes on this queue (fails or expired leases"
                f" within {STANDING_MS // 60000} minutes of each other): nothing is awarded to"
                f" it until {format_ts(self.standing.barred_until(who))}"))
        # ``_order`` holds only items still to do: the walk passes over current
        # leases, never over the queue's history
        for _ts, h in self._order:
            it = self._items[h]
            if it.lease or (it.needs and not covers(offers, it.needs)):
                continue
            it.grants += 1
            it.holder, it.lease, it.req = who, f"{h[:16]}.{it.grants}", req
            it.until = self._clock + self.lease_ms
            self._leases[it.lease] = h
            d = Decision("claimed", h, who, it.lease, it.until)
            if req:
                self._reqs[key] = d  # an empty answer is safe to give afresh
            return d
        return Decision("empty")

    def retry_of(self, who: str, req: str) -> bool:
        """Whether a claim ``(who, req)`` repeats one whose lease is current."""
        prev = self._reqs.get((who, req)) if req else None
        return prev is not None and self._items[prev.item].lease == prev.lease

    def held_by(self, who: str) -> int:
        """How many current leases ``who`` holds (the node caps it per claimant)."""
        return sum(1 for h in self._leases.values() if self._items[h].holder == who)

    def _act(self, op: str, who: str, lease: str) -> Decision:
        it = self._items.get(self._leases.get(lease, ""))
        if it is None or it.lease != lease:
            done = self._items.get(self._done.get(lease, ""))
            if op == "complete" and done is not None and done.done_by == who:
                # a retried complete whose answer was lost: it was committed, say so again
                return Decision("done", done.item, who, lease, 0, again=True)
            return Decision("refused", lease=lease, why="no such lease (expired or ended)")
        if it.holder != who:
            return Decision("refused", it.item, it.holder, lease, it.until, "not the holder")
        if op == "renew":
            it.until = self._clock + self.lease_ms
            return Decision("renewed", it.item, who, lease, it.until)
        until = it.until
        if op == "complete":
            self._end(it, failed=False)
            self._finish(it, done=True)
            it.done_lease, it.done_by = lease, who
            self._done[lease] = it.item
            return Decision("done", it.item, who, lease, until)
        self._end(it, failed=op == "fail")
        return Decision("failed" if op == "fail" else "released", it.item, who, lease, until)
