"""Mesh board bench, the hostile and queue parts of issue 19 (``bench/mesh.py`` runs them too).

Two figures, each printed with its target and ``ok`` or ``MISS``:

1. **hostile**: a line alice - bob - carol on loopback; alice owns an open
   topic (``keep_bytes`` 8 MiB, so a flood presses on it), alice and carol
   post ``--honest`` posts each.  A raw peer linked to bob then floods as one
   author with ``--flood`` posts of 60 KB dated -15 to +5 minutes, and as
   ``--fresh`` fresh keys posting 60 each within their rate.  Once the topic
   has gone quiet on every host: honest records evicted, counted on every
   host (target 0), and the flood's records kept at each host.
2. **claims**: alice owns a work queue of ``--items`` items (leases of
   ``--lease`` seconds); bob relays; ``--claim-hosts`` hosts linked only to
   bob run ``--claimants`` threads that claim and complete until the queue is
   empty, so every claim travels two hops.  alice is killed with SIGKILL
   twice while they work, and restarted; nobody connects again: the daemons'
   own redial (bob's subscription and the claims are business with alice)
   must bring the link back.  Printed: items the arbiter finished more than
   once or never (target 0), items a claimant worked more than once (a lease
   that ran out while the owner was down is handed out again: done twice,
   never held twice), and how long after each restart bob was linked to
   alice again (if not within ``--relink`` seconds, the run stops and says
   so).

Run: python bench/mesh_board.py [--honest 20] [--flood 1200] [--fresh 50]
[--items 500] [--claimants 20] [--claim-hosts 4] [--lease 10] [--relink 60]
[--only hostile,claims]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from nodes import Node, wait_for  # noqa: E402
from rawpeer import RawPeer  # noqa: E402

from awp.localapi.client import ApiFailure  # noqa: E402
from awp.wire import board as wb  # noqa: E402
from awp.wire.keys import Identity  # noqa: E402
from awp.wire.timefmt import now_ms  # noqa: E402

MIN = 60_000
PARTS = ("hostile", "claims")
STARTED: list[Node] = []  # every daemon this bench started, killed at the end


def _node(root: str, name: str, **limits: object) -> Node:
    n = Node(os.path.join(root, name), name).with_limits(**limits).start()
    STARTED.append(n)
    return n


def _line(root: str, names: tuple[str, ...], **limits: object) -> list[Node]:
    nodes = [_node(root, n, **limits) for n in names]
    for a, b in zip(nodes, nodes[1:], strict=False):
        b.connect(a)
    return nodes


def _texts(node: Node, topic: str) -> set[str]:
    posts = node.api("POST", "/v1/board/get", {"topic": topic, "n": 0})["posts"]
    return {p["text"] for p in posts}


def _quiet(nodes: list[Node], topic: str, still_s: float = 5.0, limit_s: float = 600) -> None:
    """Wait until no host's record count changed for ``still_s`` seconds."""
    def counts() -> list[int]:
        with_rows = []
        for n in nodes:
            with sqlite3.connect(n.home + "/awp.db") as con:
                with_rows.append(con.execute("SELECT count(*) FROM board_records WHERE topic = ?",
                                             (topic,)).fetchone()[0])
        return with_rows

    end, last, since = time.monotonic() + limit_s, None, time.monotonic()
    while time.monotonic() < end:
        now = counts()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            return
        time.sleep(0.5)


def hostile(root: str, args: argparse.Namespace) -> bool:
    alice, bob, carol = _line(root, ("alice", "bob", "carol"))
    alice.api("POST", "/v1/board/topic", {"name": "ops", "read": "open", "post": "open",
                                          "keep_bytes": 8 * 1024 * 1024})
    topic = f"{alice.key}/ops"
    for n in (bob, carol):
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    honest = set()
    for i in range(args.honest):
        for n in (alice, carol):
            text = f"honest {n.name} {i}"
            n.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text", "text": text}]})
            honest.add(text)
    for n in (alice, bob, carol):
        wait_for(lambda n=n: honest <= _texts(n, topic), 30, f"honest posts at {n.name}")

    rng = random.Random(19)
    flooder = Identity.generate()
    t0 = now_ms()
    flood = [wb.make_post(flooder, topic, [{"k": "text", "text": f"flood {i} " + "x" * 60_000}],
                          t0 + rng.randrange(-15 * MIN, 5 * MIN)) for i in range(args.flood)]
    crowd = [wb.make_post(key, topic, [{"k": "text", "text": f"fresh {k} {i}"}],
                          t0 - 59_000 + i * 900)
             for k, key in enumerate(Identity.generate() for _ in range(args.fresh))
             for i in range(60)]
    start = time.monotonic()
    with RawPeer(bob.address, Identity.generate()) as p:
        p.handshake(caps=["chat", "board"])
        p.resume()
        p.send_line({"t": "board-sub", "topics": [{"topic": topic}], "drop": []})
        for group in (flood, crowd):
            for i in range(0, len(group), 7):
                # the authors' way in: towards the owner, which stamps what it admits
                # (as board-posts, a host that is not the owner refuses them unstamped)
                p.send_line({"t": "board-submit", "topic": topic, "hops": 0,
                             "recs": [r.doc for r in group[i:i + 7]]})
        p.ping(timeout=120)
        _quiet([alice, bob, carol], topic)
    took = time.monotonic() - start
    ok = True
    for n in (alice, bob, carol):
        held = _texts(n, topic)
        evicted = len(honest - held)
        flood_kept = sum(t.startswith("flood ") for t in held)
        fresh_kept = sum(t.startswith("fresh ") for t in held)
        good = evicted == 0
        ok &= good
        print(f"hostile  {n.name:6} honest records evicted {evicted} of {len(honest)} (target 0)"
              f" {'ok' if good else 'MISS'}; flood kept {flood_kept} of {len(flood)},"
              f" fresh keys' kept {fresh_kept} of {len(crowd)}")
    print(f"hostile  quiet after {took:.1f} s")
    return ok


def claims(root: str, args: argparse.Namespace) -> bool:
    names = ("alice", "bob", *(f"c{i}" for i in range(args.claim_hosts)))
    nodes = [_node(root, n) for n in names]
    alice, bob, hosts = nodes[0], nodes[1], nodes[2:]
    bob.connect(alice)
    for h in hosts:
        h.connect(bob)
    alice.api("POST", "/v1/board/topic", {"name": "jobs", "read": "open", "post": "open",
                                          "queue": True, "lease_s": args.lease, "attempts": 100})
    topic = f"{alice.key}/jobs"
    for n in (bob, *hosts):
        n.api("POST", "/v1/board/subscribe", {"topic": topic, "timeout": 10})
    for i in range(0, args.items, 100):
        alice.api("POST", "/v1/board/post", {"topic": topic, "posts": [
            {"parts": [{"k": "text", "text": f"job {j}"}]} for j in range(i, min(i + 100, args.items))]})
    worked: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    finished = threading.Event()

    def work(h: Node) -> None:
        empty_since = None
        while not stop.is_set():
            try:
                got = h.api("POST", "/v1/board/claim", {"topic": topic, "timeout": 5})
            except (ApiFailure, OSError):
                time.sleep(0.2)
                continue
            if got.get("state") == "empty":
                empty_since = empty_since or time.monotonic()
                if finished.is_set() or time.monotonic() - empty_since > 3 * args.lease:
                    return
                time.sleep(0.5)
                continue
            empty_since = None
            with lock:
                worked[got["item"]["hash"]] += 1
            try:
                h.api("POST", "/v1/board/lease", {"topic": topic, "lease": got["lease"],
                                                  "op": "complete", "timeout": 5})
            except (ApiFailure, OSError):
                pass

    threads = [threading.Thread(target=work, args=(hosts[i % len(hosts)],), daemon=True)
               for i in range(args.claimants)]
    start = time.monotonic()
    for t in threads:
        t.start()
    relinked: list[float | None] = []
    for kill in range(2):
        wait_for(lambda k=kill: len(worked) >= args.items * (k + 1) // 3, 600, "work under way",
                 interval=0.2)
        alice.kill()
        time.sleep(1.0)
        t0 = time.monotonic()
        alice.start()
        try:
            wait_for(lambda: bob.peer_state(alice.key).startswith("connected"), args.relink,
                     "", interval=0.2)
            relinked.append(time.monotonic() - t0)
        except AssertionError:
            relinked.append(None)
            break
    if None in relinked:
        stop.set()
    for t in threads:
        t.join(900)
    stop.set()
    took = time.monotonic() - start
    with sqlite3.connect(alice.home + "/awp.db") as con:
        recs = [json.loads(r[0]) for r in con.execute(
            "SELECT raw FROM board_records WHERE topic = ? AND kind = 'lease'", (topic,))]
        items = [r[0] for r in con.execute(
            "SELECT hash FROM board_records WHERE topic = ? AND kind = 'post'", (topic,))]
    done = Counter(r["of"] for r in recs if r["state"] == "done")
    twice = sum(1 for n in done.values() if n > 1)
    lost = sum(1 for h in items if done[h] == 0)
    again = sum(1 for n in worked.values() if n > 1)
    ok = twice == 0 and lost == 0
    print(f"claims   {args.items} items, {args.claimants} claimants two hops from the owner,"
          f" owner killed -9 twice: finished more than once {twice}, lost {lost} (target 0)"
          f" {'ok' if ok else 'MISS'}; worked twice (a lease ran out while the owner was down)"
          f" {again}; {took:.1f} s")
    print("claims   bob linked to alice again, no connect: "
          + ", ".join(f"{r:.1f} s" if r is not None else f"not within {args.relink:g} s"
                      for r in relinked) + " from the start of each restart (her start-up included)")
    return ok and None not in relinked


def add_args(ap: argparse.ArgumentParser) -> None:
    """This bench's options (``bench/mesh.py`` takes them too)."""
    ap.add_argument("--honest", type=int, default=20)
    ap.add_argument("--flood", type=int, default=1200)
    ap.add_argument("--fresh", type=int, default=50)
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--claimants", type=int, default=20)
    ap.add_argument("--claim-hosts", type=int, default=4)
    ap.add_argument("--lease", type=int, default=10)
    ap.add_argument("--relink", type=float, default=60.0,
                    help="seconds for bob to be linked to a restarted alice")


def run(part: str, args: argparse.Namespace) -> bool:
    """One part in a fresh directory; every daemon it started is killed after."""
    root = tempfile.mkdtemp(prefix="awpmb", dir="/tmp")
    try:
        return {"hostile": hostile, "claims": claims}[part](root, args)
    finally:
        while STARTED:
            STARTED.pop().kill()
        if not os.environ.get("AWP_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap)
    ap.add_argument("--only", default=",".join(PARTS))
    args = ap.parse_args()
    ok = True
    for part in args.only.split(","):
        ok &= run(part, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
