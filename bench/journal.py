"""What one intake-journal append costs: the write and sync a quiet line waits
for before its ack (awp.store.intake).

Appends a typical record (a 300-byte msg line from a peer) at 100 a second,
as delivery.py's latency runs send them, to a journal in a fresh directory,
each append a new round at offset 0 as on a quiet daemon; ``--round`` keeps
one round going instead (a busy daemon whose commits still owe their sync).
It takes turns between appends that bypass the page cache (``O_DIRECT``)
and buffered ones, so both see the same disk over the same minutes, and
prints each way's p50, p90 and p99 in microseconds.

Run: python bench/journal.py [--appends N] [--turns K] [--round] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from delivery import pct  # noqa: E402  (bench/, first on sys.path when run as a script)

from awp.store.intake import IntakeJournal, Record  # noqa: E402

PEER = "ed25519:" + "A" * 43


def _line(i: int) -> str:
    return json.dumps({"t": "msg", "id": f"01M8N8{i:020d}", "ts": "2026-12-02T08:00:00.000Z",
                       "th": "thr_bench000", "parts": [{"k": "text", "text": "x" * 200}]},
                      separators=(",", ":"))


def measure(where: str, direct: bool, n: int, keep_round: bool) -> tuple[list[float], bool]:
    """Microseconds of ``n`` appends (the first tenth dropped as warm-up), and
    whether the journal really wrote directly."""
    path = os.path.join(where, f"intake-{'direct' if direct else 'buffered'}.journal")
    j = IntakeJournal.open(path, direct=direct)
    out: list[float] = []
    try:
        for i in range(n):
            rec = Record(PEER, i, _line(i))
            t0 = time.perf_counter_ns()
            if not j.append(rec, rewind=not keep_round):
                if keep_round:  # the round is full: start again
                    j.clear()
                    continue
                raise SystemExit(f"append {i} refused: {j.broken or 'no room'}")
            out.append((time.perf_counter_ns() - t0) / 1e3)
            j.stored()
            time.sleep(0.01)
        return out[n // 10:], j.direct
    finally:
        j.close()
        os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--appends", type=int, default=300, help="appends a turn")
    ap.add_argument("--turns", type=int, default=3, help="turns of each way")
    ap.add_argument("--round", action="store_true",
                    help="one round goes on (appends walk the file) instead of offset 0")
    ap.add_argument("--dir", default=None, help="where the journals go (default: a temp dir)")
    args = ap.parse_args()
    where = args.dir or tempfile.mkdtemp(prefix="awpjournal")
    got: dict[bool, list[float]] = {True: [], False: []}
    really = True
    for turn in range(args.turns):
        for direct in (True, False):
            t, ok = measure(where, direct, args.appends, args.round)
            really = really and (ok or not direct)
            got[direct] += t
            print(f"turn {turn + 1}: {'direct  ' if direct else 'buffered'} p50"
                  f" {statistics.median(t):6.0f} us", flush=True)
    if not really:
        print(f"(the file system under {where} refused O_DIRECT: both ways were buffered)")
    for direct in (True, False):
        t = got[direct]
        print(f"{'direct (O_DIRECT + fdatasync)' if direct else 'buffered (write + fdatasync)'}"
              f" over {len(t)} appends: p50 {pct(t, 50):.0f} us  p90 {pct(t, 90):.0f} us"
              f"  p99 {pct(t, 99):.0f} us")
    print(f"direct / buffered p50: {pct(got[True], 50) / pct(got[False], 50):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
