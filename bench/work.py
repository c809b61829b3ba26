"""Work bench: one queue owner, three worker hosts running ``awp work``, and two kill -9s.

Issue 23. The owner creates a queue with a ``--lease`` (10 s) lease and posts
``--long`` items of ``--long-secs`` (60 s), then ``--items`` short items
(each a duration of 0.1 to 2 s, the command's sleep); one in ten short
items needs ``gpu``, which only worker host w0 offers. Each worker
host runs ``awp work --concurrency 4 -- sh job.sh`` (the script sleeps the
item's duration and echoes). Part way (``--kill-at`` of the ideal time) the
worker host w2 (daemon and worker) is killed with SIGKILL and started again
``--down`` seconds later; later (``--owner-kill-at``) the owner's daemon is
killed with SIGKILL and started again at once.

It prints five figures, each with its target and ``ok`` or ``MISS``:

1. **done exactly once**: items done with exactly one result reply (target
   every short and every long item);
2. **given without a need**: lease records handing an item to a host whose
   offers lack one of its needs (target 0);
3. **long leases expired under a live worker**: ``expired`` lease records of
   long items whose holder was not the killed host (target 0: renewals keep
   a job longer than its lease held, across the owner's restart too);
4. **back after a dead worker**: for each item the killed host held, the time
   from the kill until the item was claimed again (max; target lease + 5 s);
5. **throughput**: the ideal time (sum of durations / worker slots) over the
   time from the first post to the last completion (target >= 0.8).

Beside the three honest hosts, a granted hostile worker (issues 40 and 34,
:mod:`hostile_worker`; ``--no-hostile`` leaves it out) runs fail loops,
hoards leases, launders results (a "done" reply, then ``release``) and
replays its signed asks behind bursts of asks by fresh keys. With it, three
more figures: items dead (target 0, at ``--attempts`` 3), replayed asks the
owner decided (target 0) and laundered items completed without an honest
worker's run (target 0); "done exactly once" counts honest results only.

Times come from the lease records' ``ts`` (the owner's clock) read from the
owner's store.

Run: python bench/work.py [--items 500] [--long 10] [--long-secs 60] [--lease 10]
[--concurrency 4] [--kill-at 0.3] [--down 2] [--owner-kill-at 0.55] [--seed 1]
[--attempts 3] [--no-hostile]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from nodes import ROOT, Node, wait_for  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_worker import HostileWorker  # noqa: E402

from awp.wire.timefmt import parse_ts  # noqa: E402

RESULT_MIME = "application/vnd.awp.work+json"
JOB = """#!/bin/sh
read d rest
sleep "$d"
echo "slept $d"
"""


def row(name: str, value: str, target: str, ok: bool) -> None:
    print(f"  {name:<44} {value:>16}   target {target:<14} {'ok' if ok else 'MISS'}")


class Host:
    """A worker host: its daemon and its ``awp work`` process."""

    def __init__(self, base: str, name: str, offers: str, topic: str, args) -> None:
        self.node = Node(os.path.join(base, name), name)
        self.offers = set(filter(None, offers.split(",")))
        self.topic = topic
        self.args = args
        self.job = os.path.join(base, "job.sh")
        self.log = open(os.path.join(base, f"{name}.work.log"), "ab")  # noqa: SIM115
        self.proc: subprocess.Popen | None = None

    def start_worker(self) -> None:
        env = dict(os.environ, AWP_LISTEN=self.node.listen,
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("AWP_HOME", None)
        argv = [sys.executable, "-m", "awp", "work", "--home", self.node.home, self.topic,
                "--concurrency", str(self.args.concurrency)]
        if self.offers:
            argv += ["--offers", ",".join(sorted(self.offers))]
        self.proc = subprocess.Popen([*argv, "--", "/bin/sh", self.job], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.node.kill()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.node.stop()


def leases(owner: Node, topic: str) -> list[dict]:
    with sqlite3.connect(f"file:{owner.home}/awp.db?mode=ro", uri=True, timeout=30) as con:
        rows = con.execute("SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease'",
                           (topic,)).fetchall()
    out = [json.loads(r[0]) for r in rows]
    for d in out:
        d["_ts"] = parse_ts(d["ts"])
    return sorted(out, key=lambda d: d["_ts"])


def connect_all(owner: Node, hosts: list[Host]) -> None:
    for h in hosts:
        h.node.connect(owner)


def kills(args, owner: Node, hosts: list[Host], topic: str, ideal: float,
          t0: float) -> tuple[float, float, dict[str, str]]:
    """kill -9 worker host w2 part way and start it again; then the owner, once.

    Returns when each was killed (ms) and what w2 held (item -> lease).
    """
    victim = hosts[2]
    wait_for(lambda: time.monotonic() - t0 >= args.kill_at * ideal, ideal * 2, "kill time",
             interval=0.2)
    kill_ms = time.time() * 1000
    victim.kill()
    held: dict[str, str] = {}
    for d in leases(owner, topic):
        if d["_ts"] > kill_ms:
            break
        if d["holder"] == victim.node.key and d["state"] in ("claimed", "renewed"):
            held[d["of"]] = d["lease"]
        elif held.get(d["of"]) == d["lease"]:
            del held[d["of"]]
    time.sleep(args.down)  # the host stays down this long (a fixed part of the scenario)
    victim.node.start()
    victim.node.connect(owner)
    victim.start_worker()
    # kill -9 the owner once, and start it again
    wait_for(lambda: time.monotonic() - t0 >= args.owner_kill_at * ideal, ideal * 2,
             "owner kill time", interval=0.2)
    owner_kill_ms = time.time() * 1000
    owner.kill()
    owner.start()
    connect_all(owner, hosts)
    return kill_ms, owner_kill_ms, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--long", type=int, default=10)
    ap.add_argument("--long-secs", type=float, default=60.0)
    ap.add_argument("--lease", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--kill-at", type=float, default=0.3)
    ap.add_argument("--down", type=float, default=2.0)
    ap.add_argument("--owner-kill-at", type=float, default=0.55)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--no-hostile", action="store_true",
                    help="no hostile worker beside the honest ones")
    ap.add_argument("--no-kills", action="store_true",
                    help="kill nothing (the figures of a quiet run, for comparison)")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    base = tempfile.mkdtemp(prefix="awp-bench-work-")
    with open(os.path.join(base, "job.sh"), "w") as f:
        f.write(JOB)
    owner = Node(os.path.join(base, "owner"), "owner")
    hosts: list[Host] = []
    try:
        owner.start()
        topic = f"{owner.key}/jobs"
        hosts = [Host(base, "w0", "gpu,linux", topic, args), Host(base, "w1", "linux", topic, args),
                 Host(base, "w2", "linux", topic, args)]
        owner.api("POST", "/v1/board/topic", {"name": "jobs", "queue": True,
                                              "lease_s": args.lease,
                                              "attempts": args.attempts,
                                              "rate": 6000, "keep": 100_000})
        for h in hosts:
            h.node.start()
            h.node.connect(owner)
            owner.api("POST", "/v1/board/grant", {"topic": "jobs", "peer": h.node.key})
            h.node.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
        items = [(round(rnd.uniform(0.1, 2.0), 3), ["gpu"] if rnd.random() < 0.1 else [])
                 for _ in range(args.items)]
        # the long items first: a queue hands out oldest first, so an owner who wants them
        # done early posts them early (the ideal assumes every slot busy until the end)
        items = [(args.long_secs, []) for _ in range(args.long)] + items
        slots = len(hosts) * args.concurrency
        ideal = sum(d for d, _ in items) / slots
        print(f"work bench: {args.items} short items + {args.long} of {args.long_secs:g}s,"
              f" lease {args.lease}s, {len(hosts)} hosts x {args.concurrency};"
              f" ideal {ideal:.1f}s")
        for h in hosts:
            h.start_worker()
        stop = threading.Event()
        bad = HostileWorker(owner.address, topic, stop)
        if not args.no_hostile:
            owner.api("POST", "/v1/board/grant", {"topic": "jobs", "peer": bad.key})
        needs: dict[str, list[str]] = {}
        order: list[str] = []
        long_items: set[str] = set()
        t_post = time.time() * 1000
        for i in range(0, len(items), 100):
            chunk = items[i:i + 100]
            res = owner.api("POST", "/v1/board/post", {"topic": "jobs", "posts": [
                {"parts": [{"k": "text", "text": f"{d}"}], **({"needs": n} if n else {})}
                for d, n in chunk]})
            for (d, n), p in zip(chunk, res["posts"], strict=True):
                needs[p["hash"]] = n
                order.append(p["hash"])
                if d == args.long_secs:
                    long_items.add(p["hash"])
        total = len(items)

        def done_count() -> int:  # done or dead: nothing more will happen to it
            q = owner.api("GET", "/v1/board/queue", topic="jobs")
            return sum(1 for it in q["items"] if it["status"] in ("done", "dead"))

        t0 = time.monotonic()
        if not args.no_hostile:
            bad.start()
        victim = hosts[2]
        kill_ms = owner_kill_ms = 0.0
        held: dict[str, str] = {}  # item -> lease held by the victim at the kill
        if not args.no_kills:
            kill_ms, owner_kill_ms, held = kills(args, owner, hosts, topic, ideal, t0)
        wait_for(lambda: done_count() >= total, ideal * 6 + 120, "every item done", interval=1.0)
        stop.set()
        if not args.no_hostile:
            bad.join(30)


        # -- figures -------------------------------------------------------------------
        recs = leases(owner, topic)
        offers = {h.node.key: h.offers for h in hosts}
        res = owner.api("POST", "/v1/board/get", {"topic": "jobs", "n": 0})
        results: dict[str, int] = {}
        laundered: set[str] = set()  # items the hostile worker "answered"
        for p in res["posts"]:
            for part in p.get("parts", []):
                if (part.get("k") == "data" and part.get("mime") == RESULT_MIME
                        and part["data"].get("result") == "done"):
                    if p.get("author") == bad.key:
                        laundered.add(p["parent"])
                    else:
                        results[p["parent"]] = results.get(p["parent"], 0) + 1
        q_items = owner.api("GET", "/v1/board/queue", topic="jobs")["items"]
        dead = sum(1 for it in q_items if it["status"] == "dead")
        bad_claims = sum(1 for d in recs if d["state"] == "claimed" and d["holder"] == bad.key)
        done_at = {d["of"]: d["_ts"] for d in recs if d["state"] == "done"}
        once_short = sum(1 for h in needs if h not in long_items and h in done_at
                         and results.get(h) == 1)
        once_long = sum(1 for h in long_items if h in done_at and results.get(h) == 1)
        lacked = sum(1 for d in recs if d["state"] == "claimed"
                     and not set(needs.get(d["of"], [])) <= offers.get(d["holder"], set()))
        expired_live = sum(1 for d in recs if d["state"] == "expired" and d["of"] in long_items
                           and d["holder"] != victim.node.key)
        back = []
        for item, lease in held.items():
            if any(d["of"] == item and d["lease"] == lease and d["state"] == "done"
                   for d in recs):
                continue  # its completion was on its way when the host died
            again = [d["_ts"] for d in recs if d["of"] == item and d["state"] == "claimed"
                     and d["lease"] != lease and d["_ts"] > kill_ms]
            back.append((min(again) - kill_ms) / 1000 if again else float("inf"))
        worst = max(back, default=0.0)
        elapsed = (max(done_at.values()) - t_post) / 1000
        ratio = ideal / elapsed
        dur = {h: d for h, d in zip(order, [d for d, _n in items], strict=True)}
        claimed_at = {}
        spans = []
        for d in recs:
            if d["state"] == "claimed":
                claimed_at[d["lease"]] = d["_ts"]
            elif d["state"] == "done" and d["lease"] in claimed_at:
                spans.append((d["_ts"] - claimed_at[d["lease"]]) / 1000 - dur[d["of"]])
        spans.sort()
        if spans:
            print(f"  (claim to done minus the sleep: median {spans[len(spans) // 2]:.2f}s,"
                  f" p90 {spans[len(spans) * 9 // 10]:.2f}s)")
        print(f"  (w2 held {len(held)} items at its kill; {len(recs)} lease records;"
              f" elapsed {elapsed:.1f}s)")
        names = {h.node.key: h.node.name for h in hosts}
        for h in [h for h in needs if results.get(h) != 1 or h not in done_at][:5]:
            story = ", ".join(f"{d['state']}:{names.get(d['holder'], '?')}@"
                              f"{(d['_ts'] - t_post) / 1000:.1f}" for d in recs if d["of"] == h)
            print(f"  item {h[:10]}: {results.get(h, 0)} results; {story}")
        print(f"  (w2 killed at {(kill_ms - t_post) / 1000:.1f}s, owner at"
              f" {(owner_kill_ms - t_post) / 1000:.1f}s)")
        row("done exactly once (short)", f"{once_short}/{args.items}", f"{args.items}/"
            f"{args.items}", once_short == args.items)
        row("done exactly once (long)", f"{once_long}/{args.long}", f"{args.long}/{args.long}",
            once_long == args.long)
        row("given to a worker lacking a need", str(lacked), "0", lacked == 0)
        row("long leases expired under a live worker", str(expired_live), "0",
            expired_live == 0)
        row("back after a dead worker (max)", f"{worst:.1f}s", f"<= {args.lease + 5}s",
            worst <= args.lease + 5)
        row("throughput / ideal", f"{ratio:.2f}", ">= 0.8", ratio >= 0.8)
        if not args.no_hostile:
            print(f"  (hostile worker: {bad.counts}{'; ' + bad.error if bad.error else ''})")
            row("items dead", str(dead), "0", dead == 0)
            replays = bad_claims - bad.counts["claimed"]
            row("replayed asks the owner decided", str(replays), "0", replays == 0)
            unrun = sum(1 for h in laundered if h in done_at and results.get(h) != 1)
            row("laundered items done without a run", f"{unrun}/{len(laundered)}", "0",
                unrun == 0)
    finally:
        for h in hosts:
            h.stop()
        owner.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
