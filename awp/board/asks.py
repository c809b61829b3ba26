"""Which signed asks a queue's owner decides: each claimant's, once, fresh (issue 40.3).

An ask (a claimant's signed queue request, :func:`awp.wire.board.make_ask`)
can be captured by any host it crosses and sent again.  The owner used to
remember the last 4,096 signatures of any asks, shared by everyone, so a
stranger sending 4,200 asks signed by fresh keys pushed a worker's real ask
out, and replaying it then took a new item in the worker's name.

The rule here, kept per claimant so that nobody's asks can push out anyone
else's, and filled only with asks of claimants the owner has already found
granted (the node checks before it asks us):

* an ask dated further than ``window_ms`` from the owner's clock is
  refused (a claimant's clock that far off learns so from the error);
* a claimant's daemon dates its asks from a strictly rising clock, so the
  owner keeps its *high-water mark* (the newest ask time seen) and refuses
  any ask dated ``reorder_ms`` or more before it: only asks that took
  different paths may arrive out of order, and not by much;
* within that span every ask is decided once, by its signature; at most
  ``per_claimant`` signatures are kept, and past that the floor rises to
  the oldest one dropped, so a flood of one's own asks only narrows one's
  own span;
* at most ``claimants`` claimants are tracked; the one idle longest is
  forgotten first, and its high-water mark becomes a floor for every
  claimant not tracked, so forgetting never reopens a replay.

Pure (no clock of its own, no I/O), so the rule is tested on its own.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

STALE = "stale"  # outside the window from the owner's clock
REPLAYED = "replayed"  # met before, or older than what the claimant asked since


@dataclass
class _Claimant:
    high: int = 0  # the newest ask time seen
    floor: int = 0  # asks dated at or before this are refused
    sigs: dict[str, int] = field(default_factory=dict)  # signature -> ask time, above floor


@dataclass
class AskGuard:
    window_ms: int
    reorder_ms: int
    per_claimant: int
    claimants: int
    _by: OrderedDict[str, _Claimant] = field(default_factory=OrderedDict)  # least recent first
    _forgotten: int = 0  # the highest mark of a claimant no longer tracked

    def admit(self, who: str, sig: str, ts: int, now: int) -> str:
        """``""`` when the ask is to be decided (and it is remembered), else why not."""
        if abs(ts - now) > self.window_ms:
            return STALE
        c = self._by.get(who)
        if c is None:
            c = _Claimant(floor=self._forgotten)
        if ts <= c.floor or sig in c.sigs:
            return REPLAYED
        self._by[who] = c
        self._by.move_to_end(who)
        c.sigs[sig] = ts
        c.high = max(c.high, ts)
        self._raise(c, c.high - self.reorder_ms)
        while len(c.sigs) > self.per_claimant:
            self._raise(c, min(c.sigs.values()))
        while len(self._by) > self.claimants:
            _who, old = self._by.popitem(last=False)
            self._forgotten = max(self._forgotten, old.high)
        return ""

    @staticmethod
    def _raise(c: _Claimant, floor: int) -> None:
        if floor > c.floor:
            c.floor = floor
            c.sigs = {s: t for s, t in c.sigs.items() if t > floor}

    def __len__(self) -> int:
        return len(self._by)


__all__ = ["REPLAYED", "STALE", "AskGuard"]
