"""Presence bench: daemons on loopback, in a line and in a tree (fan-out 3).

Prints, for each topology, how long until every node within the 8-hop
gossip radius holds the far end's new document after a change there, and,
at rest, the presence lines each node sends to each of its peers per minute
(every link, both directions, counted by the sender) and each daemon's CPU.
Then the same network at work: every host's client long-polls a board topic
(``/v1/board/wait``) while hosts post to it in turn, and the presence lines
all daemons send meanwhile are set against the same time at rest (issue 24:
an agent's activity must not cost the network a document per call).
Targets (issues 6, 24): converge <= 5 s, <= 4 lines per peer per minute at
rest, presence lines at work <= 1.5x those at rest.

Run: python bench/presence.py [--nodes 32] [--topology line,tree] [--rest 130]
[--active 70] [--rate 5]
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
from topo import (  # noqa: E402
    TOPOLOGIES,
    Waiter,
    avg_max,
    build,
    cpu_all,
    distances,
    open_topic,
    presence_lines,
    presence_signed,
    spent,
    start_all,
    subscribe_all,
)

ACTIVE_TARGET = 1.5  # presence lines at work, as a multiple of those at rest


def seq_of(node: Node, origin: str) -> int:
    with sqlite3.connect(node.home + "/awp.db") as con:
        row = con.execute("SELECT seq FROM presence WHERE origin = ?", (origin,)).fetchone()
    return row[0] if row else 0


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


def at_work(nodes: list[Node], adj: dict[int, set[int]], seconds: float, rate: float,
            rest_lines_per_s: float, rest_signed_per_s: float) -> bool:
    """Every client long-polling a topic while hosts post; presence lines against rest."""
    n = len(nodes)
    topic = open_topic(nodes[0], "work")
    subscribe_all(nodes, adj, topic)
    # Long-polls, not one stream each: every wait call is an agent acting, the
    # activity this part shows must not cost the network a document per call.
    waiters = [Waiter(x, topic, poll=True) for x in nodes]
    try:
        for w in waiters:
            w.start()
        lines0, signed0, t0 = presence_lines(nodes), presence_signed(nodes), time.monotonic()
        t_next, k = t0, 0
        while time.monotonic() - t0 < seconds:
            t_next += 1 / rate
            time.sleep(max(0.0, t_next - time.monotonic()))
            poster = (k * 7 + 1) % n
            nodes[poster].api("POST", "/v1/board/post",
                              {"topic": topic, "parts": [{"k": "text", "text": f"work {k}"}]})
            k += 1
        took = time.monotonic() - t0
        lines = presence_lines(nodes) - lines0
        signed = presence_signed(nodes) - signed0
    finally:
        for w in waiters:
            w.stop.set()
    at_rest = rest_lines_per_s * took
    ratio = lines / max(at_rest, 1.0)
    ok = ratio <= ACTIVE_TARGET
    errors = [w.error for w in waiters if w.error]
    print(f"      at work ({n} clients long-polling a topic, {k} posts from hosts in turn at"
          f" {rate:g}/s): presence lines sent by all daemons in {took:.0f} s: {lines}, against"
          f" {at_rest:.0f} at rest = {ratio:.2f}x  (target <= {ACTIVE_TARGET}x) "
          + ("ok" if ok else "MISS"))
    print(f"      documents signed by their origins meanwhile: {signed / took * 60 / n:.2f} a daemon"
          f" a minute, against {rest_signed_per_s * 60 / n:.2f} at rest")
    if errors:
        print(f"      {len(errors)} waiters failed (first: {errors[0]})")
    return ok


def run(kind: str, n: int, rest: float, active: float, rate: float) -> bool:
    root = tempfile.mkdtemp(prefix="awpp", dir="/tmp")
    nodes = [Node(os.path.join(root, f"n{i}"), f"n{i}", extra=["--presence"]) for i in range(n)]
    try:
        start_all(nodes)
        adj = build(nodes, kind)
        far = nodes[-1]
        # Documents travel at most 8 links (hops 0..7), so "every node" means
        # every node within 8 links of the far end.
        dist = distances(adj, n - 1)
        others = [nodes[i] for i, d in dist.items() if 0 < d <= 8]
        # let the first round of documents settle
        wait_for(lambda: all(seq_of(x, far.key) for x in others), 120, "first documents",
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
        signed_rest = presence_signed(nodes)
        cpu0, t_rest = cpu_all(nodes), time.monotonic()
        oldest = watch_ages(nodes, adj, rest)
        cpu_rest = spent(cpu0, cpu_all(nodes))
        signed_rest = presence_signed(nodes) - signed_rest
        rest_s = time.monotonic() - t_rest
        per_node, per_link, per_origin = [], [], []
        for x in nodes:
            st = x.api("GET", "/v1/status")
            p0, p1 = before_rest[x.key], st["presence"]
            per_node.append((p1["lines_sent"] - p0["lines_sent"]) / (rest_s / 60))
            origins = 1 + p1.get("origins", 0)
            for key, count in p1["lines_by_peer"].items():
                rate_link = (count - p0["lines_by_peer"].get(key, 0)) / (rest_s / 60)
                per_link.append(rate_link)
                per_origin.append(rate_link / origins)
        ok = converge <= 5 and max(per_link) <= 4
        print(f"{kind:5s} of {n}: change at the far end seen by all {len(others)} nodes within"
              f" 8 links in {converge:.2f} s (target <= 5 s)")
        print(f"      at rest, presence lines per minute: a node sends {avg_max(per_node)};"
              f" to each peer (one direction of a link) {avg_max(per_link)} (target <= 4);"
              f" per peer per origin carried {avg_max(per_origin)}")
        print(f"      the oldest document any node held for an agent within 8 links, sampled"
              f" every 5 s at rest: {oldest:.0f} s (watchers call an agent stale after 150 s)")
        print(f"      CPU per daemon at rest: {avg_max([c / rest_s * 60 for c in cpu_rest], '.3f')}"
              " CPU-s a minute")
        if active > 0:
            ok &= at_work(nodes, adj, active, rate, sum(per_node) / 60, signed_rest / rest_s)
        return ok
    finally:
        for node in nodes:
            node.kill()
        if not os.environ.get("AWP_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--topology", default=",".join(TOPOLOGIES),
                    help="comma-separated: line, tree (fan-out 3)")
    ap.add_argument("--rest", type=float, default=130.0)
    ap.add_argument("--active", type=float, default=70.0,
                    help="seconds of clients at work (0: skip); over a heartbeat (60 s)")
    ap.add_argument("--rate", type=float, default=5.0, help="posts a second while at work")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.topology.split(",") if k.strip()]
    if not kinds or set(kinds) - set(TOPOLOGIES):
        ap.error(f"--topology takes {', '.join(TOPOLOGIES)}")
    if args.nodes < 2:
        ap.error("--nodes must be at least 2")
    ok = True
    for kind in kinds:
        ok &= run(kind, args.nodes, args.rest, args.active, args.rate)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
