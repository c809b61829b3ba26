"""Pair bench: 1 KiB frames through ``awp pair`` between two daemons on loopback.

Daemon B runs ``awp pair --accept -- cat`` (an echo); this script runs
``awp pair B`` with its stdin and stdout on pipes, so every byte goes
bench -> CLI -> awp.sock -> daemon A -> side connection -> daemon B ->
awp.sock -> CLI -> cat, and all the way back.  Prints, for a plain side
connection and a sealed one:

* latency: ``--frames`` frames (default 10,000) of 1 KiB, one at a time: each
  written, then its echo read whole.  One-way latency is half of that round
  trip (the two ways cross the same parts, so half is the fair share); p50
  and p99 over all frames; targets p50 <= 2 ms, p99 <= 10 ms;
* throughput: the same number of frames written as fast as the stream takes
  them while a thread reads the echo; bytes one way / time to the last echo.

Run: python bench/pair.py [--frames 10000] [--seal off,prefer]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from delivery import pct  # noqa: E402
from nodes import ROOT, Node, wait_for  # noqa: E402

FRAME = 1024


def _cli(node: Node, *args: str, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "AWP_HOME"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "awp", "--home", node.home, *args],
                            env=env, cwd=ROOT, **kw)


def _read_exactly(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = os.read(fd, n - len(out))
        if not b:
            raise EOFError("the stream ended early")
        out += b
    return bytes(out)


def _session(a: Node, b: Node) -> tuple[subprocess.Popen, subprocess.Popen]:
    acceptor = _cli(b, "pair", "--accept", "--", "cat", stderr=subprocess.DEVNULL)
    wait_for(lambda: b.api("GET", "/v1/pair")["waiting"], 30, "the acceptor waits")
    asker = _cli(a, "pair", b.key, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                 stderr=subprocess.DEVNULL, bufsize=0)
    return acceptor, asker


def _end(acceptor: subprocess.Popen, asker: subprocess.Popen) -> None:
    asker.stdin.close()
    asker.wait(60)
    acceptor.wait(60)


def latency(a: Node, b: Node, frames: int) -> list[float]:
    acceptor, asker = _session(a, b)
    win, rout = asker.stdin.fileno(), asker.stdout.fileno()
    frame = os.urandom(FRAME)
    for _ in range(50):  # warm up: first packets, lazy imports
        os.write(win, frame)
        _read_exactly(rout, FRAME)
    one_way = []
    for i in range(frames):
        data = frame[i % 256:] + frame[:i % 256]
        t0 = time.perf_counter()
        os.write(win, data)
        got = _read_exactly(rout, FRAME)
        one_way.append((time.perf_counter() - t0) * 1000 / 2)
        if got != data:
            raise AssertionError(f"frame {i} came back changed")
    _end(acceptor, asker)
    return one_way


def throughput(a: Node, b: Node, frames: int) -> float:
    acceptor, asker = _session(a, b)
    win, rout = asker.stdin.fileno(), asker.stdout.fileno()
    total = frames * FRAME
    done = threading.Event()

    def reader() -> None:
        _read_exactly(rout, total)
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    frame = os.urandom(FRAME)
    t0 = time.perf_counter()
    t.start()
    for _ in range(frames):
        os.write(win, frame)
    t.join(300)
    took = time.perf_counter() - t0
    _end(acceptor, asker)
    return total / took / (1 << 20)


def run(root: str, seal: str, frames: int) -> None:
    a, b = (Node(os.path.join(root, f"{seal}-{n}"), name=n, env={"AWP_SEAL": seal})
            for n in ("a", "b"))
    a.start()
    b.start()
    try:
        a.connect(b)
        one_way = latency(a, b, frames)
        rate = throughput(a, b, frames)
        p50, p99 = pct(one_way, 50), pct(one_way, 99)
        print(json.dumps({"seal": seal, "frames": frames, "frame_bytes": FRAME,
                          "one_way_p50_ms": round(p50, 3), "one_way_p99_ms": round(p99, 3),
                          "one_way_max_ms": round(max(one_way), 3),
                          "throughput_mib_s": round(rate, 1),
                          "p50_ok": p50 <= 2.0, "p99_ok": p99 <= 10.0}))
    finally:
        a.kill()
        b.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--seal", default="off,prefer", help="seal policies to run, comma-separated")
    ap.add_argument("--keep", action="store_true", help="keep the homes and logs")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="awpp", dir="/tmp")
    try:
        for seal in args.seal.split(","):
            run(root, seal, args.frames)
        return 0
    finally:
        if args.keep:
            print(f"homes and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
