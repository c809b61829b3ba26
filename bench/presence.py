"""Presence bench: 32 daemons on loopback, in a line and in a tree.

Prints, for each topology, how long until every node within the 8-hop
gossip radius holds the far end's new document after a change there, and the presence lines each node sends
per peer per minute at rest.  Targets (issue 6): converge <= 5 s, <= 4 lines
per peer per minute at rest.

Run: python bench/presence.py [--nodes 32] [--rest 130]
(--rest is how long to watch the network at rest, in seconds; heartbeats are
60 s, so use at least two minutes for a steady figure.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from nodes import Node, wait_for  # noqa: E402


def seq_of(node: Node, origin: str) -> int:
    with sqlite3.connect(node.home + "/awp.db") as con:
        row = con.execute("SELECT seq FROM presence WHERE origin = ?", (origin,)).fetchone()
    return row[0] if row else 0


def run(kind: str, n: int, rest: float) -> None:
    root = tempfile.mkdtemp(prefix="awpp", dir="/tmp")
    nodes = [Node(os.path.join(root, f"n{i}"), f"n{i}", extra=["--presence"]) for i in range(n)]
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready(60)
        if kind == "line":
            edges = [(i, i + 1) for i in range(n - 1)]
        else:  # a binary tree rooted at 0
            edges = [((i - 1) // 2, i) for i in range(1, n)]
        for a, b in edges:
            nodes[b].connect(nodes[a])
        far = nodes[-1]
        # Documents travel at most 8 links (hops 0..7), so "every node" means
        # every node within 8 links of the far end.
        adj: dict[int, set[int]] = {i: set() for i in range(n)}
        for a, b in edges:
            adj[a].add(b)
            adj[b].add(a)
        dist = {n - 1: 0}
        frontier = [n - 1]
        while frontier:
            nxt = []
            for i in frontier:
                for j in adj[i]:
                    if j not in dist:
                        dist[j] = dist[i] + 1
                        nxt.append(j)
            frontier = nxt
        others = [nodes[i] for i, d in dist.items() if 0 < d <= 8]
        # let the first round of documents settle
        wait_for(lambda: all(seq_of(x, far.key) for x in others), 60, "first documents",
                 interval=0.2)
        before = {x.key: seq_of(x, far.key) for x in others}
        t0 = time.monotonic()
        far.api("POST", "/v1/alias", {"peer": nodes[-2].key, "alias": "changed"})
        far.send(nodes[-2].key, "a change at the far end", subject="change")
        wait_for(lambda: all(seq_of(x, far.key) > before[x.key] for x in others), 60,
                 "the change everywhere", interval=0.05)
        converge = time.monotonic() - t0
        time.sleep(5)
        sent0 = {x.key: x.api("GET", "/v1/status")["presence"]["lines_sent"] for x in nodes}
        time.sleep(rest)
        per_node, per_peer, per_origin = [], [], []
        for x in nodes:
            st = x.api("GET", "/v1/status")
            peers = max(1, sum(1 for p in st["peers"] if p["state"].startswith("connected")))
            rate = (st["presence"]["lines_sent"] - sent0[x.key]) / (rest / 60)
            origins = 1 + st["presence"].get("origins", 0)
            per_node.append(rate)
            per_peer.append(rate / peers)
            per_origin.append(rate / peers / origins)

        def avg_max(v: list[float]) -> str:
            return f"avg {sum(v) / len(v):.2f}, max {max(v):.2f}"

        print(f"{kind:5s} of {n}: change at the far end seen by all {len(others)} nodes within"
              f" 8 links in {converge:.2f} s (target <= 5 s)")
        print(f"      at rest, presence lines a node sends per minute: {avg_max(per_node)};"
              f" per connected peer: {avg_max(per_peer)};"
              f" per peer per origin it carries: {avg_max(per_origin)} (target <= 4)")
    finally:
        for node in nodes:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--rest", type=float, default=130.0)
    args = ap.parse_args()
    for kind in ("line", "tree"):
        run(kind, args.nodes, args.rest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
