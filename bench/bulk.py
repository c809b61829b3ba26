"""Bulk bench: a big file between two daemons on loopback, the in-band path as baseline.

In one run, for a plain link (os.sendfile) and a sealed one: the in-band path
(base64 chunks in lines) with a file it can carry, then the bulk path with a
1 GiB file, while messages go the same way; then the same file again with
the receiver killed (-9) at 50% and restarted.  Prints:

* rate: file size / (send to complete and verified at the receiver), the
  sender's hashing included; target >= 200 MiB/s and >= 5x in-band;
* receiver RSS growth (peak minus before); target <= 64 MiB;
* wire: bytes the sender wrote to side connections (seal records included) /
  file size; target <= 1.02;
* kill -9 at 50%: pieces sent more than once (target <= 1) and wire / size
  (target <= 1.05);
* one-way latency (queued at the sender to committed at the receiver) of
  msgs sent during the transfer; target p99 <= 10 ms.

Run: python bench/bulk.py [--mib 1024] [--inband-mib 48] [--seal off,prefer]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from delivery import pct, rss_mb  # noqa: E402
from nodes import Node, wait_for  # noqa: E402

MiB = 1 << 20


def _file(root: str, name: str, mib: int) -> str:
    path = os.path.join(root, name)
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        for i in range(mib):
            f.write(block[i % 256:] + block[:i % 256])  # every piece distinct
    return path


def _row(node: Node, name: str) -> dict | None:
    return next((x for x in node.api("GET", "/v1/blobs") if x["name"] == name), None)


def _send(a: Node, b: Node, path: str) -> float:
    t0 = time.perf_counter()
    a.api("POST", "/v1/send", {"peer": b.key, "files": [path], "wait_ack": 0,
                               "parts": [{"k": "text", "text": "bench file"}]})
    return t0


def _complete(b: Node, name: str, timeout: float = 600) -> dict:
    return wait_for(lambda: (x := _row(b, name)) and x["status"] == "complete" and x,
                    timeout, f"{name} complete", interval=0.01)


class Prober(threading.Thread):
    """Sends msgs from a to b at ``rate`` a second until stopped: (id, queued_ns)."""

    def __init__(self, a: Node, b: Node, rate: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.a, self.b, self.rate = a, b, rate
        self.sent: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.th = a.send(b.key, "probe warm-up", wait_ack=5)["th"]

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            r = self.a.send(None, f"probe {i}", th=self.th, wait_ack=0)
            self.sent.append((r["id"], r["queued_ns"]))
            i += 1
            self.stop.wait(1.0 / self.rate)

    def one_way(self) -> list[float]:
        committed = wait_for(lambda: (c := self.b.api("GET", "/v1/timings")["committed"])
                             and all(i in c for i, _q in self.sent[-5:]) and c, 30, "probes")
        return [(committed[i] - q) / 1e6 for i, q in self.sent if i in committed]


def run(root: str, seal: str, mib: int, inband_mib: int) -> None:
    env = {"AWP_SEAL": seal}
    limits = {"bulk_min": f"{inband_mib + 1}MiB"}
    a = Node(os.path.join(root, f"a-{seal}"), "a", env=env).with_limits(**limits)
    b = Node(os.path.join(root, f"b-{seal}"), "b", env=env).with_limits(**limits)
    try:
        a.start()
        b.start()
        a.connect(b)
        small = _file(root, f"inband-{seal}.bin", inband_mib)
        t0 = _send(a, b, small)
        _complete(b, os.path.basename(small))
        inband = inband_mib / (time.perf_counter() - t0)
        os.unlink(small)

        big = _file(root, f"bulk-{seal}.bin", mib)
        time.sleep(0.3)
        base = rss_mb(b.proc.pid)[0]
        prober = Prober(a, b)
        prober.start()
        t0 = _send(a, b, big)
        got = _complete(b, os.path.basename(big))
        elapsed = time.perf_counter() - t0
        prober.stop.set()
        prober.join()
        peak = rss_mb(b.proc.pid)[1]
        sent = wait_for(lambda: (x := _row(a, os.path.basename(big)))
                        and x["bulk_state"] == "delivered" and x, 30, "delivered")
        lat = prober.one_way()
        rate = mib / elapsed
        size = mib * MiB
        print(f"[{'plain, sendfile' if seal == 'off' else 'sealed'}]")
        print(f"  in-band {inband_mib} MiB: {inband:.1f} MiB/s")
        print(f"  bulk {mib} MiB: {elapsed:.2f} s, {rate:.1f} MiB/s"
              f" ({rate / inband:.1f}x in-band); target >= 200 MiB/s and >= 5x")
        print(f"  receiver RSS {base:.1f} MB before, peak {peak:.1f} MB"
              f" (growth {peak - base:.1f} MB; target <= 64)")
        print(f"  wire {sent['wire_bytes'] / size:.4f}x the file ({sent['served']} pieces"
              f" served for {got['pieces']}); target <= 1.02")
        print(f"  {len(lat)} msgs during the transfer, one-way p50 {pct(lat, 50):.2f} ms,"
              f" p99 {pct(lat, 99):.2f} ms, max {max(lat):.2f} ms; target p99 <= 10")
        os.unlink(got["path"])

        # kill -9 of the receiver at 50%, then a restart
        again = os.path.join(root, f"again-{seal}.bin")
        os.replace(big, again)
        name = os.path.basename(again)
        _send(a, b, again)
        wait_for(lambda: (x := _row(b, name)) and x.get("percent", 0) >= 50 and x, 300,
                 "50%", interval=0.002)
        b.kill()
        b.start()
        got = _complete(b, name)
        sent = wait_for(lambda: (x := _row(a, name)) and x["bulk_state"] == "delivered" and x,
                        30, "delivered")
        print(f"  kill -9 at 50%: {sent['served'] - got['pieces']} piece(s) sent again"
              f" (target <= 1), wire {sent['wire_bytes'] / size:.4f}x the file"
              f" (target <= 1.05)")
        os.unlink(again)
    finally:
        a.kill()
        b.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--inband-mib", type=int, default=48)
    ap.add_argument("--seal", default="off,prefer", help="seal policies to run, comma-separated")
    ap.add_argument("--keep", action="store_true", help="keep the homes and logs")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="awpk", dir="/tmp")
    try:
        for seal in args.seal.split(","):
            run(root, seal, args.mib, args.inband_mib)
        return 0
    finally:
        if args.keep:
            print(f"homes and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
