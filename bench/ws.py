"""WebSocket bench: the ws binding beside plain TCP (issue 33).

Three parts (``--only`` picks some):

- **latency**: two pairs of daemons on loopback, one linked over TCP, one
  over the WebSocket binding (``--listen ws:127.0.0.1:0``, dialed at its
  ``reachable`` ``ws://127.0.0.1:PORT/``), both sealed unless ``--seal
  off``.  Warm links; ``--messages`` msgs each at 100 msg/s in
  ``--blocks`` blocks, the pairs in turns so both see the machine over the
  same minute.  One-way latency (the sender queuing until the receiver has
  it durably stored, both CLOCK_MONOTONIC, as bench/delivery.py) and
  queue-to-ack, p50 and p99, and the ratio ws / tcp of the one-way p50.
  Target: ws <= 1.3x tcp.
- **dial**: from ``POST /v1/connect`` of a ws address the daemon is not
  linked to, until the first msg sent on it is acked (``/v1/send`` with
  ``wait_ack``).  ``--dials`` times with one pair, the link dropped between
  dials with ``POST /v1/bye`` (and both sides seen disconnected), then
  ``--fresh`` times with a new dialing daemon each (a key the listener has
  never seen; the daemon's start is not timed).  The same over TCP beside
  it.  Target: ws p50 <= 20 ms.
- **idle**: one daemon listening on ws; ``--links`` raw WebSocket peers
  (bench/ws_clients.py, one process: each its own Ed25519 key, the upgrade,
  hello/auth/resume, sealed unless ``--seal off``; then they only answer
  pings) connect and stay idle for ``--hold`` s (the daemon pings an idle
  link every 30 s, so the default 35 s sees every link answer one).  The
  daemon's RSS (VmRSS) before, with the links up, and after the hold; per
  link; and how many links the daemon counts connected at the end.  The
  home's config.json raises ``limits.connections`` to links + 64 (default
  256); ``limits.handshakes`` (64) and ``limits.ws_upgrades_per_ip`` (16)
  stay at their defaults, the clients holding at most ``--concurrency``
  (16) in their handshake at once.  Target: <= 120 MB with 1,000 links.

Run: python bench/ws.py [--only latency,dial,idle] [--messages 1000] [--blocks 5]
[--dials 50] [--fresh 10] [--links 1000] [--hold 35] [--seal prefer|off]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[1:1] = [_ROOT, os.path.join(_ROOT, "tests")]

from delivery import latency, pct, rss_mb  # noqa: E402  (bench/, first on sys.path)
from nodes import Node, wait_for  # noqa: E402

TARGET_RATIO = 1.3
TARGET_DIAL_MS = 20.0
TARGET_IDLE_MB = 120.0


def ws_port(status: dict) -> int:
    """The loopback port of a daemon's ws listener (its ``ws:127.0.0.1:PORT`` address)."""
    for a in status.get("addresses") or []:
        if a.startswith("ws:127.0.0.1:"):
            return int(a.rsplit(":", 1)[1])
    raise SystemExit(f"the daemon listens on no loopback ws port: {status.get('addresses')}"
                     f" {status.get('listen_errors')}")


def ws_url(node: Node) -> str:
    """Where ``node`` is dialed over ws: its status's ``reachable`` ws:// endpoint."""
    for a in node.status.get("reachable") or []:
        if a.startswith("ws://127.0.0.1:"):
            return a
    return f"ws://127.0.0.1:{ws_port(node.status)}/"


def start(root: str, name: str, transport: str, *, env: dict | None = None,
          limits: dict | None = None) -> Node:
    """A daemon listening on loopback ``transport``; a restart asks for the same port."""
    node = Node(os.path.join(root, name), name, env=env)
    if limits:
        node.with_limits(**limits)
    if transport == "ws":
        node.listen = "ws:127.0.0.1:0"
    node.start()
    if transport == "ws":
        node.listen = f"ws:127.0.0.1:{ws_port(node.status)}"
    return node


def target(node: Node, transport: str) -> str:
    return ws_url(node) if transport == "ws" else node.address


def link(a: Node, b: Node, transport: str) -> None:
    a.api("POST", "/v1/connect", {"target": target(b, transport), "timeout": 20})
    wait_for(lambda: a.peer_state(b.key).startswith("connected"), 20, "connected")


def sealed(a: Node, b: Node) -> bool:
    return bool(next(p for p in a.api("GET", "/v1/peers") if p["key"] == b.key)["sealed"])


# -- latency ---------------------------------------------------------------------------


def part_latency(root: str, args: argparse.Namespace, env: dict) -> list[str]:
    pairs = {}
    for t in ("tcp", "ws"):
        a, b = start(root, f"lat-{t}-a", "tcp", env=env), start(root, f"lat-{t}-b", t, env=env)
        pairs[t] = (a, b)
        link(a, b, t)
        print(f"{t} pair linked at {target(b, t)}, sealed {sealed(a, b)}")
    one_way: dict[str, list[float]] = {"tcp": [], "ws": []}
    q2a: dict[str, list[float]] = {"tcp": [], "ws": []}
    blocks = max(1, args.blocks)
    try:
        for k in range(blocks):
            row = []
            for t, (a, b) in pairs.items():
                ours: list[float] = []
                q2a[t] += latency(a, b, args.messages // blocks, 100.0, one_way=ours,
                                  subject=f"ws bench {t}")
                one_way[t] += ours
                row.append(f"{t} p50 {pct(ours, 50):.3f} ms")
            print(f"  block {k + 1} of {blocks}: " + ", ".join(row))
    finally:
        for a, b in pairs.values():
            a.kill()
            b.kill()
    for t in ("tcp", "ws"):
        print(f"{t}: one-way p50 {pct(one_way[t], 50):.3f} ms  p99 {pct(one_way[t], 99):.3f} ms"
              f"  (over {len(one_way[t])});  queue-to-ack p50 {pct(q2a[t], 50):.3f} ms"
              f"  p99 {pct(q2a[t], 99):.3f} ms")
    r = pct(one_way["ws"], 50) / pct(one_way["tcp"], 50)
    r99 = pct(one_way["ws"], 99) / pct(one_way["tcp"], 99)
    rq = pct(q2a["ws"], 50) / pct(q2a["tcp"], 50)
    verdict = "met" if r <= TARGET_RATIO else "MISSED"
    print(f"ws / tcp one-way p50: {r:.2f} (target <= {TARGET_RATIO}: {verdict});"
          f" p99 {r99:.2f}; queue-to-ack p50 {rq:.2f}")
    return [] if r <= TARGET_RATIO else [f"latency ratio {r:.2f}"]


# -- dial ------------------------------------------------------------------------------


def timed_dial(a: Node, b: Node, transport: str, tgt: str, i: int) -> tuple[float, float]:
    """(connect ms, connect-start-to-first-ack ms) of one dial."""
    t0 = time.perf_counter()
    a.api("POST", "/v1/connect", {"target": tgt, "timeout": 20})
    t1 = time.perf_counter()
    r = a.send(b.key, f"first after dial {i}", wait_ack=10)
    t2 = time.perf_counter()
    if not r.get("acked"):
        raise SystemExit(f"{transport} dial {i}: the first msg was not acked: {r}")
    return (t1 - t0) * 1000, (t2 - t0) * 1000


def drop(a: Node, b: Node) -> None:
    a.api("POST", "/v1/bye", {"peer": b.key})
    wait_for(lambda: not a.peer_state(b.key).startswith("connected")
             and not b.peer_state(a.key).startswith("connected"), 10, "link dropped")


def part_dial(root: str, args: argparse.Namespace, env: dict) -> list[str]:
    out: dict[str, dict[str, list]] = {}
    for t in ("tcp", "ws"):
        b = start(root, f"dial-{t}-b", t, env=env)
        a = start(root, f"dial-{t}-a", "tcp", env=env)
        tgt = target(b, t)
        res = out[t] = {"bye": [], "fresh": []}
        try:
            link(a, b, t)  # the first dial of a new daemon is warm-up, not counted
            a.send(b.key, "warm-up", wait_ack=10)
            for i in range(args.dials):
                drop(a, b)
                res["bye"].append(timed_dial(a, b, t, tgt, i))
            a.kill()
            for i in range(args.fresh):
                f = start(root, f"dial-{t}-f{i}", "tcp", env=env)
                try:
                    f.api("GET", "/v1/status")
                    res["fresh"].append(timed_dial(f, b, t, tgt, i))
                finally:
                    f.kill()
                    shutil.rmtree(f.home, ignore_errors=True)
        finally:
            a.kill()
            b.kill()
    missed = []
    for t in ("tcp", "ws"):
        for how, what in (("bye", f"after a bye, {args.dials} dials"),
                          ("fresh", f"a fresh dialer each, {args.fresh} dials")):
            rows = out[t][how]
            if not rows:
                continue
            conn, total = [x[0] for x in rows], [x[1] for x in rows]
            p50 = statistics.median(total)
            line = (f"{t} dial to first ack, {what}: p50 {p50:.1f} ms  p90 {pct(total, 90):.1f}"
                    f"  max {max(total):.1f} ms  (connect alone p50 {statistics.median(conn):.1f}"
                    f" ms)")
            if t == "ws":
                ok = p50 <= TARGET_DIAL_MS
                line += f"  target <= {TARGET_DIAL_MS:g} ms: {'met' if ok else 'MISSED'}"
                if not ok:
                    missed.append(f"ws dial {how} p50 {p50:.1f} ms")
            print(line)
    return missed


# -- idle ------------------------------------------------------------------------------


def part_idle(root: str, args: argparse.Namespace, env: dict) -> list[str]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.links + 256
    if soft < need and hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))  # the daemon inherits it
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < need:
        raise SystemExit(f"open files limit {soft} (hard {hard}) is under the {need} needed")
    limits = {"connections": args.links + 64}
    b = start(root, "idle-b", "ws", env=env, limits=limits)
    clients = None
    try:
        time.sleep(2.0)
        before = rss_mb(b.proc.pid)[0]
        print(f"idle daemon on ws:127.0.0.1:{ws_port(b.status)}, config.json limits {limits}"
              f" (handshakes, ws_upgrades_per_ip at their defaults), ulimit -n {soft};"
              f" RSS with no links {before:.1f} MB")
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "ws_clients.py"),
               "127.0.0.1", str(ws_port(b.status)), str(args.links),
               "--concurrency", str(args.concurrency)]
        if env.get("AWP_SEAL") != "off":
            cmd.append("--seal")
        clients = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
        up = clients.stdout.readline().split()
        if not up or up[0] != "up":
            raise SystemExit(f"the clients did not come up: {up}")
        print(f"{up[1]} links up ({up[3]} failed) in {float(up[4]):.1f} s")
        time.sleep(2.0)
        with_links = rss_mb(b.proc.pid)

        def count() -> tuple[int, int]:
            peers = b.api("GET", "/v1/status")["peers"]
            conn = [p for p in peers if p["state"].startswith("connected")]
            return len(conn), sum(1 for p in conn if p["sealed"])

        n_up, n_sealed = count()
        print(f"RSS with the links up: {with_links[0]:.1f} MB (peak {with_links[1]:.1f});"
              f" the daemon counts {n_up} connected ({n_sealed} sealed)")
        time.sleep(args.hold)
        clients.stdin.write("stats\n")
        clients.stdin.flush()
        stats = clients.stdout.readline().split()
        after = rss_mb(b.proc.pid)
        n_end, _ = count()
        print(f"after {args.hold:g} s idle: RSS {after[0]:.1f} MB (peak {after[1]:.1f});"
              f" connected {n_end}; clients: alive {stats[1]}, closed {stats[3]},"
              f" pings answered {stats[5]}")
        per = (after[0] - before) / max(1, n_end) * 1024
        ok = after[0] <= TARGET_IDLE_MB * args.links / 1000 and n_end == args.links
        print(f"idle ws links: {after[0]:.1f} MB with {n_end} links, {per:.0f} KiB a link"
              f" over the {before:.1f} MB of none (target <= {TARGET_IDLE_MB:g} MB"
              f" a 1,000: {'met' if ok else 'MISSED'})")
        return [] if ok else [f"idle RSS {after[0]:.1f} MB, {n_end} links"]
    finally:
        if clients is not None:
            clients.stdin.close()
            try:
                clients.wait(10)
            except subprocess.TimeoutExpired:
                clients.kill()
        b.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="latency,dial,idle")
    ap.add_argument("--messages", type=int, default=1000, help="latency samples a transport")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--dials", type=int, default=50)
    ap.add_argument("--fresh", type=int, default=10)
    ap.add_argument("--links", type=int, default=1000)
    ap.add_argument("--hold", type=float, default=35.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seal", choices=("prefer", "off"), default="prefer")
    args = ap.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    env = {"AWP_SEAL": args.seal}
    root = tempfile.mkdtemp(prefix="awpws", dir="/tmp")
    missed: list[str] = []
    try:
        for p in parts:
            print(f"== {p} (seal {args.seal}, load average {os.getloadavg()[0]:.2f})")
            missed += {"latency": part_latency, "dial": part_dial, "idle": part_idle}[p](
                root, args, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("missed: " + "; ".join(missed) if missed else "every target met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
