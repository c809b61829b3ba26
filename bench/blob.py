"""Blob bench: a 50 MiB file between two daemons on loopback.

Prints the time from `send --file` to the file being complete (all chunks
durable, moved to its final path) at the receiver, and each daemon's RSS
before and at its peak.  Targets (issue 4): <= 3 s end to end, RSS growth
<= 64 MB on each side.  Run: python bench/blob.py [--mib 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from delivery import rss_mb  # noqa: E402
from nodes import Node, wait_for  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=50)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="awpb", dir="/tmp")
    a = Node(os.path.join(root, "a"), "a")
    b = Node(os.path.join(root, "b"), "b")
    try:
        a.start()
        b.start()
        a.connect(b)
        path = os.path.join(root, "big.bin")
        with open(path, "wb") as f:
            for _ in range(args.mib):
                f.write(os.urandom(1 << 20))
        time.sleep(0.5)
        base = {n.name: rss_mb(n.proc.pid)[0] for n in (a, b)}
        t0 = time.perf_counter()
        a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 0,
                                   "parts": [{"k": "text", "text": "bench file"}]})

        def complete():
            return [x for x in b.api("GET", "/v1/blobs") if x["status"] == "complete"]

        wait_for(complete, 120, "blob complete", interval=0.02)
        elapsed = time.perf_counter() - t0
        peaks = {n.name: rss_mb(n.proc.pid)[1] for n in (a, b)}
        print(f"{args.mib} MiB file complete at the receiver in {elapsed:.2f} s "
              f"({args.mib / elapsed:.1f} MiB/s); target <= 3 s")
        for n in ("a", "b"):
            print(f"  {n}: RSS {base[n]:.1f} MB before, peak {peaks[n]:.1f} MB "
                  f"(growth {peaks[n] - base[n]:.1f} MB; target <= 64 MB)")
        return 0
    finally:
        a.kill()
        b.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
