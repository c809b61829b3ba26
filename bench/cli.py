"""CLI bench: whole-process wall-clock times of awp commands.

Every figure is the median of N runs (default 20; 5 for daemon starts) of a
fresh ``awp`` process, fork and exec included, printed beside the floor, the
median of ``python -c pass`` with the interpreter awp runs on, so they read as
multiples of what any Python command costs on this machine:

- ``awp status`` with the daemon running;
- ``awp send PEER --wait-ack 5s x`` to a connected peer, ack included (two
  daemons in temp homes on loopback TCP, joined with ``awp connect``);
- ``awp read -n 50`` on a store holding 1,000,000 log rows;
- ``awp threads`` with 10,000 threads (in the same store);
- ``awp status`` on that store (no target, for comparison);
- the on-demand daemon start: ``awp peers`` in a fresh home (it starts the
  daemon and waits for it), then ``awp down``; and the same in a home that
  has run before.

The big store is filled by stopping the daemon and inserting rows straight
into ``<home>/awp.db`` (as awp.store.ops writes them), then starting it again.

Targets (issue 14): the common verbs (status, send, read, threads, peers,
tail --once, wait) <= 35 ms on an ordinary store with a regular (not
editable) install: ``--regular`` builds one in a temporary venv first, since
an editable install's import hook alone costs several ms.  On the big store
read and threads <= 200 ms; daemon start <= 1 s.
Run: python bench/cli.py [--regular] [--runs N] [--rows N] [--threads N] [--keep]
Figures on a loaded machine (2 cores) are noisy: run it alone.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from awp.base.home import is_locked  # noqa: E402
from awp.wire.ids import encode_ulid, new_thread_id  # noqa: E402
from awp.wire.timefmt import format_ts  # noqa: E402

TARGETS_MS = {"verb": 35, "read": 200, "threads": 200, "start": 1000}


class BenchError(Exception):
    pass


# --- processes ----------------------------------------------------------------------


def regular_install(root: str) -> str:
    """A venv under ``root`` with awp installed from this tree as a wheel; its awp."""
    venv = os.path.join(root, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", ROOT], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(venv, "bin", "awp")


def awp_argv(script: str | None = None) -> tuple[list[str], str, dict]:
    """(argv prefix that runs awp, the interpreter it runs on, extra env)."""
    script = script or os.path.join(ROOT, ".venv", "bin", "awp")
    if os.access(script, os.X_OK):
        interp = sys.executable
        with open(script, "rb") as f:
            first = f.readline()
        if first.startswith(b"#!"):
            cand = first[2:].decode(errors="replace").split()[0]
            if os.path.isabs(cand) and os.access(cand, os.X_OK):
                interp = cand
        return [script], interp, {}
    pp = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return [sys.executable, "-m", "awp"], sys.executable, {"PYTHONPATH": pp.rstrip(os.pathsep)}


def base_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWP_")}
    env.update(extra)
    return env


def run(argv: list[str], env: dict, timeout: float = 120
        ) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, r


def check(r: subprocess.CompletedProcess, ok_codes=(0,)) -> subprocess.CompletedProcess:
    if r.returncode not in ok_codes:
        cmd = " ".join(r.args)
        raise BenchError(f"`{cmd}` exited {r.returncode}: "
                         f"{(r.stderr or r.stdout).strip()[-500:] or 'no output'}")
    return r


def timed(argv: list[str], env: dict, runs: int, *, warmup: int = 1,
          expect: str | None = None) -> list[float]:
    """Wall-clock ms of ``runs`` runs (after ``warmup`` untimed ones)."""
    out = []
    for i in range(warmup + runs):
        dt, r = run(argv, env)
        check(r)
        if expect is not None and expect not in r.stdout:
            raise BenchError(f"`{' '.join(argv)}` printed {r.stdout.strip()[-300:]!r},"
                             f" expected {expect!r}")
        if i >= warmup:
            out.append(dt * 1000)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_unlocked(home: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while is_locked(home):
        if time.monotonic() > deadline:
            raise BenchError(f"the daemon of {home} did not stop in {timeout:.0f} s")
        time.sleep(0.02)


class Home:
    """One awp home: its path, its env (listen address and name) and commands."""

    def __init__(self, awp: list[str], env: dict, root: str, name: str) -> None:
        self.path = os.path.join(root, name)
        self.name = name
        self.port = free_port()
        self.address = f"tcp:127.0.0.1:{self.port}"
        self.awp = awp
        self.env = {**env, "AWP_LISTEN": self.address, "AWP_NAME": name}

    def argv(self, *args: str) -> list[str]:
        return [*self.awp, args[0], "--home", self.path, *args[1:]]

    def cmd(self, *args: str, ok_codes=(0,)) -> subprocess.CompletedProcess:
        return check(run(self.argv(*args), self.env)[1], ok_codes)

    def down(self) -> None:
        run(self.argv("down"), self.env)
        wait_unlocked(self.path)

    def key(self) -> str:
        import json

        return json.loads(self.cmd("status", "--json").stdout)["key"]


def timed_wait(waiter: Home, sender: Home, runs: int) -> list[float]:
    """``awp wait`` on ``waiter`` with one message already there, each run."""
    out = []
    for _ in range(runs + 1):
        sender.cmd("send", waiter.env["AWP_NAME"], "--wait-ack", "5s", "ping")
        dt, r = run(waiter.argv("wait", "--timeout", "10s"), waiter.env)
        check(r)
        out.append(dt * 1000)
    return out[1:]


# --- filling a store ----------------------------------------------------------------

_B32 = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def fast_ulid(value: int) -> str:
    """encode_ulid at C speed: the last 26 base32 digits of 160 bits."""
    return base64.b32encode(value.to_bytes(20, "big")).decode()[-26:].translate(_B32)


def fill_store(db: str, peer: str, rows: int, threads: int) -> float:
    """Insert ``rows`` log rows over ``threads`` threads with ``peer``; seconds taken.

    Rows alternate out / in, 2 ms apart, ending a minute ago (so ids the
    daemon issues later still sort above them); each thread holds a run of
    consecutive rows, its first msg carrying the subject.  All read and acked
    but the last 20 inbound, which stay unread.
    """
    assert fast_ulid(12345 << 80 | 678) == encode_ulid(12345 << 80 | 678)
    t0 = time.perf_counter()
    end = int(time.time() * 1000) - 60_000
    start = end - 2 * rows
    ths: list[str] = []
    seen: set[str] = set()
    while len(ths) < threads:
        th = new_thread_id()
        if th not in seen:
            seen.add(th)
            ths.append(th)
    per = max(1, -(-rows // threads))
    states = ("open", "working", "waiting", "done", "closed")

    def log_rows():
        sec_cache: dict[int, str] = {}
        for i in range(rows):
            ts = start + 2 * i
            sec, ms = divmod(ts, 1000)
            base = sec_cache.get(sec)
            if base is None:
                sec_cache.clear()
                base = sec_cache[sec] = format_ts(sec * 1000)[:-4]
            tss = f"{base}{ms:03d}Z"
            k = min(i // per, threads - 1)
            th = ths[k]
            ident = fast_ulid((ts << 80) | i)
            out = i % 2 == 0
            subject = f',"subject":"bench thread {k}"' if i % per == 0 else ""
            line = (f'{{"t":"msg","id":"{ident}","ts":"{tss}","th":"{th}"{subject},'
                    f'"parts":[{{"k":"text","text":"message {i} of the bench store: some words'
                    f' so that a line is about as long as a short real one"}}]}}')
            unread = not out and i >= rows - 40
            yield (peer, "out" if out else "in", "msg", ident, th, "", ts, ts, line,
                   0 if unread else 1, 1)

    def thread_rows():
        for k, th in enumerate(ths):
            first = start + 2 * k * per
            last = min(start + 2 * ((k + 1) * per - 1), end)
            yield (peer, th, f"bench thread {k}", first, last, states[k % 5], last,
                   states[(k + 2) % 5], last)

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO log (peer, dir, t, id, th, re, ts, at, line, read, acked)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", log_rows())
        conn.executemany(
            "INSERT INTO threads (peer, th, subject, created, updated, mine, my_since,"
            " theirs, their_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (peer, th) DO NOTHING", thread_rows())
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - t0


# --- report -------------------------------------------------------------------------


def line(label: str, ms: list[float], floor: float, target: str | None) -> str:
    med = statistics.median(ms)
    verdict = ""
    if target:
        limit = TARGETS_MS[target]
        verdict = f"<= {limit:>4} ms  {'ok' if med <= limit else 'OVER'}"
    return (f"{label:<44} {med:8.1f} ms  {med / floor:5.1f}x floor"
            f"  (min {min(ms):6.1f}, max {max(ms):7.1f}, n={len(ms)})  {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per command (median)")
    ap.add_argument("--start-runs", type=int, default=5, help="runs of the daemon start")
    ap.add_argument("--rows", type=int, default=1_000_000, help="log rows in the big store")
    ap.add_argument("--threads", type=int, default=10_000, help="threads in the big store")
    ap.add_argument("--keep", action="store_true", help="keep the temp homes")
    ap.add_argument("--regular", action="store_true",
                    help="bench a regular install built in a temporary venv")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="awpcli", dir="/tmp")
    awp, interp, extra = awp_argv(regular_install(root) if args.regular else None)
    env = base_env(extra)
    homes: list[Home] = []
    failures: list[str] = []

    def home(name: str) -> Home:
        h = Home(awp, env, root, name)
        homes.append(h)
        return h

    def bench(label: str, target: str | None, fn):
        try:
            ms = fn()
        except (BenchError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            failures.append(f"{label}: {e}")
            print(f"{label:<44} FAILED: {e}", flush=True)
            return None
        print(line(label, ms, floor, target), flush=True)
        return ms

    try:
        print(f"awp: {' '.join(awp)}\ninterpreter: {interp}\nhomes under {root}\n"
              f"median of {args.runs} runs ({args.start_runs} for daemon starts),"
              " wall clock per process", flush=True)
        floor_ms = timed([interp, "-c", "pass"], env, args.runs, warmup=2)
        floor = statistics.median(floor_ms)
        print(line("floor: python -c pass", floor_ms, floor, None), flush=True)

        # On-demand start: `awp peers` starts the daemon and waits for it.
        def start_fresh() -> list[float]:
            out = []
            for i in range(args.start_runs):
                h = home(f"fresh{i}")
                dt, r = run(h.argv("peers"), h.env)
                check(r)
                out.append(dt * 1000)
                h.down()
            return out

        def start_again() -> list[float]:
            h = homes[0] if homes else home("again")
            out = []
            for _ in range(args.start_runs):
                dt, r = run(h.argv("peers"), h.env)
                check(r)
                out.append(dt * 1000)
                h.down()
            return out

        bench("awp peers, daemon start (fresh home)", "start", start_fresh)
        bench("awp peers, daemon start (existing home)", "start", start_again)

        a, b = home("a"), home("b")
        a.env["AWP_NAME"], b.env["AWP_NAME"] = "bench-a", "bench-b"
        b.cmd("peers")
        a.cmd("peers")
        a.cmd("connect", b.address, "--timeout", "20s")
        b_key = b.key()

        bench("awp status", "verb", lambda: timed(a.argv("status"), a.env, args.runs))
        bench("awp send bench-b --wait-ack 5s x (acked)", "verb",
              lambda: timed(a.argv("send", "bench-b", "--wait-ack", "5s", "x"), a.env, args.runs,
                            expect="(delivered)"))
        bench("awp peers", "verb", lambda: timed(a.argv("peers"), a.env, args.runs))
        bench("awp threads", "verb", lambda: timed(a.argv("threads"), a.env, args.runs))
        bench("awp read -n 50", "verb",
              lambda: timed(a.argv("read", "-n", "50"), a.env, args.runs))
        bench("awp tail --once (nothing unread)", "verb",
              lambda: timed(a.argv("tail", "--once"), a.env, args.runs))
        # b has a's messages waiting: wait returns the unread at once.
        bench("awp wait (something unread)", "verb",
              lambda: timed_wait(b, a, args.runs))
        bench("awp hook inbox (nothing new)", None,
              lambda: timed(a.argv("hook", "inbox", "--format", "text"), a.env, args.runs))
        bench("awp help (typer)", None, lambda: timed([*awp, "--help"], a.env, 5))

        a.down()
        took = fill_store(os.path.join(a.path, "awp.db"), b_key, args.rows, args.threads)
        size = os.path.getsize(os.path.join(a.path, "awp.db")) / 1e6
        print(f"filled a's store with {args.rows:,} log rows and {args.threads:,} threads"
              f" in {took:.1f} s ({size:,.0f} MB)", flush=True)
        dt, _ = run(a.argv("peers"), a.env)
        print(f"(daemon start on that store: {dt * 1000:.0f} ms)", flush=True)

        bench(f"awp read -n 50 ({args.rows:,} rows)", "read",
              lambda: timed(a.argv("read", "-n", "50"), a.env, args.runs))
        bench(f"awp threads ({args.threads:,} threads)", "threads",
              lambda: timed(a.argv("threads"), a.env, args.runs))
        bench(f"awp status ({args.rows:,} rows)", None,
              lambda: timed(a.argv("status"), a.env, args.runs))
    finally:
        for h in homes:
            try:
                h.down()
            except (BenchError, subprocess.TimeoutExpired, OSError) as e:
                print(f"could not stop {h.path}: {e}", file=sys.stderr)
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"\n{len(failures)} bench(es) failed")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
