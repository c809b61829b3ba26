"""The board's replication rules for one host, without any I/O.

Built like :mod:`awp.node.session`: the replica is fed events (a link came
up or went down, a peer's ``board-sub``, records stored, a head, a digest
step the store worked out, the time) and answers with actions
(:mod:`awp.board.replica_actions`) for a driver to carry out: the daemon's
trio code (:mod:`awp.node.board`) with the store and sockets, or the
simulator (``bench/sim.py``) with an in-memory store and a simulated
network.  It holds no socket, no store and no clock, so the rules below
are tested on a fake clock (``tests/unit/test_board_core.py``):

* **Take and dedupe.**  Which records are new is the store's answer (the
  one place that commits, names records by hash and turns away what it
  holds); the replica forwards exactly those and nothing else, so a record
  already held ends its flood here.
* **Forward** a new record at once to every other link that lists the
  topic, never back to the link it came from, carrying one more ``hops``
  (saturating at :data:`HOPS_CAP`); our own records leave with 0.
* **Heads.**  The owner's signed head is kept only when newer (by its
  time) than the one held, passed on to every other link, and looked at
  :data:`GAP_WAIT_S` later against the head held when the look began: a
  shortfall then makes us list the topic again to every link, so each
  peer answers with its document and a digest, and another path fills the
  gap.  An owner signs a head of each topic that changed at most every
  :data:`HEAD_S`, and of every topic at least every ``every`` seconds.
* **Link up, link down.**  A new link gets our ``board-sub``; for each
  topic both sides hold, the side with the smaller key opens the digest
  exchange on connect, and whoever receives a later ``board-sub`` answers
  it.  Every :data:`RESYNC_S` each link compares each shared topic again.
  A link that went down is forgotten; coming back up is a new link.
* **Digests** (:mod:`awp.board.sync`): the store works out the step; the
  replica sends the reply, pushes what the peer lacks (hops 0) and asks
  for what we lack in wants of at most :data:`MAX_WANT` hashes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..wire.board import owned_by
from . import replica_actions as A

HOPS_CAP = 1 << 20  # ``hops`` is a count for people reading the store; it stops growing here
HEAD_HOPS = 64  # a head travels like a record; newer-only (by ts) is what stops it
MAX_SUBS = 256  # topics in one board-sub
MAX_WANT = 4096  # hashes in one board-want
RESYNC_S = 300.0
HEAD_S = 2.0  # an owner signs a new head of a changed topic at most this often
GAP_WAIT_S = 5.0  # a subscriber looks for gaps against a head this long after it came

Action = tuple
Reads = Callable[[str, str], bool]  # (peer key, topic) -> may it


def next_hops(hops: int) -> int:
    """The ``hops`` a forwarded record carries: one more, saturating at :data:`HOPS_CAP`."""
    return min(hops + 1, HOPS_CAP)


def _lists(key: str, topic: str, peers: dict) -> bool:
    return topic in peers[key].subs


@dataclass
class Peer:
    """What the replica knows of one link: what the peer subscribes to."""

    subs: dict[str, tuple[object, object]] = field(default_factory=dict)  # topic -> grant, via
    heard_sub: bool = False  # its first board-sub (the one sent on connect) came


class Replica:
    """One host's replication decisions; see the module's docstring."""

    def __init__(self, me: str, *, now: float, resync_s: float = RESYNC_S,
                 gap_wait_s: float = GAP_WAIT_S) -> None:
        self.me = me
        self.subs: set[str] = set()  # topics we subscribe to
        self.peers: dict[str, Peer] = {}  # peer key -> its link, in the order links came
        self.heads: dict[str, dict] = {}  # topic -> the owner's newest signed head we hold
        self.head_via: dict[str, str] = {}  # topic -> the peer that brought that head
        self.resync_s = resync_s
        self.gap_wait_s = gap_wait_s
        self._last_resync = now
        self._gap_first: dict[str, dict | None] = {}  # topic -> head its pending check uses
        self._signed_at: dict[str, float] = {}  # our topic -> when we last signed its head
        self._dirty: set[str] = set()  # our topics changed since their last head
        self._stale_since: dict[str, float] = {}  # topic -> when we last said it is stale

    def start(self, now: float) -> None:
        """The driver's clock starts at ``now`` (the first resync is due a period on)."""
        self._last_resync = now

    def ours(self, topic: str) -> bool:
        return owned_by(topic, self.me)

    # -- links ------------------------------------------------------------------------------

    def link_up(self, key: str) -> list[Action]:
        """A link to ``key`` is up (a new connection): it gets our subscriptions."""
        self.peers.pop(key, None)
        self.peers[key] = Peer()
        return [(A.SUB, [key], sorted(self.subs), [])]

    def link_down(self, key: str) -> list[Action]:
        """The link to ``key`` ended: nothing more goes to it until it comes up again."""
        self.peers.pop(key, None)
        return []

    def readers(self, topic: str, except_key: str = "") -> list[str]:
        """Links that list ``topic``, but ``except_key`` (the driver checks each grant)."""
        return [k for k, p in self.peers.items() if k != except_key and topic in p.subs]

    def on_sub(self, key: str, entries: Iterable[tuple[str, object, object]],
               dropped: Iterable[str], *, full: Callable[[], bool] = lambda: False,
               may_read: Reads = lambda k, t: True,
               may_see_doc: Reads = lambda k, t: True) -> Iterator[Action]:
        """A ``board-sub`` from ``key``: ``entries`` of checked topics, with grant and via.

        Actions come one at a time, so ``full`` (whether the link's queue is
        full) is asked after the driver carried out the ones before.
        """
        peer = self.peers.setdefault(key, Peer())
        added = []
        for topic, grant, via in entries:
            added.append(topic)
            peer.subs.pop(topic, None)  # re-listed: now the newest entry
            peer.subs[topic] = (grant, via)
        drop = list(dropped)
        for topic in drop:
            peer.subs.pop(topic, None)
        if len(peer.subs) > 4 * MAX_SUBS:  # a peer cannot make us remember without end
            for topic in list(peer.subs)[:len(peer.subs) - 4 * MAX_SUBS]:
                del peer.subs[topic]
        heard, peer.heard_sub = peer.heard_sub, True
        yield (A.HEARD, key, [t for t in dict.fromkeys(added) if t in self.subs], drop)
        for topic in dict.fromkeys(added):
            if topic not in self.subs:
                if self.ours(topic) and not full():
                    yield (A.NONE, key, topic)  # a hint, dropped when the link is full
                continue
            if full():  # an answer now would only be dropped: sync once it drains
                yield (A.RESYNC, key, [topic])
                continue
            if may_see_doc(key, topic):
                yield (A.DOC, key, topic)
            if not may_read(key, topic):
                continue
            if topic in self.heads:
                yield (A.HEAD, topic, self.heads[topic], 0, [key])
            # On connect the smaller key opens; a later board-sub (a new
            # subscription, a new grant) is answered by whoever receives it.
            if heard or self.me < key:
                yield (A.OPEN, key, topic)

    # -- our subscriptions ----------------------------------------------------------------

    def subscribe(self, topic: str) -> list[Action]:
        if topic in self.subs:
            return []
        self.subs.add(topic)
        out: list[Action] = [(A.SUB, list(self.peers), [topic], [])]
        out += [(A.HEARD, k, [topic], []) for k in self.readers(topic)]
        return out

    def unsubscribe(self, topic: str) -> list[Action]:
        if topic not in self.subs:
            return []
        self.subs.discard(topic)
        return [(A.SUB, list(self.peers), [], [topic])]

    # -- records ----------------------------------------------------------------------------

    def stored(self, topic: str, raws: list[str], hops: int, via: str = "") -> list[Action]:
        """The store kept ``raws`` of ``topic`` for the first time (from ``via``, or
        ours when empty): they go on at once; what it already held goes nowhere."""
        self.changed(topic)
        if not raws:
            return []
        return [(A.FORWARD, topic, raws, next_hops(hops) if via else 0,
                 self.readers(topic, via))]

    def stored_doc(self, topic: str, raw: str, hops: int, via: str = "") -> list[Action]:
        """A newer topic document was kept: it goes on, and every link that lists the
        topic compares again (the document may let it read now)."""
        self.changed(topic)
        out: list[Action] = [(A.RESYNC, k, [topic]) for k in self.readers(topic)]
        out.append((A.FORWARD_DOC, topic, raw, next_hops(hops), self.readers(topic, via)))
        return out

    def changed(self, topic: str) -> None:
        if self.ours(topic):
            self._dirty.add(topic)

    # -- heads ------------------------------------------------------------------------------

    def heads_due(self, now: float, every: float) -> list[str]:
        """Our topics to sign a head of now: each that changed, and each not signed for
        ``every`` seconds (0: only those that changed)."""
        idle = {t for t in self.subs if self.ours(t)
                and now - self._signed_at.get(t, -every) >= every} if every > 0 else set()
        topics, self._dirty = sorted(self._dirty | idle), set()
        for t in topics:
            self._signed_at[t] = now
        return topics

    def signed_head(self, topic: str, head: dict) -> list[Action]:
        """We signed ``head``: it goes to every link that lists the topic."""
        self.heads[topic] = head
        return [(A.HEAD, topic, head, 0, self.readers(topic))]

    def on_head(self, key: str, head: dict, hops: object, *,
                newer: Callable[[dict, dict], bool]) -> list[Action]:
        """A checked head from ``key``; ``newer(a, b)``: whether ``a`` is dated after ``b``."""
        if not isinstance(hops, int) or isinstance(hops, bool) or not 0 <= hops < HEAD_HOPS:
            return []
        topic = head["topic"]
        if topic not in self.subs or self.ours(topic):
            return []
        held = self.heads.get(topic)
        if held is not None and not newer(head, held):
            # the same head again from another path is not news
            return [] if held["sig"] == head["sig"] else [(A.STAT, "heads_old")]
        self.heads[topic] = head
        self.head_via[topic] = key
        out: list[Action] = [(A.KEEP_HEAD, head),
                             (A.HEAD, topic, head, hops + 1, self.readers(topic, key))]
        if topic not in self._gap_first:  # one check a topic at a time
            self._gap_first[topic] = self.heads.get(topic)
            out.append((A.WAIT_GAP, topic, self.gap_wait_s))
        return out

    def stale(self, topic: str, now_ms: int, stale_heads: int,
              ts_of: Callable[[dict], int]) -> dict | None:
        """``{"since", "via", "heads"}`` when the owner's newest head we hold is
        ``stale_heads`` heads overdue at ``now_ms`` (by the owner's own promise,
        ``every``), else None.  A relay that forwards nothing at all, heads
        included, shows no gap: only this silence.  ``ts_of``: a head's time (ms)."""
        head = self.heads.get(topic)
        every = head.get("every", 0) if head else 0
        if not every:
            return None
        since = ts_of(head)  # type: ignore[arg-type]
        overdue = (now_ms - since) // every
        if overdue < max(1, stale_heads):
            return None
        return {"since": since, "via": self.head_via.get(topic, ""), "heads": int(overdue)}

    def judge_staleness(self, now: float, now_ms: int, stale_heads: int,
                        ts_of: Callable[[dict], int]) -> list[Action]:
        """Say so once when a topic goes stale (``(STALE, topic, st)``), and ask every
        peer for it then and every ``stale_heads`` heads' worth after: another path
        may carry what this one froze."""
        out: list[Action] = []
        for topic in sorted(t for t in self.heads if t in self.subs):
            st = self.stale(topic, now_ms, stale_heads, ts_of)
            if st is None:
                self._stale_since.pop(topic, None)
                continue
            last = self._stale_since.get(topic)
            every_s = self.heads[topic]["every"] / 1000 * max(1, stale_heads)
            if last is not None and now - last < every_s:
                continue
            if last is None:
                out.append((A.STALE, topic, st))
            self._stale_since[topic] = now
            out.append((A.SUB, list(self.peers), [topic], []))
        return out

    def gap_due(self, topic: str) -> list[Action]:
        """The wait of a gap check is over: compare with the head it began with."""
        first = self._gap_first.pop(topic, None)
        return [] if first is None else [(A.CHECK_GAP, topic, first)]

    def gap_checked(self, topic: str, head: dict, lacking: bool) -> list[Action]:
        """The store compared our copy with ``head``: a shortfall asks every peer again."""
        if not lacking:
            return [(A.EXPLAINED, topic, head)]
        return [(A.STAT, "head_gaps"), (A.SUB, list(self.peers), [topic], [])]

    # -- anti-entropy -----------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        """The time: every :attr:`resync_s` each link compares each shared topic again."""
        if now - self._last_resync < self.resync_s:
            return []
        self._last_resync = now
        return [(A.RESYNC, k, [t for t in p.subs if t in self.subs])
                for k, p in self.peers.items()]

    def digest_step(self, key: str, topic: str, reply: dict | None, push: list[str],
                    want: list[str], truncated: bool) -> list[Action]:
        """The store answered a peer's digest (:func:`awp.board.sync.respond`)."""
        out: list[Action] = []
        if reply is not None:
            out.append((A.DIGEST, key, topic, reply))
        if truncated:  # the reply was as large as allowed: start afresh after it
            out.append((A.RESYNC, key, [topic]))
        if push:
            out.append((A.FORWARD, topic, push, 0, [key]))
        out += [(A.WANT, key, topic, want[i:i + MAX_WANT]) for i in range(0, len(want), MAX_WANT)]
        return out


__all__ = ["HOPS_CAP", "Peer", "Replica", "next_hops"]
