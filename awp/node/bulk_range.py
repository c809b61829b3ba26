"""Verified byte ranges of a bulk file a peer sent us (``awp fetch --range``).

The msg that offered the file carried its piece hashes, so any part of it can
be checked without the rest: the pieces holding the range are taken from our
own copy where we hold them verified (and they still match), and asked for on
a side connection otherwise, exactly as a whole-file fetch asks.  Nothing is
written to the home: the bytes go to the local caller piece by piece, each
one only after its hash matched, so memory holds one piece at a time.  This
works for a file we refused whole (over our quota, say): its description is
kept for this.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ..store import bulk as store
from ..wire import bulk as wire
from .bulk_side import Side, SideClosed, dial

if TYPE_CHECKING:
    from .engine import Engine

_ROUNDS = 4  # times one piece may fail its check before the range is given up


class RangeError(Exception):
    """The range cannot be served: no such file (404), a bad range (400), no way
    to the peer (502); ``status`` is the local API's answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class RangePlan:
    """What one range request will read: the file and which pieces come from where."""

    ref: str
    name: str
    desc: wire.Description
    start: int
    end: int  # exclusive
    local: str  # our copy of the file ("" when we hold none)
    have: bytes

    @property
    def remote(self) -> list[int]:
        """Pieces of the range we do not hold verified."""
        return [i for i in wire.pieces_of(self.start, self.end, self.desc.piece)
                if not (self.local and store.has(self.have, i))]

    def header(self) -> dict[str, str]:
        return {"x-awp-ref": self.ref, "x-awp-root": self.desc.root,
                "x-awp-range": f"{self.start}-{self.end - 1}/{self.desc.size}",
                "x-awp-length": str(self.end - self.start)}


async def plan(engine: Engine, key: str, name: str, text: str | None) -> RangePlan:
    """Find the file ``key`` offered us by ref or root and check the range."""
    def q(c):
        r = store.offered(c, key, name)
        if r is None:
            return None
        local = ""
        if r["status"] in ("fetching", "complete"):
            local = store.data_path(c, engine.blobs_dir, key, r["ref"])
        return r, local

    found = await engine.read(q)
    if found is None:
        raise RangeError(404, f"{key[:18]}… sent us no bulk file with ref or root {name!r}"
                         " (awp blobs lists them)")
    r, local = found
    desc = store.description(r)
    try:
        start, end = wire.parse_range(text, desc.size)
    except wire.BulkError as e:
        raise RangeError(400, str(e)) from None
    return RangePlan(r["ref"], r["name"] or "", desc, start, end,
                     local if local and os.path.exists(local) else "", bytes(r["have"]))


async def open_side(engine: Engine, key: str, p: RangePlan) -> Side | None:
    """The side connection the range needs (None when we hold every piece of it);
    dialed before anything is sent, so an unreachable peer is a clear error."""
    if not p.remote:
        return None
    try:
        return await dial(engine, key)
    except SideClosed as e:
        raise RangeError(502, f"cannot reach {key[:18]}… for pieces {p.remote[:8]}: {e}") from None


async def stream(engine: Engine, key: str, p: RangePlan,
                 side: Side | None) -> AsyncIterator[bytes]:
    """The range's bytes, a verified piece at a time (a piece of our copy that no
    longer matches is taken from the peer, dialed then if it was not yet)."""
    try:
        for i in wire.pieces_of(p.start, p.end, p.desc.piece):
            off, n = wire.piece_span(p.desc.size, p.desc.piece, i)
            data = None
            if p.local and store.has(p.have, i):
                data = await trio.to_thread.run_sync(_read_checked, p.local, off, n,
                                                     p.desc.hash_of(i))
            if data is None:
                if side is None:
                    side = await dial(engine, key)
                data = await _fetch_piece(side, p, i, off, n)
            lo, hi = max(p.start, off) - off, min(p.end, off + n) - off
            yield bytes(memoryview(data)[lo:hi])
    finally:
        if side is not None:
            await side.aclose()


async def _fetch_piece(side: Side, p: RangePlan, i: int, off: int, n: int) -> bytearray:
    for _ in range(_ROUNDS):
        await side.send_line({"t": "want", "ref": p.ref, "i": i})
        head = await side.line()
        if head.get("t") == "err":
            raise SideClosed(f"the sender refused: {str(head.get('detail'))[:200]}")
        if head.get("t") != "piece" or head.get("i") != i or head.get("n") != n:
            raise SideClosed(f"expected piece {i} of {n} bytes, got {str(head)[:200]}")
        data = await side.exactly(n)
        if wire.piece_hash(data) == p.desc.hash_of(i):
            return data
    raise SideClosed(f"piece {i} failed its check {_ROUNDS} times")


def _read_checked(path: str, off: int, n: int, want: bytes) -> bytes | None:
    """Thread: piece bytes from our copy, or None when they no longer match."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.pread(fd, n, off)
    finally:
        os.close(fd)
    return data if len(data) == n and wire.piece_hash(data) == want else None
