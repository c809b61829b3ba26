"""Board bench: posts across a mesh of daemons, a burst on one host, a catch-up, a work queue.

Four figures (issues 13 and 24), each printed with its target and ``ok`` or ``MISS``:

1. **spread**, for each ``--topology`` (a line, and a tree where every host
   has up to three children) of ``--hosts`` daemons on loopback: the owner
   (host 0) creates an open topic, every host subscribes, and ``--posts``
   posts are made from hosts in turn, ``--rate`` a second.  Each host
   long-polls ``/v1/board/wait``; a post's latency at a host is from the
   moment its ``/v1/board/post`` call started on the posting host until that
   host's wait returned it.  Live records have no hop bound, so every
   subscriber counts, however far.  Target: p99 <= 2 s.  Besides: each
   daemon's CPU at rest (waiters long-polling, nothing posted), and the CPU
   a post costs each host it reaches: all daemons' CPU while the posts flow,
   less their rest rate, divided by posts x hosts.  Target: <= 0.5 ms.
   With ``--presence`` the daemons also publish presence, as hosts watched
   by a dashboard do, and the presence lines sent meanwhile are printed.
2. **burst**: ``--burst`` posts from ``--posters`` concurrent clients on the
   owner's local API (the owner is exempt from the topic's rate), with one
   subscriber connected; posts/s is counted until the last call returned.
   Then the same number again, ``--batch`` posts a request (``posts``: one
   transaction each, how ``awp post --lines`` and queue fillers send).
   Target, for each: >= 1,000 posts/s.
3. **catch-up**: a subscriber is stopped, ``--offline`` posts are made at the
   owner (in batches: how fast the owner posts is the burst's business), the
   subscriber is started again and dialed; the time from the dial
   until it holds as many records as the owner, and the board bytes it
   received (``status.board.bytes_in``: every board line, digests included)
   against the bytes of the records it lacked.  Targets: < 10 s, < 2x.
4. **queue**: ``--items`` items on a work-queue topic of the owner, and
   ``--claimants`` threads spread over the owner and ``--claim-hosts`` hosts
   connected to it, each claiming and completing until the queue is empty.
   Every item must be claimed exactly once; claims/s is printed (each claim
   is followed by its complete).

Parts 2 to 4 run on a small cluster of their own (the owner, the subscriber,
the claim hosts), not inside the mesh: on a small machine the other daemons
would only compete for the same cores.

Run: python bench/board.py [--hosts 32] [--topology line,tree] [--posts 200] [--rate 20]
[--rest 10] [--presence] [--burst 5000] [--posters 16] [--batch 100] [--offline 10000]
[--claimants 100] [--items 1000] [--claim-hosts 4] [--only spread,burst,catchup,queue]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from nodes import Node, wait_for  # noqa: E402
from topo import (  # noqa: E402
    TOPOLOGIES,
    Waiter,
    board_in,
    build,
    cpu_all,
    cpu_split,
    distances,
    open_topic,
    pct,
    presence_lines,
    spent,
    spent_split,
    start_all,
    subscribe_all,
)

PARTS = ("spread", "burst", "catchup", "queue")
CPU_TARGET_MS = 0.5  # CPU per post per host reached


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def text(s: str) -> list[dict]:
    return [{"k": "text", "text": s}]


def create_topic(owner: Node, name: str, **policy: object) -> str:
    return open_topic(owner, name, **policy)


def subscribe(node: Node, topic: str, timeout: float = 60) -> None:
    """Subscribe and wait for the owner's document to arrive."""
    got = node.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": timeout})
    if not got["topic"]["known"]:
        raise AssertionError(f"{node.name}: no topic document for {topic} after {timeout} s")


def records(node: Node, topic: str) -> int:
    """How many records of ``topic`` the host holds, read from its store.

    Not ``/v1/board/topics``: its unread count costs time quadratic in a
    topic's size (the delete check picks the author index), which at 10,000
    records takes the daemon's reader for a minute.
    """
    with sqlite3.connect(f"file:{node.home}/awp.db?mode=ro", uri=True, timeout=30) as con:
        return con.execute("SELECT count(*) FROM board_records WHERE topic = ?",
                           (topic,)).fetchone()[0]


def hashes(node: Node, topic: str) -> set[str]:
    got = node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})
    return {p["hash"] for p in got["posts"]}


# -- 1. spread --------------------------------------------------------------------------------


def spread(kind: str, n: int, posts: int, rate: float, rest: float, presence: bool,
           root: str, profile: int = -1, poll: bool = False, native: bool = False) -> bool:
    extra = ["--presence"] if presence else []
    nodes = [Node(os.path.join(root, f"{kind}{i}"), f"{kind}{i}", extra=extra) for i in range(n)]
    waiters: list[Waiter] = []
    try:
        start_all(nodes)
        adj = build(nodes, kind)
        topic = create_topic(nodes[0], "bench")
        took_sub = subscribe_all(nodes, adj, topic)
        waiters = [Waiter(x, topic, poll=poll) for x in nodes]
        for w in waiters:
            w.start()
        # At rest: every client following its host, nothing posted.
        time.sleep(min(5.0, rest))
        cpu0, t0 = cpu_all(nodes), time.monotonic()
        time.sleep(rest)
        at_rest = spent(cpu0, cpu_all(nodes))
        rest_s = time.monotonic() - t0
        rest_rate = [c / rest_s for c in at_rest]  # CPU-s per second, each daemon
        lines0 = presence_lines(nodes) if presence else 0
        board0 = board_in(nodes)
        sent: list[tuple[str, int, float]] = []  # hash, poster, call start
        spy = start_profile(nodes[profile], root, kind, native) if profile >= 0 else None
        cpu1 = cpu_all(nodes)
        split1 = [cpu_split(x) for x in nodes]
        clients0 = time.process_time()
        answers0 = sum(w.answers for w in waiters)
        t_start = t_next = time.monotonic()
        for k in range(posts):
            poster = (k * 7 + 1) % n  # hosts in turn, near and far from the owner
            t_next += 1 / rate
            time.sleep(max(0.0, t_next - time.monotonic()))
            t_call = time.monotonic()
            got = nodes[poster].api("POST", "/v1/board/post",
                                    {"topic": topic, "parts": text(f"spread {k} from {poster}")})
            sent.append((got["post"]["hash"], poster, t_call))
        expected = [(h, t, i) for h, p, t in sent for i in range(n) if i != p]

        def all_in() -> bool:
            return all(h in waiters[i].seen for h, _t, i in expected)

        try:
            wait_for(all_in, 60, "every post at every host", interval=0.1)
        except AssertionError:
            pass
        flow_s = time.monotonic() - t_start
        flow = spent(cpu1, cpu_all(nodes))
        clients_cpu = time.process_time() - clients0
        split = spent_split(split1, [cpu_split(x) for x in nodes])
        if spy is not None:
            stop_profile(spy)
        lines = presence_lines(nodes) - lines0 if presence else 0
        board1 = board_in(nodes)
        for w in waiters:
            w.stop.set()
        lat = [waiters[i].seen[h] - t for h, t, i in expected if h in waiters[i].seen]
        lost = [(h, i) for h, _t, i in expected if h not in waiters[i].seen]
        held = sum(1 for h, i in lost if h in hashes(nodes[i], topic))
        errors = [f"{w.node.name}: {w.error}" for w in waiters if w.error]
        p99 = pct(lat, 99)
        ok = bool(lat) and not lost and p99 <= 2.0 and not errors
        far = max(distances(adj, 0).values())
        print(f"spread, {kind} of {n}: {posts} posts from hosts in turn at {rate:g}/s, each to"
              f" every other subscriber, the farthest {far} links from the owner"
              f" ({len(lat)} deliveries): p50 {pct(lat, 50) * 1000:.0f} ms,"
              f" p99 {p99 * 1000:.0f} ms, max {max(lat, default=float('nan')) * 1000:.0f} ms;"
              f" missing {len(lost)}  (target p99 <= 2 s) {verdict(ok)}")
        if lost:
            print(f"      of the {len(lost)} missing, {held} are held by their host: stored,"
                  " but never returned by /v1/board/wait")
        per_min = [r * 60 for r in rest_rate]
        print(f"      CPU per daemon at rest (every client following its host):"
              f" avg {sum(per_min) / n:.3f}, max {max(per_min):.3f} CPU-s a minute")
        extra_cpu = [f - r * flow_s for f, r in zip(flow, rest_rate, strict=True)]
        per_host_ms = [max(0.0, c) * 1000 / posts for c in extra_cpu]
        per_post_ms = sum(per_host_ms) / n
        ok_cpu = per_post_ms <= CPU_TARGET_MS
        print(f"      CPU per post per host: {per_post_ms:.2f} ms (busiest host"
              f" {max(per_host_ms):.2f} ms; all {n} daemons {sum(flow):.1f} CPU-s in"
              f" {flow_s:.1f} s, {sum(r * flow_s for r in rest_rate):.1f} of it their rest"
              f" rate; user {split[0]:.1f}, system {split[1]:.1f})  (target <="
              f" {CPU_TARGET_MS} ms) {verdict(ok_cpu)}")
        print(f"      by role: {by_role(adj, per_host_ms)}")
        answers = sum(w.answers for w in waiters) - answers0
        how = "long-polls" if poll else "streaming waits"
        print(f"      the clients (this process: the posting calls, and the {how} following"
              f" every host) {clients_cpu:.1f} CPU-s = {clients_cpu * 1000 / posts / n:.2f} ms"
              f" per post per host; the hosts sent {answers} answers for"
              f" {len(lat)} deliveries; the daemons took {board1[1] - board0[1]} records in"
              f" {board1[0] - board0[0]} board lines, and {board1[2] - board0[2]} times a"
              " copy was behind the owner's head and asked every peer again")
        if presence:
            print(f"      presence lines sent by all daemons while the posts flowed: {lines} in"
                  f" {flow_s:.0f} s ({lines / flow_s * 60 / n:.2f} a daemon a minute)")
        print(f"      subscribing all {n - 1} hosts, nearest first, took {took_sub:.1f} s")
        for e in errors:
            print(f"      waiter failed: {e}")
        return ok and ok_cpu
    finally:
        for w in waiters:
            w.stop.set()
        for x in nodes:
            x.kill()


def by_role(adj: dict[int, set[int]], per_host_ms: list[float]) -> str:
    """CPU per post of the owner, of the hosts that relay (more than one link) and of
    the leaves: where a post's cost lands."""
    relays = [ms for i, ms in enumerate(per_host_ms) if i and len(adj[i]) > 1]
    leaves = [ms for i, ms in enumerate(per_host_ms) if i and len(adj[i]) <= 1]

    def avg(v: list[float]) -> str:
        return f"{sum(v) / len(v):.2f} ms" if v else "none"

    return (f"the owner {per_host_ms[0]:.2f} ms, {len(relays)} relays {avg(relays)} each,"
            f" {len(leaves)} leaves {avg(leaves)} each")


def start_profile(node: Node, root: str, kind: str,
                  native: bool = False) -> tuple[subprocess.Popen, str]:
    """Sample ``node``'s daemon with py-spy while the posts flow (``--profile``); with
    ``native``, C frames too (SQLite, libsodium), every thread, the daemon paused per
    sample (it costs the daemon more, so its CPU figure is not comparable)."""
    assert node.proc is not None
    out = os.path.join(os.path.dirname(root), f"awp-board-{kind}-{node.name}.txt")
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(exe, os.X_OK):
        raise SystemExit("--profile needs py-spy, which is not installed: "
                         "pip install py-spy into this virtualenv")
    how = ["--native"] if native else ["--gil", "--nonblocking"]
    spy = subprocess.Popen([exe, "record", "--pid", str(node.proc.pid), "--format", "raw",
                            "--rate", "250", *how, "--output", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return spy, out


def stop_profile(spy: tuple[subprocess.Popen, str]) -> None:
    proc, out = spy
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    print(f"      py-spy samples (collapsed stacks) of the profiled daemon: {out}")


# -- the small cluster: 2. burst, 3. catch-up, 4. queue ----------------------------------------


def run_pool(jobs: int, threads: int, job: Callable[[int], None]) -> list[str]:
    """Run ``job(k)`` for k in range(jobs) on ``threads`` threads; the errors."""
    lock = threading.Lock()
    todo = iter(range(jobs))
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            try:
                job(k)
            except Exception as e:  # noqa: BLE001 - counted and shown by the bench
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def post_many(node: Node, topic: str, texts: list[str]) -> list[str]:
    """Post ``texts`` in order, up to 1,000 a request; the hashes of those kept."""
    out: list[str] = []
    for i in range(0, len(texts), 1000):
        got = node.api("POST", "/v1/board/post",
                       {"topic": topic, "posts": [{"parts": text(t)} for t in texts[i:i + 1000]]})
        out += [p["hash"] for p in got["posts"] if p.get("kept", True)]
    return out


def burst(owner: Node, sub: Node, count: int, posters: int, batch: int) -> bool:
    topic = create_topic(owner, "burst")
    subscribe(sub, topic)
    errors = run_pool(min(50, count), posters, lambda k: owner.api(
        "POST", "/v1/board/post", {"topic": topic, "parts": text(f"warm-up {k}")}))
    t0 = time.monotonic()
    # One client (one kept-alive connection) per poster, as a script that posts
    # in a loop holds: what is measured is the posting, not a connect a post.
    clients = threading.local()

    def post_one(k: int) -> None:
        if not hasattr(clients, "c"):
            clients.c = owner.client
        clients.c.request("POST", "/v1/board/post", {"topic": topic,
                                                     "parts": text(f"burst post {k}")})

    errors += run_pool(count, posters, post_one)
    took = time.monotonic() - t0
    rate = count / took
    behind = subscriber_caught_up(owner, sub, topic, t0)
    ok = rate >= 1000 and not errors
    print(f"burst, one post a request: {count} posts from {posters} concurrent clients (each"
          f" keeping its connection) on the"
          f" owner's local API in {took:.2f} s: {rate:.0f} posts/s  (target >= 1,000/s)"
          f" {verdict(ok)}")
    print(f"      {behind}; errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    # The same number again, ``batch`` posts a request (how a queue is filled).
    kept: list[str] = []
    lock = threading.Lock()
    chunks = [[f"batched post {k}" for k in range(i, min(i + batch, count))]
              for i in range(0, count, batch)]

    def send(i: int) -> None:
        got = post_many(owner, topic, chunks[i])
        with lock:
            kept.extend(got)

    t0 = time.monotonic()
    errors = run_pool(len(chunks), min(posters, len(chunks)), send)
    took_b = time.monotonic() - t0
    rate_b = len(kept) / took_b
    behind = subscriber_caught_up(owner, sub, topic, t0)
    ok_b = rate_b >= 1000 and not errors and len(kept) == count
    print(f"burst, {batch} posts a request: {len(kept)} of {count} posts kept in {took_b:.2f} s:"
          f" {rate_b:.0f} posts/s  (target >= 1,000/s) {verdict(ok_b)}")
    print(f"      {behind}; errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    return ok and ok_b


def subscriber_caught_up(owner: Node, sub: Node, topic: str, t0: float) -> str:
    """How long after ``t0`` the subscriber held every record the owner holds."""
    want = records(owner, topic)
    try:
        wait_for(lambda: records(sub, topic) >= want, 120, "the subscriber to catch up",
                 interval=0.2)
    except AssertionError:
        return f"the subscriber held {records(sub, topic)} of {want} records after 120 s"
    return f"the subscriber held them all {time.monotonic() - t0:.1f} s after the first"


def topic_bytes(node: Node, topic: str) -> int:
    with sqlite3.connect(f"file:{node.home}/awp.db?mode=ro", uri=True, timeout=30) as con:
        row = con.execute("SELECT COALESCE(SUM(size), 0) FROM board_records WHERE topic = ?",
                          (topic,)).fetchone()
    return int(row[0])


def catchup(owner: Node, host: Node, count: int) -> bool:
    topic = create_topic(owner, "gap")
    subscribe(host, topic)
    owner.api("POST", "/v1/board/post", {"topic": topic, "parts": text("before the gap")})
    wait_for(lambda: records(host, topic) == records(owner, topic), 30, "the host in step")
    before = topic_bytes(owner, topic)
    host.stop()
    # In batches: the figure is the catch-up, not how fast the owner posts.
    posted = post_many(owner, topic, [f"while away {k:05d}" for k in range(count)])
    errors = [] if len(posted) == count else [f"{count - len(posted)} posts not kept"]
    lacked = topic_bytes(owner, topic) - before
    want = records(owner, topic)
    host.start()
    t0 = time.monotonic()
    host.connect(owner)
    try:
        wait_for(lambda: records(host, topic) >= want, 120, "the host caught up", interval=0.05)
    except AssertionError:
        print(f"catch-up: the host held {records(host, topic)} of {want} records after 120 s"
              "  MISS")
        return False
    took = time.monotonic() - t0
    st = host.api("GET", "/v1/status")["board"]
    ratio = st["bytes_in"] / lacked if lacked else float("nan")
    ok = took < 10 and ratio < 2 and not errors
    print(f"catch-up: a host offline for {count} posts ({lacked / 1e6:.2f} MB of records) held"
          f" them all {took:.2f} s after it dialed ({count / took:.0f} records/s taken),"
          f" receiving {st['bytes_in'] / 1e6:.2f} MB in"
          f" {st['lines_in']} board lines = {ratio:.3f}x the records' bytes"
          f"  (targets < 10 s, < 2x) {verdict(ok)}")
    if errors:
        print(f"      {len(errors)} posts failed (first: {errors[0]})")
    return ok


def queue(owner: Node, hosts: list[Node], items: int, claimants: int) -> bool:
    topic = create_topic(owner, "jobs", queue=True, lease_s=600, attempts=3)
    for h in hosts:
        subscribe(h, topic)
    posted = post_many(owner, topic, [f"job {k}" for k in range(items)])
    errors = [] if len(posted) == items else [f"{items - len(posted)} items not kept"]
    lock = threading.Lock()
    everyone = [owner, *hosts]
    claimed: list[str] = []
    stop = threading.Event()

    def claimant(k: int) -> None:
        node = everyone[k % len(everyone)]
        while not stop.is_set():
            got = node.api("POST", "/v1/board/claim", {"topic": topic, "timeout": 30})
            if got["state"] == "empty":
                return
            with lock:
                claimed.append(got["item"]["hash"])
            node.api("POST", "/v1/board/lease",
                     {"topic": topic, "lease": got["lease"], "op": "complete"})

    t0 = time.monotonic()
    errors += run_pool(claimants, claimants, claimant)
    took = time.monotonic() - t0
    dup = len(claimed) - len(set(claimed))
    never = len(set(posted) - set(claimed))
    stray = len(set(claimed) - set(posted))
    ok = not dup and not never and not stray and not errors
    print(f"queue: {items} items, {claimants} claimants on {len(everyone)} hosts (the owner and"
          f" {len(hosts)} connected to it): {len(claimed)} claims in {took:.2f} s ="
          f" {len(claimed) / took:.0f} claims/s, each followed by its complete; claimed twice"
          f" {dup}, never {never}, not an item {stray}  (target every item exactly once)"
          f" {verdict(ok)}")
    if errors:
        print(f"      {len(errors)} requests failed (first: {errors[0]})")
    return ok


def cluster(args: argparse.Namespace, parts: set[str], root: str) -> bool:
    owner = Node(os.path.join(root, "owner"), "owner")
    host = Node(os.path.join(root, "host"), "host")
    extra = [Node(os.path.join(root, f"c{i}"), f"c{i}") for i in range(args.claim_hosts)]
    nodes = [owner, host, *extra]
    ok = True
    try:
        start_all(nodes)
        for x in nodes[1:]:
            x.connect(owner)
        if "burst" in parts:
            ok &= burst(owner, host, args.burst, args.posters, args.batch)
        if "catchup" in parts:
            ok &= catchup(owner, host, args.offline)
        if "queue" in parts:
            ok &= queue(owner, [host, *extra], args.items, args.claimants)
        return ok
    finally:
        for x in nodes:
            x.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=32, help="daemons in each topology")
    ap.add_argument("--topology", default=",".join(TOPOLOGIES),
                    help="comma-separated: line, tree (fan-out 3)")
    ap.add_argument("--rest", type=float, default=10.0,
                    help="seconds the spread's mesh is watched at rest, for the CPU at rest")
    ap.add_argument("--presence", action="store_true",
                    help="the spread's daemons publish presence too")
    ap.add_argument("--posts", type=int, default=200, help="posts spread in each topology")
    ap.add_argument("--rate", type=float, default=20.0, help="spread posts per second")
    ap.add_argument("--burst", type=int, default=5000, help="posts in the burst")
    ap.add_argument("--posters", type=int, default=16, help="concurrent clients posting")
    ap.add_argument("--batch", type=int, default=100,
                    help="posts a request in the burst's second run (at most 1,000)")
    ap.add_argument("--offline", type=int, default=10_000, help="posts made while a host is away")
    ap.add_argument("--claimants", type=int, default=100)
    ap.add_argument("--items", type=int, default=1000, help="items on the work queue")
    ap.add_argument("--claim-hosts", type=int, default=4,
                    help="hosts besides the owner and the subscriber that claim")
    ap.add_argument("--poll", action="store_true",
                    help="the spread's clients long-poll (a request a wake-up) instead of"
                         " streaming one wait each")
    ap.add_argument("--profile", type=int, default=-1, metavar="HOST",
                    help="sample daemon HOST with py-spy while the spread's posts flow")
    ap.add_argument("--native", action="store_true",
                    help="with --profile: sample C frames too (SQLite, libsodium)")
    ap.add_argument("--only", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    args = ap.parse_args()
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if parts - set(PARTS):
        ap.error(f"--only takes {', '.join(PARTS)}")
    if args.hosts < 2:
        ap.error("--hosts must be at least 2")
    kinds = [k.strip() for k in args.topology.split(",") if k.strip()]
    if not kinds or set(kinds) - set(TOPOLOGIES):
        ap.error(f"--topology takes {', '.join(TOPOLOGIES)}")
    if not 1 <= args.batch <= 1000:
        ap.error("--batch takes 1 to 1,000")
    root = tempfile.mkdtemp(prefix="awpB", dir="/tmp")
    ok = True
    try:
        if "spread" in parts:
            for kind in kinds:
                ok &= spread(kind, args.hosts, args.posts, args.rate, args.rest, args.presence,
                             root, args.profile, args.poll, args.native)
        if parts & {"burst", "catchup", "queue"}:
            ok &= cluster(args, parts, root)
    finally:
        if not os.environ.get("AWP_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
