"""Sealed links bench: the CPU a message costs sealed and plain (issue 33).

Two daemons on loopback TCP, in two pairs: one with both offering the seal
extension (the default), one with ``AWP_SEAL=off`` on both.  Each pair
drains a backlog of ``--backlog`` x ``--size`` B messages queued straight
into the stopped sender's store (bench/delivery.py's drain: every message
durably stored and acked, the sender's outbox empty), ``--rounds`` times,
the pairs in turns so both see the machine over the same minutes.  Prints
each round's CPU of sender and receiver per message, the medians, and the
ratio sealed / plain of both daemons' CPU together.  Target (issue 33):
sealed <= 1.2x plain.

Also prints what libsodium's part costs alone: sealing and opening one
message of ``--size`` bytes, in microseconds.

Run: python bench/seal.py [--backlog N] [--size B] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[1:1] = [_ROOT, os.path.join(_ROOT, "tests")]

from delivery import drain  # noqa: E402  (bench/, first on sys.path when run as a script)
from nodes import Node, wait_for  # noqa: E402

from awp.wire.seal import Opener, Sealer  # noqa: E402


def start_pair(root: str, label: str, seal: str) -> tuple[Node, Node]:
    env = {"AWP_SEAL": seal}
    a = Node(os.path.join(root, f"{label}-a"), name=f"{label}-a", env=env).start()
    b = Node(os.path.join(root, f"{label}-b"), name=f"{label}-b", env=env).start()
    a.connect(b)
    wait_for(lambda: a.peer_state(b.key).startswith("connected"), 30, "connected")
    sealed = next(p for p in a.api("GET", "/v1/peers") if p["key"] == b.key)["sealed"]
    if sealed != (seal != "off"):
        raise SystemExit(f"pair {label}: link sealed={sealed}, expected the opposite")
    return a, b


def libsodium_cost(size: int, n: int = 20_000) -> float:
    key = bytes(32)
    s, o = Sealer(key), Opener(key)
    line = b"x" * size
    t0 = time.perf_counter()
    for _ in range(n):
        o.feed(s.seal(line))
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"seal + open of one {args.size} B message alone: "
          f"{libsodium_cost(args.size):.1f} us")
    root = tempfile.mkdtemp(prefix="awpseal", dir="/tmp")
    pairs = {"sealed": start_pair(root, "s", "prefer"), "plain": start_pair(root, "p", "off")}
    per: dict[str, list[float]] = {"sealed": [], "plain": []}
    try:
        for r in range(args.rounds):
            for label, (a, b) in pairs.items():
                print(f"-- round {r + 1}, {label}")
                _, cpu_a, cpu_b = drain(a, b, args.backlog, args.size, None)
                per[label].append((cpu_a + cpu_b) / args.backlog * 1e6)
    finally:
        for a, b in pairs.values():
            a.kill()
            b.kill()
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in per.items()}
    for k, v in per.items():
        print(f"{k}: both daemons' CPU a message over the drain, each round: "
              + ", ".join(f"{x:.0f}" for x in v) + f" us; median {med[k]:.0f} us")
    ratio = med["sealed"] / med["plain"]
    print(f"sealed / plain CPU a message: {ratio:.2f} (target <= 1.2: "
          f"{'met' if ratio <= 1.2 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
