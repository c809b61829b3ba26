"""The work market's pure rules: needs, offers, bids, standing and the award order.

An item (a queue topic's top-level post) may say what it ``needs`` (tags
such as ``gpu`` or ``claude``); a claimant says what it ``offers`` and may
bid a price and an expected time.  The owner's arbiter hands an item only to
a claimant whose offers cover its needs, and when several claims arrive
within one award window it serves them in :func:`award_order`: fewest
recent strikes first, then the lowest price, then the shortest expected
time, then the earliest ask.  A strike is a ``fail`` or an expired lease; it
counts for :data:`STANDING_MS` after the latest one (SPEC.md section 14,
"The market").

Everything here is a function of its arguments, so the arbiter's log
replays to the same awards on every restart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..wire.board import BoardError, check_tags

STANDING_MS = 10 * 60 * 1000  # how long a worker's strikes count against it
STRIKE_BAR = 10  # current strikes that bar a worker from awards (limits.board_strikes_bar):
#                 more than a crashed host holding its 8 leases earns
NO_BID = 2 ** 53  # the price and time of a claim that bids nothing: after every bid

__all__ = ["STRIKE_BAR", "Ask", "Bid", "BoardError", "Standing", "award_order", "check_tags",
           "covers", "needs_of", "parse_tags"]


def parse_tags(text: str, what: str) -> tuple[str, ...]:
    """``gpu,claude, linux`` as a checked tag list (for command lines)."""
    return check_tags([t.strip().lower() for t in text.split(",") if t.strip()], what)


def needs_of(doc: dict) -> tuple[str, ...] | None:
    """An item's needs from its post record; None when the field is malformed.

    Hosts check ``needs`` when they take a record (:mod:`awp.wire.board`),
    so None only happens for records taken before that check existed: such
    an item needs something no claimant can offer, and is never handed out.
    """
    try:
        return check_tags(doc.get("needs", []), "needs")
    except BoardError:
        return None


def covers(offers: Iterable[str], needs: Iterable[str] | None) -> bool:
    """Whether a claimant offering ``offers`` may take an item needing ``needs``."""
    return needs is not None and set(needs) <= set(offers)


@dataclass(frozen=True)
class Bid:
    """A claimant's price (any unit the owner and workers agree on) and expected time."""

    price: int = NO_BID
    ms: int = NO_BID

    @classmethod
    def check(cls, value: object) -> Bid:
        """``{"price": int, "ms": int}`` (either may be left out); :class:`BoardError`."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise BoardError("bid: an object {price, ms}")
        out = {}
        for f in ("price", "ms"):
            v = value.get(f, NO_BID)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= NO_BID:
                raise BoardError(f"bid {f}: an integer from 0 to {NO_BID}")
            out[f] = v
        return cls(**out)

    def to_json(self) -> dict:
        return {k: v for k, v in (("price", self.price), ("ms", self.ms)) if v != NO_BID}


@dataclass(frozen=True)
class Ask:
    """One claim waiting in an award window."""

    who: str
    req: str
    offers: tuple[str, ...] = ()
    bid: Bid = field(default_factory=Bid)
    seq: int = 0  # arrival order at the arbiter


def award_order(asks: list[Ask], strikes: dict[str, int]) -> list[Ask]:
    """The order in which one window's claims are served (SPEC.md section 14).

    Fewest current strikes, lowest price, shortest expected time, earliest
    arrival: a total order, since arrival numbers are unique.
    """
    return sorted(asks, key=lambda a: (strikes.get(a.who, 0), a.bid.price, a.bid.ms, a.seq))


@dataclass
class Standing:
    """Strikes per worker: a fail or an expired lease, counted until a quiet spell ends.

    ``last`` is when the newest strike happened; all of a worker's strikes
    are forgotten :data:`STANDING_MS` after it, so a worker that delivers
    again regains its standing.
    """

    _strikes: dict[str, tuple[int, int]] = field(default_factory=dict)  # who -> (n, last)

    def strike(self, who: str, now: int) -> None:
        n, last = self._strikes.get(who, (0, 0))
        if now - last >= STANDING_MS:
            n = 0
        self._strikes[who] = (n + 1, now)

    def count(self, who: str, now: int) -> int:
        """``who``'s current strikes at ``now`` (0 once they lapsed), changing nothing."""
        n, last = self._strikes.get(who, (0, 0))
        return n if n and now - last < STANDING_MS else 0

    def barred_until(self, who: str) -> int:
        """When ``who``'s strikes lapse (ms): the end of a bar."""
        return self._strikes.get(who, (0, 0))[1] + STANDING_MS

    def set(self, who: str, n: int, last: int) -> None:
        self._strikes[who] = (n, last)

    def strikes(self, now: int) -> dict[str, int]:
        """Current strikes of every worker that has any (and forgets the lapsed)."""
        for who in [w for w, (_n, last) in self._strikes.items() if now - last >= STANDING_MS]:
            del self._strikes[who]
        return {w: n for w, (n, _last) in self._strikes.items()}

    def items(self) -> list[tuple[str, int, int]]:
        return [(w, n, last) for w, (n, last) in sorted(self._strikes.items())]
