"""Anti-entropy for one topic between two hosts: find the difference, move only that.

Sans-I/O.  A host's copy of a topic is a set of records, each known by its
``(ts, hash)``.  Two hosts compare *ranges* of time ``[lo, hi)`` (in
milliseconds), each summarised by how many records it holds there and a
fingerprint of their hashes.  Equal ranges are done.  A differing range is
split into :data:`FANOUT` narrower ones, until one side holds at most
:data:`LEAF` records in it; then the small side lists its hashes and the
other pushes exactly what is missing and asks for what it lacks.

So a host that missed 10,000 posts gets, besides the posts themselves, a few
digests and one list of the few hashes it already had in the busy ranges.
Only ranges at or after the later of the two hosts' retention floors are
compared: records one host already dropped are never sent back to it.

Message bodies (the engine adds the envelope, SPEC.md "The board"):

* ``{"floor": ms, "ranges": [R, ...]}`` where each ``R`` is one of
  ``{"lo", "hi", "n", "fp"}`` (a summary), ``{"lo", "hi", "ids": [...]}``
  (the sender's hashes in the range, all of them) or ``{"lo", "hi",
  "ask": true}`` (list yours, mine are many).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..wire.board import is_hash

FANOUT = 16
LEAF = 32
MAX_RANGES = 256  # ranges in one body that we answer; more are ignored
MAX_IDS = 4096  # hashes in one listed range that we read
_TOP = 2 ** 62


class Holdings:
    """The ``(ts, hash)`` of every record one host holds for one topic, in order."""

    def __init__(self, items: Iterable[tuple[int, str]] = ()) -> None:
        self._keys: list[tuple[int, str]] = sorted(set(items))
        self._set = {h for _ts, h in self._keys}
        self._hs = [h for _ts, h in self._keys]  # the hashes alone, in the same order: a
        # range's fingerprint joins a slice of them (a head digests the whole topic)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, h: object) -> bool:
        return h in self._set

    def add(self, ts: int, h: str) -> bool:
        if h in self._set:
            return False
        i = bisect_right(self._keys, (ts, h))
        self._keys.insert(i, (ts, h))
        self._hs.insert(i, h)
        self._set.add(h)
        return True

    def extend(self, items: Iterable[tuple[int, str]]) -> int:
        """Add many (what arrived since the last look); returns how many were new."""
        new: dict[str, tuple[int, str]] = {}
        for ts, h in items:
            if h not in self._set and h not in new:
                new[h] = (ts, h)
        keys = sorted(new.values())
        if keys and self._keys and keys[0] < self._keys[-1] and len(keys) > 64:
            self._keys.extend(keys)
            self._keys.sort()
            self._hs = [h for _ts, h in self._keys]
            self._set.update(new)
        elif keys and (not self._keys or keys[0] > self._keys[-1]):
            self._keys.extend(keys)  # the usual case: what arrived is the newest
            self._hs.extend(h for _ts, h in keys)
            self._set.update(new)
        else:
            for ts, h in keys:
                self.add(ts, h)
        return len(keys)

    def discard_below(self, floor: int) -> None:
        """Forget what retention dropped."""
        i = bisect_left(self._keys, (floor, ""))
        for _ts, h in self._keys[:i]:
            self._set.discard(h)
        del self._keys[:i]
        del self._hs[:i]

    def _bounds(self, lo: int, hi: int) -> tuple[int, int]:
        return bisect_left(self._keys, (lo, "")), bisect_left(self._keys, (hi, ""))

    def _slice(self, lo: int, hi: int) -> list[tuple[int, str]]:
        i, j = self._bounds(lo, hi)
        return self._keys[i:j]

    def ids(self, lo: int, hi: int) -> list[str]:
        i, j = self._bounds(lo, hi)
        return self._hs[i:j]

    def summary(self, lo: int, hi: int) -> tuple[int, str]:
        i, j = self._bounds(lo, hi)
        return max(0, j - i), fingerprint(self._hs[i:j])

    def hashes(self) -> set[str]:
        return set(self._set)


def fingerprint(hashes: Iterable[str]) -> str:
    """12 bytes of SHA-256 over the hashes in ``(ts, hash)`` order, as hex.

    One update over the joined hashes is the same digest as one update a
    hash, at a fraction of the calls (a head digests the whole topic).
    """
    return hashlib.sha256("".join(hashes).encode("ascii")).hexdigest()[:24]


@dataclass
class Step:
    """What to do after reading a peer's body."""

    reply: dict | None = None  # a body to send back, or None when this topic is settled
    push: list[str] = field(default_factory=list)  # records to send unasked (the peer lacks them)
    want: list[str] = field(default_factory=list)  # records to ask for (we lack them)
    truncated: bool = False  # the reply hit its bounds: open a fresh exchange afterwards


def _split(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    width = max(1, -(-(hi - lo) // parts))
    return [(a, min(a + width, hi)) for a in range(lo, hi, width)]


def _summary_ranges(h: Holdings, lo: int, hi: int) -> list[dict]:
    out = []
    for a, b in _split(lo, hi, FANOUT):
        n, fp = h.summary(a, b)
        out.append({"lo": a, "hi": b, "n": n, "fp": fp})
    return out


def _list(h: Holdings, lo: int, hi: int, room: int, out: list[dict], step: Step) -> int:
    """Add an ``ids`` range listing what we hold in ``[lo, hi)``, at most ``room`` hashes.

    A list must be complete for its range, so when the range holds more, the
    range is cut short at the millisecond of the first hash that does not
    fit, and the rest is left to a fresh exchange.  Returns how many were listed.
    """
    keys = h._slice(lo, hi)
    if len(keys) > room:
        step.truncated = True
        cut = keys[room][0]
        if cut > lo:
            hi = cut
            keys = [k for k in keys if k[0] < cut]
        else:
            keys = keys[:room]  # one millisecond holds more than a list: list what fits
    out.append({"lo": lo, "hi": hi, "ids": [k[1] for k in keys]})
    return len(keys)


def opening(h: Holdings, floor: int, now_ms: int, future_ms: int) -> dict:
    """The first body for a topic: summaries from ``floor`` to just past the future bound."""
    hi = max(floor + 1, now_ms + future_ms + 1)
    return {"floor": floor, "ranges": _summary_ranges(h, floor, hi)}


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and -_TOP < v < _TOP else None


def respond(h: Holdings, own_floor: int, body: object) -> Step:
    """Answer a peer's body; malformed ranges are skipped, never raised on."""
    step = Step()
    if not isinstance(body, dict):
        return step
    peer_floor = _int(body.get("floor"))
    floor = max(own_floor, peer_floor if peer_floor is not None else own_floor)
    ranges = body.get("ranges")
    if not isinstance(ranges, list):
        return step
    out: list[dict] = []
    push: set[str] = set()
    want: set[str] = set()
    listed = 0  # hashes listed in the reply, bounded like a want
    for r in ranges[:MAX_RANGES]:
        if len(out) + FANOUT > MAX_RANGES or listed > MAX_IDS - LEAF:
            # The reply is as large as a peer reads: the ranges not looked at
            # are compared again by a fresh exchange, which starts past what
            # this one settles.
            step.truncated = True
            break
        if not isinstance(r, dict):
            continue
        lo, hi = _int(r.get("lo")), _int(r.get("hi"))
        if lo is None or hi is None:
            continue
        lo = max(lo, floor)
        if hi <= lo:
            continue
        ids = r.get("ids")
        if isinstance(ids, list):
            theirs = {i for i in ids[:MAX_IDS] if is_hash(i)}
            mine = h.ids(lo, hi)
            push.update(i for i in mine if i not in theirs)
            want.update(i for i in theirs if i not in h)
            continue
        if r.get("ask") is True:
            if h.summary(lo, hi)[0] > MAX_IDS - listed and hi - lo > FANOUT:
                out.extend(_summary_ranges(h, lo, hi))  # too many to list: narrow it down
            else:
                listed += _list(h, lo, hi, MAX_IDS - listed, out, step)
            continue
        n_peer, fp_peer = _int(r.get("n")), r.get("fp")
        if n_peer is None or not isinstance(fp_peer, str):
            continue
        n, fp = h.summary(lo, hi)
        if (n, fp) == (n_peer, fp_peer):
            continue
        if n <= LEAF or hi - lo <= FANOUT:
            listed += _list(h, lo, hi, MAX_IDS - listed, out, step)
        elif n_peer <= LEAF:
            out.append({"lo": lo, "hi": hi, "ask": True})
        else:
            out.extend(_summary_ranges(h, lo, hi))
    step.push = sorted(push)
    step.want = sorted(want)
    if out:
        step.reply = {"floor": floor, "ranges": out}
    return step
