"""Where a board post's CPU goes, host by host: a line of three daemons, one post at a time.

``bench/board.py`` prints the CPU a post costs each host of a mesh of 32 or
128; this bench takes that figure apart so a change to one part shows in
half a minute.  Three daemons on loopback, linked owner - relay - leaf; the
owner opens a topic and the other two subscribe.  ``--posts`` posts are then
made at ``--rate`` a second, by the owner (``--from owner``: signed by the
owner, no stamp) or by the leaf (``--from leaf``: the leaf's post goes up to
the owner, which stamps it, and the stamped record comes back down, as most
posts of a mesh do).  Each host's CPU while the posts flow, less its rate at
rest, divided by the posts, is printed per role, once with a client following
each host with a streaming ``/v1/board/wait`` and once without (``--waiters
both``, the default; or ``on`` / ``off``): the difference is what serving a
follower costs.  ``--prefill N`` puts N posts on the topic (in batches, at
the owner) before the posts flow and waits until every host holds them: what
a topic of real size adds (the owner's head every 2 s and each subscriber's
gap check look at the topic; issue 24).

The figure to watch for issue 24 is the relay's and the leaf's: a relay
takes a record from one peer, stores it and forwards it to the next; a leaf
only takes and stores it.  Target (issue 24): <= 0.5 ms a post on each host
a post reaches.

Issue 37 sets the relay's figure against the machine's floor: after the
daemons, ``bench/relay_floor.py``'s relay on trio (no awp code) relays as
many records at the same rate, and the ratio is printed (target <= 1.3).
The daemons run with ``AWP_CPU_STEPS=1`` (:mod:`awp.base.cpu`), so the
relay's CPU a post is split into its steps (read, parse, verify, store,
forward, and the rest: the event loop, the session, bookkeeping), printed
beside the floor's own.  ``--batch N`` posts N records a request (one line
from the owner, as posts that arrive together), which a rate of 1,000 a
second needs: the owner's posting client costs more than a relay.

Run: python bench/board_cost.py [--posts 600] [--rate 50] [--batch 1] [--from owner|leaf]
[--waiters both|on|off] [--prefill 10000] [--no-floor]
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
from relay_floor import _cpu_s, _relay_trio, measure  # noqa: E402
from topo import Waiter, build, open_topic, spent, start_all, subscribe_all  # noqa: E402

ROLES = ("owner", "relay", "leaf")
REST_S = 3.0
STEPS = ("read", "parse", "verify", "store", "forward")


def held(node: Node, topic: str) -> int:
    with sqlite3.connect(f"file:{node.home}/awp.db?mode=ro", uri=True, timeout=30) as con:
        return con.execute("SELECT count(*) FROM board_records WHERE topic = ? AND kind = 'post'"
                           " AND waiting = 0", (topic,)).fetchone()[0]


def prefill(owner: Node, nodes: list[Node], topic: str, n: int) -> None:
    """``n`` posts at the owner, 1,000 a request, until every host holds them."""
    for i in range(0, n, 1000):
        owner.api("POST", "/v1/board/post", {"topic": topic, "posts": [
            {"parts": [{"k": "text", "text": f"prefill {k}"}]} for k in range(i, min(n, i + 1000))]})
    for x in nodes:
        wait_for(lambda x=x: held(x, topic) >= n, 300, f"the prefill on {x.name}", 0.2)


def cpu_all(nodes: list[Node]) -> list[float]:
    """Each daemon's CPU seconds so far, to the nanosecond (:func:`relay_floor._cpu_s`)."""
    return [_cpu_s(n.proc.pid) for n in nodes]  # type: ignore[union-attr]


def steps_of(node: Node) -> dict[str, int]:
    """The CPU ns the daemon has spent so far in each step of the relay path."""
    return node.api("GET", "/v1/status")["board"].get("cpu_ns") or dict.fromkeys(STEPS, 0)


def run(posts: int, rate: float, poster: str, waiters: bool, root: str,
        fill: int = 0, batch: int = 1, steps: dict[str, float] | None = None) -> list[float]:
    """CPU ms a post on the owner, the relay and the leaf; the relay's CPU ms a post
    in each step goes into ``steps``."""
    os.makedirs(root, exist_ok=True)
    nodes = [Node(os.path.join(root, role), role, env={"AWP_CPU_STEPS": "1"})
             for role in ROLES]
    followers: list[Waiter] = []
    try:
        start_all(nodes)
        build(nodes, "line")
        topic = open_topic(nodes[0], "cost")
        subscribe_all(nodes, {0: {1}, 1: {0, 2}, 2: {1}}, topic)
        if fill:
            prefill(nodes[0], nodes, topic, fill)
            time.sleep(6.0)  # the prefill's last heads and gap checks are done
        if waiters:
            followers = [Waiter(x, topic) for x in nodes]
            for w in followers:
                w.start()
        time.sleep(1.0)  # the followers' first requests settle
        c0, t0 = cpu_all(nodes), time.monotonic()
        time.sleep(REST_S)
        rest = [c / (time.monotonic() - t0) for c in spent(c0, cpu_all(nodes))]
        src = nodes[0] if poster == "owner" else nodes[2]
        s1 = steps_of(nodes[1])
        c1, t1 = cpu_all(nodes), time.monotonic()
        t_next = t1
        for k in range(0, posts, batch):
            t_next += batch / rate
            time.sleep(max(0.0, t_next - time.monotonic()))
            if batch == 1:
                src.api("POST", "/v1/board/post",
                        {"topic": topic, "parts": [{"k": "text", "text": f"cost {k}"}]})
                continue
            src.api("POST", "/v1/board/post", {"topic": topic, "posts": [
                {"parts": [{"k": "text", "text": f"cost {i}"}]}
                for i in range(k, min(posts, k + batch))]})
        for x in nodes:
            wait_for(lambda x=x: held(x, topic) >= fill + posts, 60, f"every post on {x.name}", 0.05)
        for w in followers:
            if w.node is src:  # a host's follower is not sent its own posts
                continue
            wait_for(lambda w=w: len(w.seen) >= posts, 60, f"{w.node.name}'s follower", 0.05)
        flow_s = time.monotonic() - t1
        flow = spent(c1, cpu_all(nodes))
        if steps is not None:
            s2 = steps_of(nodes[1])
            steps.update({k: (s2[k] - s1[k]) / 1e6 / posts for k in STEPS})
        return [max(0.0, f - r * flow_s) * 1000 / posts for f, r in zip(flow, rest, strict=True)]
    finally:
        for w in followers:
            w.stop.set()
        for x in nodes:
            x.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posts", type=int, default=600)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--from", dest="poster", choices=("owner", "leaf"), default="owner")
    ap.add_argument("--waiters", choices=("both", "on", "off"), default="both")
    ap.add_argument("--prefill", type=int, default=0, help="posts on the topic before")
    ap.add_argument("--batch", type=int, default=1, help="posts a request (one line)")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="leave out the floor's relay (bench/relay_floor.py) and the ratio")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="awp-board-cost-")
    batch = max(1, args.batch)
    try:
        modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.waiters]
        relay: list[tuple[str, float, dict[str, float]]] = []
        for waiters in modes:
            steps: dict[str, float] = {}
            ms = run(args.posts, args.rate, args.poster, waiters, os.path.join(
                root, "with" if waiters else "without"), args.prefill, batch, steps)
            how = "a follower on each host" if waiters else "no followers"
            size = f" on a topic of {args.prefill:,}" if args.prefill else ""
            each = f" in {batch}s" if batch > 1 else ""
            print(f"board cost, {args.posts} posts by the {args.poster} at {args.rate:g}/s{each}"
                  f"{size}, {how}:"
                  f" CPU a post: owner {ms[0]:.3f} ms, relay {ms[1]:.3f} ms,"
                  f" leaf {ms[2]:.3f} ms  (target <= 0.5 ms on each host a post reaches)")
            print(f"  relay's steps a post: {_steps(ms[1], steps)}")
            relay.append((how, ms[1], steps))
        if args.floor:
            fsteps: dict[str, float] = {}
            floor = measure(_relay_trio, args.posts, args.rate, set(), fsteps)
            print(f"relay floor on trio, {args.posts} records at {args.rate:g}/s, one a write:"
                  f" CPU a record {floor:.3f} ms")
            print(f"  floor's steps a record: {_steps(floor, fsteps)}")
            for how, ms, _s in relay:
                print(f"relay / floor ({how}): {ms:.3f} / {floor:.3f} ms ="
                      f" {ms / floor if floor else float('inf'):.2f}x  (target <= 1.3x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _steps(total: float, steps: dict[str, float]) -> str:
    if not any(steps.values()):
        return "not measured (a daemon without AWP_CPU_STEPS)"
    rest = total - sum(steps.values())
    return ", ".join(f"{k} {steps.get(k, 0.0):.3f}" for k in STEPS) + f", rest {rest:.3f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
