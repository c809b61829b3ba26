"""Mesh bench: a board topic on a line and a tree of daemons that lose relays (issue 19).

Every scenario builds a :class:`Mesh` of ``--hosts`` daemons on loopback, as a
line or a tree (fan-out ``--fanout``), each child dialing its parent once.
Host 0 owns a topic that is not open: it grants every other host by key alone
(``awp topic grant heal KEY --read``, no direct link to it; the grant travels
as a member in the topic's document), and every other host subscribes to it,
nearest first.  Nobody ever calls connect again: links that break are the
daemons' own business (SPEC.md section 8, "Keeping links").

``healing`` (the default scenario) prints, with its target and ``ok`` or
``MISS``:

1. **spread**: ``--calm`` posts from the owner at ``--rate`` a second while
   every host is up; a post's latency at a host is from the start of the
   owner's ``/v1/board/post`` call until that host's ``/v1/board/wait``
   returned it, for every subscriber at any distance (target: p99 <= 2 s).
   **stamped spread**: the same for ``--far`` posts from the host farthest
   from the owner (granted posting by key): each travels to the owner, is
   stamped there, and spreads from it to every other host (target: p99 <= 2 s).
2. **healing**: while the rest of ``--posts`` flow, ``--kills`` times a
   random relay (a host with more than one link, not the owner) is killed
   with SIGKILL, kept down ``--down`` seconds, and started again.  For each
   restart: the time from the start until the relay has all its links back,
   and until every host behind it (cut off from the owner while it was down)
   holds every post the owner made while it was down.  Target: p99 <= 10 s.
3. **presence**: ``--settle`` seconds after the last post, the share of
   (post, host) pairs present.  Target: 100%.

``hostile`` and ``claims`` are ``bench/mesh_board.py``'s (a flooding author
on an open topic; claimants two hops from a queue's owner killed -9 twice,
healed by the daemons' own redial); they build their own small lines and run
once whatever ``--topology`` says.

Run: python bench/mesh.py [--scenario healing,hostile,claims] [--hosts 32]
[--topology line,tree] [--fanout 3] [--posts 1000] [--calm 200] [--far 100] [--rate 10] [--kills 10]
[--down 2] [--settle 60] [--seed 1] [mesh_board.py's options]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mesh_board  # noqa: E402
from board import Waiter, create_topic, pct, start_all, subscribe, text, verdict  # noqa: E402
from nodes import ROOT, Node, wait_for  # noqa: E402
from presence import distances  # noqa: E402


class Mesh:
    """``n`` daemons as a line or a tree; host 0 is the owner of the topics."""

    def __init__(self, root: str, kind: str, n: int, fanout: int = 3) -> None:
        self.kind, self.n = kind, n
        os.makedirs(root, exist_ok=True)
        self.nodes = [Node(os.path.join(root, f"{kind}{i}"), f"{kind}{i}") for i in range(n)]
        self.edges = ([(i, i + 1) for i in range(n - 1)] if kind == "line"
                      else [((i - 1) // fanout, i) for i in range(1, n)])
        self.adj: dict[int, set[int]] = {i: set() for i in range(n)}
        for a, b in self.edges:
            self.adj[a].add(b)
            self.adj[b].add(a)
        self.dist = distances(self.adj, 0)

    def __enter__(self) -> Mesh:
        start_all(self.nodes)
        for a, b in self.edges:
            self.nodes[b].connect(self.nodes[a])  # the child dials its parent, once
        return self

    def __exit__(self, *exc: object) -> None:
        for x in self.nodes:
            try:
                x.kill()
            except subprocess.TimeoutExpired:  # SIGKILL sent; slow to go on a loaded machine
                print(f"      {x.name} was slow to die after SIGKILL", file=sys.stderr)

    def far(self) -> int:
        """The host farthest from the owner (the end of a line, a deepest leaf)."""
        return max(self.dist, key=lambda i: (self.dist[i], i))

    def granted_topic(self, name: str, **policy: object) -> str:
        """A topic of host 0 that only granted keys may read; every other host is granted
        reading by key alone with ``awp topic grant`` (most are not linked to host 0) and
        subscribes, nearest first.  The farthest host may post too."""
        topic = create_topic(self.nodes[0], name, read="grant", post="grant", **policy)
        owner = self.nodes[0]
        env = {**os.environ, "PYTHONPATH": ROOT}
        for i, _d in sorted(self.dist.items(), key=lambda x: x[1]):
            if i:
                subprocess.run([sys.executable, "-m", "awp", "topic", "grant", name,
                                self.nodes[i].key, *(["--post"] if i == self.far() else
                                                     ["--read"]), "--home", owner.home],
                               check=True, capture_output=True, env=env, timeout=60,
                               stdin=subprocess.DEVNULL)
                subscribe(self.nodes[i], topic)
        return topic

    def relays(self) -> list[int]:
        return [i for i in range(1, self.n) if len(self.adj[i]) > 1]

    def behind(self, r: int) -> set[int]:
        """Hosts cut off from the owner while ``r`` is down."""
        adj = {i: {j for j in js if j != r} for i, js in self.adj.items() if i != r}
        return set(adj) - set(distances(adj, 0))

    def restart(self, i: int) -> float:
        """Start host ``i`` again (same home, same address); when the start began."""
        t = time.monotonic()
        self.nodes[i].start(wait=False)
        self.nodes[i].wait_ready(120)
        return t

    def linked(self, i: int) -> bool:
        """Host ``i`` is connected to all its neighbours."""
        up = {p["key"] for p in self.nodes[i].api("GET", "/v1/peers")
              if p["state"].startswith("connected")}
        return all(self.nodes[j].key in up for j in self.adj[i])


def held(node: Node, topic: str) -> set[str]:
    """Hashes of the posts ``node`` holds, read from its store (the daemon may be down)."""
    try:
        with sqlite3.connect(f"file:{node.home}/awp.db?mode=ro", uri=True, timeout=30) as con:
            return {r[0] for r in con.execute(
                "SELECT hash FROM board_records WHERE topic = ? AND kind = 'post'", (topic,))}
    except sqlite3.Error:
        return set()


def until(cond: Callable[[], bool], timeout: float, interval: float = 0.1) -> float | None:
    """Seconds until ``cond()`` held, or None when ``timeout`` passed first."""
    t0 = time.monotonic()
    try:
        wait_for(cond, timeout, "", interval=interval)
    except AssertionError:
        return None
    return time.monotonic() - t0


class Poster(threading.Thread):
    """Posts at ``rate`` a second from the owner, keeping each hash and when its call began."""

    def __init__(self, owner: Node, topic: str, count: int, rate: float, tag: str) -> None:
        super().__init__(daemon=True)
        self.owner, self.topic, self.count, self.rate, self.tag = owner, topic, count, rate, tag
        self.sent: list[tuple[str, float]] = []
        self.lock = threading.Lock()
        self.error = ""

    def run(self) -> None:
        t_next = time.monotonic()
        try:
            for k in range(self.count):
                t_next += 1 / self.rate
                time.sleep(max(0.0, t_next - time.monotonic()))
                t = time.monotonic()
                got = self.owner.api("POST", "/v1/board/post",
                                     {"topic": self.topic, "parts": text(f"{self.tag} {k}")})
                with self.lock:
                    self.sent.append((got["post"]["hash"], t))
        except Exception as e:  # noqa: BLE001 - shown by the bench
            self.error = f"{type(e).__name__}: {e}"

    def between(self, t1: float, t2: float) -> set[str]:
        """Posts whose call began from ``t1`` until ``t2``."""
        with self.lock:
            return {h for h, t_call in self.sent if t1 <= t_call < t2}


# -- scenario: healing ----------------------------------------------------------------------


def spread(mesh: Mesh, topic: str, args: argparse.Namespace, author: int = 0) -> bool:
    """Posts from ``author`` at ``--rate``, each timed at every other host.

    From the owner a post goes straight out; from another host it goes to the
    owner first (over the line), is stamped there, and spreads from it.
    """
    waiters = [Waiter(x, topic) for i, x in enumerate(mesh.nodes) if i != author]
    for w in waiters:
        w.start()
    count = args.calm if author == 0 else args.far
    poster = Poster(mesh.nodes[author], topic, count, args.rate, "calm" if author == 0 else "far")
    lines0, t_lines = board_lines(mesh), time.monotonic()
    poster.run()  # in this thread
    everyone = [(h, t, w) for h, t in poster.sent for w in waiters]
    until(lambda: all(h in w.seen for h, _t, w in everyone), 30, 0.1)
    per_link = ((board_lines(mesh) - lines0) / len(mesh.edges) / 2
                / ((time.monotonic() - t_lines) / 60)) if mesh.edges else 0.0
    for w in waiters:
        w.stop.set()
    lat = [w.seen[h] - t for h, t, w in everyone if h in w.seen]
    missing = len(everyone) - len(lat)
    p99 = pct(lat, 99) if not missing else float("inf")
    ok = bool(lat) and p99 <= 2.0 and not poster.error
    who = ("from the owner" if author == 0 else
           f"from host {author}, {mesh.dist[author]} hops out, stamped by the owner,")
    name = "spread" if author == 0 else "stamped spread"
    print(f"{name}, {mesh.kind} of {mesh.n}: {len(poster.sent)} posts {who} at"
          f" {args.rate:g}/s to all {mesh.n - 1} other hosts (up to"
          f" {max(mesh.dist.values())} hops): p50 {pct(lat, 50) * 1000:.0f} ms, p99"
          f" {p99 * 1000:.0f} ms, {missing} of {len(everyone)} deliveries missing after 30 s"
          f"  (target p99 <= 2 s) {verdict(ok)}")
    print(f"      board lines a link a minute, each way, meanwhile: {per_link:.1f}"
          " (bench/sim.py's cross-check)")
    if poster.error:
        print(f"      posting failed: {poster.error}")
    return ok


def board_lines(mesh: Mesh) -> int:
    """Board lines every host has sent since it started."""
    return sum((x.api("GET", "/v1/status")["board"] or {}).get("lines_out", 0)
               for x in mesh.nodes)


def healing(mesh: Mesh, args: argparse.Namespace) -> bool:
    rnd = random.Random(args.seed)
    topic = mesh.granted_topic("heal", rate=6000, keep=1_000_000, keep_bytes=1024 ** 3)
    ok = spread(mesh, topic, args) if args.calm else True
    if args.far:
        ok &= spread(mesh, topic, args, author=mesh.far())
    poster = Poster(mesh.nodes[0], topic, args.posts - args.calm, args.rate, "flow")
    poster.start()
    links_back: list[float] = []
    healed: list[float] = []  # every host behind the relay
    unhealed = 0
    relays = mesh.relays()
    for _ in range(args.kills if relays else 0):
        r = rnd.choice(relays)
        t_kill = time.monotonic()
        mesh.nodes[r].kill()
        time.sleep(args.down)
        t0 = mesh.restart(r)
        want = poster.between(t_kill, t0)  # the posts made meanwhile
        behind = mesh.behind(r)
        back = until(lambda r=r: mesh.linked(r), 60, 0.2)
        links_back.append(time.monotonic() - t0 if back is not None else float("inf"))
        left = set(behind)
        while left and time.monotonic() - t0 < args.heal_wait:
            left = {i for i in left if not want <= held(mesh.nodes[i], topic)}
            if left:
                time.sleep(0.2)
        if left:
            unhealed += 1
        else:
            healed.append(time.monotonic() - t0)
    poster.join()
    settle_t = until(lambda: all(set(h for h, _t in poster.sent) <= held(x, topic)
                                 for x in mesh.nodes[1:]), args.settle, 0.5)
    sent = {h for h, _t in poster.sent}
    pairs = len(sent) * (mesh.n - 1)
    present = sum(len(sent & held(x, topic)) for x in mesh.nodes[1:])
    share = present / pairs if pairs else 1.0
    if relays and args.kills:
        p99 = pct(healed, 99) if not unhealed else float("inf")
        ok_heal = p99 <= 10.0
        print(f"healing, {mesh.kind} of {mesh.n}: {args.kills} relays killed -9, down"
              f" {args.down:g} s each, started again, no connect: every host behind the"
              f" relay held every post: p50 {pct(healed, 50):.1f} s, p99 {p99:.1f} s;"
              f" {unhealed} of {args.kills} not healed within {args.heal_wait:g} s"
              f"  (target p99 <= 10 s) {verdict(ok_heal)}")
        print(f"      the relay's links all back: p50 {pct(links_back, 50):.1f} s, p99"
              f" {pct(links_back, 99):.1f} s")
        ok &= ok_heal
    ok_present = share == 1.0 and not poster.error
    print(f"presence, {mesh.kind} of {mesh.n}: {len(sent)} posts made while relays died:"
          f" {share * 100:.2f}% of (post, host) pairs present"
          + (f" {settle_t:.1f} s after the last post" if settle_t is not None
             else f" after {args.settle:g} s")
          + f"  (target 100%) {verdict(ok_present)}")
    if poster.error:
        print(f"      posting failed: {poster.error}")
    return ok and ok_present


def healing_all(root: str, args: argparse.Namespace) -> bool:
    """``healing`` on each ``--topology``, a fresh :class:`Mesh` for each."""
    ok = True
    for kind in args.kinds:
        with Mesh(os.path.join(root, f"healing-{kind}"), kind, args.hosts, args.fanout) as mesh:
            ok &= healing(mesh, args)
    return ok


SCENARIOS: dict[str, Callable[[str, argparse.Namespace], bool]] = {
    "healing": healing_all,
    "hostile": lambda _root, args: mesh_board.run("hostile", args),
    "claims": lambda _root, args: mesh_board.run("claims", args),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="healing",
                    help="comma-separated: " + ", ".join(SCENARIOS))
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--topology", default="line,tree", help="line, tree, or both")
    ap.add_argument("--fanout", type=int, default=3, help="children of each host in the tree")
    ap.add_argument("--posts", type=int, default=1000, help="posts in all, calm ones included")
    ap.add_argument("--calm", type=int, default=200, help="posts made before any kill (spread)")
    ap.add_argument("--far", type=int, default=100,
                    help="posts from the farthest host, stamped by the owner (stamped spread)")
    ap.add_argument("--rate", type=float, default=10.0, help="posts a second")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--down", type=float, default=2.0, help="seconds a killed relay stays down")
    ap.add_argument("--heal-wait", type=float, default=60.0,
                    help="seconds to wait for the hosts behind a restarted relay")
    ap.add_argument("--settle", type=float, default=60.0,
                    help="seconds after the last post for every host to hold it")
    ap.add_argument("--seed", type=int, default=1)
    mesh_board.add_args(ap)
    args = ap.parse_args()
    names = [s.strip() for s in args.scenario.split(",") if s.strip()]
    kinds = [k.strip() for k in args.topology.split(",") if k.strip()]
    if not names or set(names) - set(SCENARIOS):
        ap.error(f"--scenario takes {', '.join(SCENARIOS)}")
    if not kinds or set(kinds) - {"line", "tree"}:
        ap.error("--topology takes line, tree")
    if args.hosts < 3 or args.fanout < 1 or not 0 <= args.calm <= args.posts:
        ap.error("--hosts >= 3, --fanout >= 1, 0 <= --calm <= --posts")
    root = tempfile.mkdtemp(prefix="awpM", dir="/tmp")
    args.kinds = kinds
    ok = True
    try:
        for name in names:
            ok &= SCENARIOS[name](root, args)
    finally:
        if not os.environ.get("AWP_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
