"""Board simulator: N real replication cores over a simulated network (issue 37).

Every host runs the daemon's own rules, :class:`awp.board.replica.Replica`,
and carries out its actions the way :mod:`awp.node.board` does, but against
an in-memory store (an :class:`awp.board.sync.Holdings` a host, the digest
exchange of :mod:`awp.board.sync`, the gap check of :mod:`awp.board.heads`)
and a network made of a heap of timed events (``bench/sim_net.py``):

* records are real: each post is signed by its author (keys made once, up
  front) and every host parses and verifies each record it keeps, once
  (duplicates are turned away by hash before the signature, as the store
  does); the exact text is parsed once for the whole run, since the same
  bytes name the same record on every host;
* the owner (host 0) signs real heads (:func:`awp.wire.board.make_head`)
  every ``--head-every`` seconds and after a change at most every 2 s; each
  host checks the signature of each head it has not seen;
* links have a latency drawn once per link (``--latency`` ms ``±
  --jitter``), keep their order, and lose a line with ``--loss``; a host
  spends ``--cpu-ms`` per record it keeps and ``--dup-ms`` per line it
  reads, one line at a time;
* churn: ``--kill`` of the hosts (never the owner) are killed halfway into
  the load, all at once, and started again ``--down`` seconds later with
  their store; ``--partition S`` cuts the hosts into two halves for ``S``
  seconds before the load.

Not modelled: the owner's stamp of another author's post (posts are taken
as signed, so the spread is the flood's, not the stamp's round trip), the
queue, grants and send-queue bounds.

The run: links come up, ``--rest`` seconds with no posts (at-rest traffic:
heads and the periodic digest), then ``--sim-seconds`` of load
(``--post-rate`` posts a host a minute), then a tail until every host holds
every post or ``--tail`` seconds pass.  It prints spread p50/p99, lines and
bytes per link per minute at rest and under load, records per host, healing
time of the restarted hosts, posts missing at the end and wall time per
simulated second, each with its target where the issue sets one.

Run: python bench/sim.py [--hosts 100] [--topology regular] [--degree 6]
[--post-rate 0.01/min] [--kill 0.05] [--sim-seconds 120] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sim_net import TOPOLOGIES, Clock  # noqa: E402

from awp.board import heads as bheads  # noqa: E402
from awp.board import replica_actions as A  # noqa: E402
from awp.board import sync as bsync  # noqa: E402
from awp.board.replica import HEAD_S, Replica  # noqa: E402
from awp.wire.board import (  # noqa: E402
    FUTURE_MS,
    BoardError,
    check_head,
    make_head,
    make_post,
    make_topic,
    parse_unverified,
    verify_record,
)
from awp.wire.keys import Identity  # noqa: E402

BASE_MS = 1_800_000_000_000  # simulated time 0, as a wall clock in ms
FLOOR = BASE_MS - 86_400_000
ENVELOPE = 70  # bytes of a board line's t, id and ts members, about


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


class World:
    """Everything the hosts share: the clock, the links, the records and the counts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.clock = Clock()
        n = args.hosts
        t0 = time.perf_counter()
        self.ids = [Identity(self.rng.randbytes(32)) for _ in range(n)]
        self.keys = [i.key for i in self.ids]
        self.index = {k: i for i, k in enumerate(self.keys)}
        edges = TOPOLOGIES[args.topology](n, self.rng, args.degree)
        self.edges = edges
        self.nbrs: list[dict[int, float]] = [{} for _ in range(n)]
        for a, b in edges:
            lat = max(0.0005, (args.latency + self.rng.uniform(-args.jitter, args.jitter)) / 1000)
            self.nbrs[a][b] = lat
            self.nbrs[b][a] = lat
        self.topic_rec = make_topic(self.ids[0], "sim", 1, BASE_MS)
        self.topic = self.topic_rec.topic
        self.parsed: dict[str, object] = {}  # exact text -> its record (parsed once a run)
        self.head_text: dict[str, int] = {}  # head sig -> its size on the wire
        self.hosts = [Host(self, i) for i in range(n)]
        self.lines = self.bytes = 0
        self.window: dict[str, list[int]] = {}  # name -> [lines, bytes] counted in it
        self.counting: list[int] | None = None
        self.posts: dict[str, list] = {}  # hash -> [t posted, holders, last arrival, churn]
        self.churn = False
        # (post, host) latencies, for the cross-check with bench/mesh.py (small runs only)
        self.deliveries: list[float] | None = [] if n <= 2000 else None
        self.setup_s = time.perf_counter() - t0
        self.last_tx: dict[tuple[int, int], float] = {}  # link -> last delivery (FIFO)
        self.cut: set[tuple[int, int]] = set()

    # -- the wire ---------------------------------------------------------------------------

    def send(self, src: int, dst: int, at: float, msg: tuple, size: int) -> None:
        if (min(src, dst), max(src, dst)) in self.cut:
            return
        self.lines += 1
        self.bytes += size
        if self.counting is not None:
            self.counting[0] += 1
            self.counting[1] += size
        if self.args.loss and self.rng.random() < self.args.loss:
            return
        t = at + self.nbrs[src][dst]
        key = (src, dst)
        t = max(t, self.last_tx.get(key, 0.0))  # a link keeps its order
        self.last_tx[key] = t
        h = self.hosts[dst]
        self.clock.at(t, h.receive, src, self.hosts[src].epoch, h.epoch, msg, size)

    def record(self, raw: str):
        rec = self.parsed.get(raw)
        if rec is None:
            rec = self.parsed[raw] = parse_unverified(raw)
        return rec


class Host:
    """One daemon: a replica, its store in memory, and the driver between them."""

    def __init__(self, world: World, i: int) -> None:
        self.w = world
        self.i = i
        self.key = world.keys[i]
        self.held = bsync.Holdings()
        self.raws: dict[str, str] = {}  # hash -> exact text
        self.head_sigs: set[str] = set()
        self.alive = True
        self.epoch = 0
        self.busy = 0.0
        self.need: set[str] | None = None  # after a restart: posts it must get back
        self.healed_at: float | None = None
        self.down_at = 0.0
        self.core = self._core()

    def _core(self) -> Replica:
        core = Replica(self.key, now=self.w.clock.now, resync_s=self.w.args.resync)
        core.subs.add(self.w.topic)
        return core

    # -- life -----------------------------------------------------------------------------

    def connect(self, j: int) -> None:
        """The connection to host ``j`` is up (both sides learn it at once)."""
        if not (self.alive and self.w.hosts[j].alive):
            return
        for a, b in ((self, self.w.hosts[j]), (self.w.hosts[j], self)):
            a.act(a.core.link_up(b.key), a.w.clock.now)

    def kill(self) -> None:
        self.alive = False
        self.epoch += 1
        self.down_at = self.w.clock.now
        for j in self.nbrs():
            self.w.hosts[j].core.link_down(self.key)

    def restart(self) -> None:
        self.alive = True
        self.epoch += 1
        heads = self.core.heads
        self.core = self._core()
        self.core.heads.update(heads)  # kept in the store across a restart
        self.need = {h for h, p in self.w.posts.items() if h not in self.held}
        self.healed_at = None if self.need else self.w.clock.now
        for j in self.nbrs():
            self.w.clock.after(3 * self.w.nbrs[self.i][j], self.connect, j)

    def nbrs(self) -> list[int]:
        return list(self.w.nbrs[self.i])

    def tick(self) -> None:
        if self.alive:
            self.act(self.core.tick(self.w.clock.now), self.w.clock.now)
        self.w.clock.after(60.0, self.tick)

    def head_tick(self) -> None:
        """The owner's head loop (awp.node.board's ``_head_loop``)."""
        now = self.w.clock.now
        every = self.w.args.head_every
        for topic in self.core.heads_due(now, every):
            ts = BASE_MS + int(now * 1000)
            body = bsync.opening(self.held, FLOOR, ts, 0)
            head = make_head(self.w.ids[self.i], topic, ts, 1, FLOOR, body["ranges"],
                             0, int(every * 1000))
            self.act(self.core.signed_head(topic, head), now)
        self.w.clock.after(min(HEAD_S, every), self.head_tick)

    # -- storing ---------------------------------------------------------------------------

    def take(self, raws: list[str]) -> list[str]:
        """The store's take: new records are parsed, verified once and kept."""
        new = []
        for raw in raws:
            rec = self.w.record(raw)
            if rec.hash in self.held:
                continue
            if rec.kind == "post" and not verify_record(rec):
                continue
            self.held.add(rec.ts, rec.hash)
            self.raws[rec.hash] = raw
            new.append(raw)
            p = self.w.posts.get(rec.hash)
            if p is not None:
                p[1] += 1
                p[2] = max(p[2], self.w.clock.now)
                if self.w.deliveries is not None and not p[3]:
                    self.w.deliveries.append(self.w.clock.now - p[0])
                if self.need is not None:
                    self.need.discard(rec.hash)
                    if not self.need and self.healed_at is None:
                        self.healed_at = self.w.clock.now
        return new

    def post(self) -> None:
        if not self.alive:
            return
        now = self.w.clock.now
        rec = make_post(self.w.ids[self.i], self.w.topic,
                        [{"k": "text", "text": f"post from {self.i} at {now:.3f}"}],
                        BASE_MS + int(now * 1000))
        self.w.posts[rec.hash] = [now, 0, now, self.w.churn]
        self.w.parsed[rec.raw] = rec
        self.take([rec.raw])
        # the author's own path first: its API call and durable commit (--origin-ms)
        self.act(self.core.stored(rec.topic, [rec.raw], 0), now + self.w.args.origin_ms / 1000)

    # -- the wire in ---------------------------------------------------------------------------

    def receive(self, src: int, src_epoch: int, my_epoch: int, msg: tuple, size: int) -> None:
        w = self.w
        if not self.alive or my_epoch != self.epoch or src_epoch != w.hosts[src].epoch:
            return  # a connection that broke: what was on its way is lost with it
        now = w.clock.now
        start = max(now, self.busy)
        kind = msg[0]
        src_key = w.keys[src]
        core = self.core
        if kind == "posts":
            _, topic, raws, hops = msg
            new = self.take(raws)
            done = start + w.args.dup_ms / 1000 + len(new) * w.args.cpu_ms / 1000
            self.busy = done
            if new:
                self.act(core.stored(topic, new, hops, src_key), done)
            return
        self.busy = done = start + w.args.dup_ms / 1000
        if kind == "head":
            _, head, hops = msg
            if head["sig"] not in self.head_sigs:
                try:
                    check_head(head)
                except BoardError:
                    return
                self.head_sigs.add(head["sig"])
            self.act(core.on_head(src_key, head, hops, newer=lambda a, b: a["ts"] > b["ts"]),
                     done)
        elif kind == "sub":
            _, topics, drop = msg
            for a in core.on_sub(src_key, [(t, None, None) for t in topics], drop):
                self.act([a], done)
        elif kind == "digest":
            _, topic, body = msg
            step = bsync.respond(self.held, FLOOR, body)
            push = [self.raws[h] for h in step.push if h in self.raws]
            self.act(core.digest_step(src_key, topic, step.reply, push, step.want,
                                      step.truncated), done)
        elif kind == "want":
            _, topic, ids = msg
            raws = [self.raws[h] for h in ids if h in self.raws]
            if raws:
                self.act([(A.FORWARD, topic, raws, 0, [src_key])], done)

    # -- the driver ----------------------------------------------------------------------------

    def act(self, actions: list[tuple], at: float) -> None:  # noqa: C901 - one branch an action
        w = self.w
        for a in actions:
            name = a[0]
            if name == A.FORWARD:
                _, topic, raws, hops, keys = a
                size = ENVELOPE + len(topic) + 20 + sum(len(r) + 1 for r in raws)
                for k in keys:
                    w.send(self.i, w.index[k], at, ("posts", topic, raws, hops), size)
            elif name == A.HEAD:
                _, topic, head, hops, keys = a
                size = w.head_text.get(head["sig"])
                if size is None:
                    size = w.head_text[head["sig"]] = ENVELOPE + 20 + len(json.dumps(head))
                for k in keys:
                    w.send(self.i, w.index[k], at, ("head", head, hops), size)
            elif name == A.SUB:
                _, keys, topics, drop = a
                size = ENVELOPE + 30 + sum(len(t) + 12 for t in topics) + len(json.dumps(drop))
                for k in keys:
                    w.send(self.i, w.index[k], at, ("sub", topics, drop), size)
            elif name in (A.OPEN, A.RESYNC):
                topics = [a[2]] if name == A.OPEN else a[2]
                for topic in topics:
                    now_ms = BASE_MS + int(w.clock.now * 1000)
                    body = bsync.opening(self.held, FLOOR, now_ms, FUTURE_MS)
                    self._digest(a[1], topic, body, at)
            elif name == A.DIGEST:
                self._digest(a[1], a[2], a[3], at)
            elif name == A.WANT:
                _, key, topic, ids = a
                w.send(self.i, w.index[key], at, ("want", topic, ids),
                       ENVELOPE + len(topic) + 20 + 35 * len(ids))
            elif name == A.DOC:
                w.send(self.i, w.index[a[1]], at, ("doc",), ENVELOPE + len(w.topic_rec.raw))
            elif name == A.WAIT_GAP:
                w.clock.at(at + a[2], self._gap_due, a[1], self.epoch)
            elif name == A.CHECK_GAP:
                lacking = bheads.still_lacking(a[2], self.held, 1, FLOOR)
                self.act(self.core.gap_checked(a[1], a[2], lacking), at)
            elif name == A.STAT:
                w.stats[a[1]] = w.stats.get(a[1], 0) + 1
            # KEEP_HEAD, HEARD, EXPLAINED, NONE, FORWARD_DOC: nothing to carry out here

    def _digest(self, key: str, topic: str, body: dict, at: float) -> None:
        size = ENVELOPE + len(topic) + 30 + len(json.dumps(body["ranges"],
                                                        separators=(",", ":")))
        self.w.send(self.i, self.w.index[key], at, ("digest", topic, body), size)

    def _gap_due(self, topic: str, epoch: int) -> None:
        if self.alive and epoch == self.epoch:
            self.act(self.core.gap_due(topic), self.w.clock.now)


def run(args: argparse.Namespace) -> dict:
    t_wall = time.perf_counter()
    w = World(args)
    w.stats = {}
    clock, hosts, rng = w.clock, w.hosts, w.rng
    for h in hosts:  # every host holds the topic's document
        h.held.add(w.topic_rec.ts, w.topic_rec.hash)
        h.raws[w.topic_rec.hash] = w.topic_rec.raw
        clock.at(rng.uniform(0, 60), h.tick)
    clock.at(0.0, hosts[0].head_tick)
    for a, b in w.edges:
        clock.at(rng.uniform(0, 1.0), hosts[b].connect, a)
    warm = 10.0
    clock.run(warm)
    half = set(range(args.hosts // 2))
    if args.partition:
        w.cut = {(min(a, b), max(a, b)) for a, b in w.edges if (a in half) != (b in half)}
        for a, b in w.cut:
            hosts[a].core.link_down(hosts[b].key)
            hosts[b].core.link_down(hosts[a].key)
    w.counting = w.window.setdefault("rest", [0, 0])
    rest_end = warm + args.rest
    clock.run(rest_end)
    part_cut = set(w.cut)
    w.cut = set()
    for a, b in part_cut:  # the partition heals as the load begins
        clock.after(3 * w.nbrs[a][b], hosts[b].connect, a)
    w.counting = w.window.setdefault("load", [0, 0])
    rate = args.post_rate * args.hosts / 60  # posts a second, all hosts together
    if args.rate:
        rate = args.rate
    t = rest_end
    load_end = rest_end + args.sim_seconds
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= load_end:
            break
        who = 0 if args.author == "owner" or args.hosts == 1 else rng.randrange(1, args.hosts)
        clock.at(t, hosts[who].post)
    kill_at = rest_end + args.sim_seconds / 2
    killed = rng.sample(range(1, args.hosts), int(args.kill * args.hosts)) if args.kill else []
    clock.run(kill_at)
    w.churn = True
    for i in killed:
        hosts[i].kill()
    clock.run(kill_at + args.down)
    for i in killed:
        hosts[i].restart()
    w.churn = False
    clock.run(load_end)
    w.counting = None
    end = load_end
    n_posts = len(w.posts)
    while end < load_end + args.tail:
        end += 5.0
        clock.run(end)
        if all(p[1] == args.hosts for p in w.posts.values()):
            break
    wall = time.perf_counter() - t_wall
    links = len(w.edges)
    spreads = [p[2] - p[0] for p in w.posts.values() if p[1] == args.hosts and not p[3]
               and not (kill_at <= p[0] <= kill_at + args.down + 10)]
    missing = sum(args.hosts - p[1] for p in w.posts.values())
    heals = [hosts[i].healed_at - (kill_at + args.down) for i in killed
             if hosts[i].healed_at is not None]
    unhealed = sum(1 for i in killed if hosts[i].healed_at is None)
    rest_min, load_min = args.rest / 60, args.sim_seconds / 60
    return {
        "hosts": args.hosts, "links": links, "posts": n_posts, "sim_s": end,
        "spread_p50": pct(spreads, 50), "spread_p99": pct(spreads, 99),
        "delivery_p50": pct(w.deliveries or [], 50), "delivery_p99": pct(w.deliveries or [], 99),
        "rest_lines": w.window["rest"][0] / links / rest_min / 2 if rest_min else 0,
        "rest_bytes": w.window["rest"][1] / links / rest_min / 2 if rest_min else 0,
        "load_lines": w.window["load"][0] / links / load_min / 2,
        "load_bytes": w.window["load"][1] / links / load_min / 2,
        "records": statistics.mean(len(h.held) for h in hosts),
        "killed": len(killed), "heal_p50": pct(heals, 50), "heal_max": max(heals or [0]),
        "unhealed": unhealed, "missing": missing, "wall": wall, "setup": w.setup_s,
        "wall_per_sim_s": wall / end, "events": clock.events, "stats": w.stats}


def report(r: dict, args: argparse.Namespace) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISS"

    print(f"sim: {r['hosts']} hosts, {args.topology} degree {args.degree}, {r['links']} links,"
          f" {r['posts']} posts, {r['sim_s']:.0f} simulated s, seed {args.seed}")
    print(f"  spread to every subscriber: p50 {r['spread_p50'] * 1000:.0f} ms,"
          f" p99 {r['spread_p99'] * 1000:.0f} ms (target p99 <= 2000 ms:"
          f" {mark(r['spread_p99'] <= 2.0)})")
    if r["delivery_p50"] == r["delivery_p50"]:  # not nan
        print(f"  each (post, host): p50 {r['delivery_p50'] * 1000:.0f} ms,"
              f" p99 {r['delivery_p99'] * 1000:.0f} ms")
    print(f"  per link per minute, each way: at rest {r['rest_lines']:.2f} lines"
          f" {r['rest_bytes']:.0f} B; under load {r['load_lines']:.2f} lines"
          f" {r['load_bytes']:.0f} B")
    print(f"  records per host: {r['records']:.1f}")
    print(f"  killed {r['killed']} hosts for {args.down:.0f} s: healed p50"
          f" {r['heal_p50']:.2f} s, max {r['heal_max']:.2f} s after restart,"
          f" {r['unhealed']} not healed")
    print(f"  posts missing at the end: {r['missing']} (target 0: {mark(r['missing'] == 0)})")
    print(f"  wall {r['wall']:.1f} s (setup {r['setup']:.1f} s), {r['wall_per_sim_s']:.3f} s"
          f" per simulated s, {r['events']} events; {r['stats']}")
    sys.stdout.flush()


def rate_of(text: str) -> float:
    """``0.01/min`` (posts a host a minute), or a plain number of the same."""
    return float(text.removesuffix("/min"))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--topology", default="regular", choices=sorted(TOPOLOGIES))
    ap.add_argument("--degree", type=int, default=6)
    ap.add_argument("--post-rate", type=rate_of, default=0.01, help="posts a host a minute")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="posts a second in all (instead of --post-rate)")
    ap.add_argument("--author", default="any", choices=("any", "owner"),
                    help="who posts: random hosts, or the owner alone (as bench/mesh.py)")
    ap.add_argument("--kill", type=float, default=0.05, help="share of hosts killed")
    ap.add_argument("--down", type=float, default=30.0, help="seconds they stay down")
    ap.add_argument("--partition", type=float, default=0.0,
                    help="seconds two halves are cut apart (during the rest)")
    ap.add_argument("--sim-seconds", type=float, default=120.0, help="seconds of load")
    ap.add_argument("--rest", type=float, default=300.0, help="seconds at rest first")
    ap.add_argument("--tail", type=float, default=120.0, help="at most this after the load")
    ap.add_argument("--latency", type=float, default=20.0, help="ms a link, on average")
    ap.add_argument("--jitter", type=float, default=10.0, help="± ms between links")
    ap.add_argument("--loss", type=float, default=0.0, help="share of lines lost")
    ap.add_argument("--cpu-ms", type=float, default=1.0, help="a host's cost a kept record")
    ap.add_argument("--origin-ms", type=float, default=0.0,
                    help="an author's post call and durable commit, before it leaves")
    ap.add_argument("--dup-ms", type=float, default=0.05, help="a host's cost a line read")
    ap.add_argument("--head-every", type=float, default=30.0)
    ap.add_argument("--resync", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    r = run(args)
    report(r, args)
    return 0 if r["missing"] == 0 and r["spread_p99"] <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
