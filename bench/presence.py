"""Presence bench: 32 daemons on loopback, in a line and in a tree.

Prints, for each topology, how long until every node within the 8-hop
gossip radius holds the far end's new document after a change there, and,
at rest, the presence lines each node sends to each of its peers per minute
(every link, both directions, counted by the sender).  Targets (issue 6):
converge <= 5 s, <= 4 lines per peer per minute at rest.

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


def distances(adj: dict[int, set[int]], src: int) -> dict[int, int]:
    """Links from ``src`` to every node it can reach (breadth first)."""
    dist, frontier = {src: 0}, [src]
    while frontier:
        nxt = []
        for i in frontier:
            for j in adj[i]:
                if j not in dist:
                    dist[j] = dist[i] + 1
                    nxt.append(j)
        frontier = nxt
    return dist


def watch_ages(nodes: list[Node], adj: dict[int, set[int]], rest: float) -> float:
    """Sleep ``rest`` seconds, sampling the age of every document each node should hold."""
    reach = {src: [o for o, d in distances(adj, src).items() if 0 < d <= 8] for src in adj}
    oldest = 0.0
    end = time.monotonic() + rest
    while time.monotonic() < end:
        now = time.time() * 1000
        for i, node in enumerate(nodes):
            with sqlite3.connect(node.home + "/awp.db") as con:
                ts = dict(con.execute("SELECT origin, doc_ts FROM presence").fetchall())
            for o in reach[i]:
                oldest = max(oldest, (now - ts.get(nodes[o].key, 0)) / 1000)
        time.sleep(max(0.0, min(5.0, end - time.monotonic())))
    return oldest


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
        dist = distances(adj, n - 1)
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
        before_rest = {x.key: x.api("GET", "/v1/status")["presence"] for x in nodes}
        oldest = watch_ages(nodes, adj, rest)
        per_node, per_link, per_origin = [], [], []
        for x in nodes:
            st = x.api("GET", "/v1/status")
            p0, p1 = before_rest[x.key], st["presence"]
            per_node.append((p1["lines_sent"] - p0["lines_sent"]) / (rest / 60))
            origins = 1 + p1.get("origins", 0)
            for key, count in p1["lines_by_peer"].items():
                rate = (count - p0["lines_by_peer"].get(key, 0)) / (rest / 60)
                per_link.append(rate)
                per_origin.append(rate / origins)

        def avg_max(v: list[float]) -> str:
            return f"avg {sum(v) / len(v):.2f}, max {max(v):.2f}"

        print(f"{kind:5s} of {n}: change at the far end seen by all {len(others)} nodes within"
              f" 8 links in {converge:.2f} s (target <= 5 s)")
        print(f"      at rest, presence lines per minute: a node sends {avg_max(per_node)};"
              f" to each peer (one direction of a link) {avg_max(per_link)} (target <= 4);"
              f" per peer per origin carried {avg_max(per_origin)}")
        print(f"      the oldest document any node held for an agent within 8 links, sampled"
              f" every 5 s at rest: {oldest:.0f} s (watchers call an agent stale after 150 s)")
    finally:
        for node in nodes:
            node.kill()
        if not os.environ.get("AWP_BENCH_KEEP"):
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
