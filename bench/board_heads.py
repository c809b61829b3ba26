"""What a head and a gap check cost with a topic's size: a full read against the kept copy.

The owner signs a head of a changed topic every 2 s and each subscriber
checks one at most every 5 s (issue 24); both look at everything the host
holds of the topic.  For topics of ``--sizes`` records in a real SQLite file,
with ``--new`` records arriving between two looks, this prints the median
time of the head's digest body and of a gap check, read in full from the
store (``sb.holdings``, what both did before) and from the copy kept in
memory (``awp.store.board_held``, what they do now).

Run: python bench/board_heads.py [--sizes 1000,10000,50000] [--new 20] [--looks 11]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from awp.board import heads as bheads  # noqa: E402
from awp.board import sync as bsync  # noqa: E402
from awp.store import board as sb  # noqa: E402
from awp.store.board_held import HeldCache  # noqa: E402
from awp.wire import board as b  # noqa: E402
from awp.wire.keys import Identity  # noqa: E402
from awp.wire.timefmt import format_ts  # noqa: E402

OWNER = Identity(b"\x01" * 32)
T0 = 1_790_000_000_000
TOPIC = f"{OWNER.key}/ops"


def _posts(w: sqlite3.Connection, texts: list[str], ts: int) -> None:
    w.execute("BEGIN")
    for i, text in enumerate(texts):
        sb.put_record(w, b.make_post(OWNER, TOPIC, [{"k": "text", "text": text}], ts + i * 50), T0)
    w.execute("COMMIT")


def measure(size: int, new: int, looks: int, root: str) -> dict[str, float]:
    """Median ms of a head and a gap check, each way, ``new`` records arriving before each."""
    path = os.path.join(root, f"{size}.db")
    w = sqlite3.connect(path, isolation_level=None)
    sb.create(w)
    _posts(w, [f"p {i}" for i in range(size)], T0)
    r = sqlite3.connect(path, isolation_level=None)  # a reader's connection, as the daemon's
    now, floor, cache = T0 + size * 50 + 100_000, T0 - 1, HeldCache()
    head = {"floor": floor, "doc": 1, "ts": format_ts(now),
            "ranges": bsync.opening(sb.holdings(r, TOPIC), floor, now, 0)["ranges"]}
    ways: dict[str, Callable[[Callable[[bsync.Holdings], object]], object]] = {
        "full read": lambda fn: fn(sb.holdings(r, TOPIC)),
        "kept copy": lambda fn: cache.using(r, TOPIC, fn)}
    jobs = {"head": lambda h: bsync.opening(h, floor, now, 0),
            "gap check": lambda h: bheads.still_lacking(head, h, 1, floor)}
    out, k = {}, 0
    for way, held in ways.items():
        for job, fn in jobs.items():
            times = []
            for _ in range(looks):
                _posts(w, [f"n {k + i}" for i in range(new)], now - 50_000 + k)
                k += new
                t = time.perf_counter()
                held(fn)
                times.append(time.perf_counter() - t)
            out[f"{job}, {way}"] = sorted(times)[len(times) // 2] * 1000
    assert ways["full read"](jobs["head"]) == ways["kept copy"](jobs["head"])  # the same body
    w.close()
    r.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--new", type=int, default=20, help="records arriving between two looks")
    ap.add_argument("--looks", type=int, default=11)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="awp-board-heads-")
    try:
        for size in (int(x) for x in args.sizes.split(",")):
            ms = measure(size, args.new, args.looks, root)
            print(f"topic of {size:,} records, {args.new} new a look: "
                  + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
