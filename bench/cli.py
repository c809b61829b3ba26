"""CLI bench: whole-process wall-clock times of awp commands.

Every figure is the median of N runs (default 20; 5 for daemon starts) of a
fresh ``awp`` process, fork and exec included, printed beside the floor, the
median of ``python -c pass`` with the interpreter awp runs on, timed right
before each run (so a machine whose load drifts still gives fair ratios), so
they read as multiples of what any Python command costs on this machine:

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

- the board's everyday commands (topics, get, post, reply, subscribe --once,
  topic show, queue, claim, complete, fail, release, renew) on a topic of a
  and one a peer owns, and ``--help`` (top level and a command's).

Targets (issues 14 and 22): every everyday command, the board's included,
<= 2x the floor, and the help <= 3x, on an ordinary store with a regular (not
editable) install: ``--regular`` builds one in a temporary venv first, since
an editable install's import hook alone costs several ms.  On the big store
read and threads <= 200 ms; daemon start <= 1 s.
Run: python bench/cli.py [--regular] [--runs N] [--rows N] [--threads N] [--keep] [--only TEXT]
Figures on a loaded machine (2 cores) are noisy: run it alone.
"""

from __future__ import annotations

import argparse
import base64
import json
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

TARGETS_MS = {"read": 200, "threads": 200, "start": 1000}
# Issue 22: as multiples of the floor measured in the same run.
TARGETS_X = {"verb": 2.0, "help": 3.0}


class BenchError(Exception):
    pass


class Done(Exception):
    """The lines asked for (``--only``) have run."""


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


# The floor, timed right before each timed run: a ratio to a floor taken
# minutes earlier on a shared machine says more about its load than about awp.
FLOOR_ARGV: list[str] = []
FLOORS: list[float] = []


def floor_once(env: dict) -> None:
    if FLOOR_ARGV:
        FLOORS.append(run(FLOOR_ARGV, env)[0] * 1000)


def timed(argv: list[str], env: dict, runs: int, *, warmup: int = 1,
          expect: str | None = None, ok_codes=(0,)) -> list[float]:
    """Wall-clock ms of ``runs`` runs (after ``warmup`` untimed ones)."""
    out = []
    for i in range(warmup + runs):
        if i >= warmup:
            floor_once(env)
        dt, r = run(argv, env)
        check(r, ok_codes)
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
        return json.loads(self.cmd("status", "--json").stdout)["key"]


def timed_wait(waiter: Home, sender: Home, runs: int) -> list[float]:
    """``awp wait`` on ``waiter`` with one message already there, each run."""
    out = []
    for _ in range(runs + 1):
        sender.cmd("send", waiter.env["AWP_NAME"], "--wait-ack", "5s", "ping")
        floor_once(waiter.env)
        dt, r = run(waiter.argv("wait", "--timeout", "10s"), waiter.env)
        check(r)
        out.append(dt * 1000)
    return out[1:]


def timed_lease(h: Home, topic: str, op: str, runs: int) -> list[float]:
    """``awp OP TOPIC LEASE`` on a lease ``awp claim`` (untimed) just took, each run."""
    out = []
    for _ in range(runs + 1):
        r = h.cmd("claim", topic, "--json")
        lease = json.loads(r.stdout)["lease"]
        floor_once(h.env)
        dt, r = run(h.argv(op, topic, lease), h.env)
        check(r)
        out.append(dt * 1000)
        if op == "renew":
            h.cmd("complete", topic, lease)
    return out[1:]


def timed_claim(h: Home, topic: str, runs: int) -> list[float]:
    """``awp claim TOPIC``, each lease released (untimed) after it: the owner bounds the
    leases one claimant holds at once (limits.board_leases_per_claimant)."""
    out = []
    for _ in range(runs + 1):
        floor_once(h.env)
        dt, r = run(h.argv("claim", topic, "--json"), h.env)
        check(r)
        out.append(dt * 1000)
        h.cmd("release", topic, json.loads(r.stdout)["lease"])
    return out[1:]


def board_benches(bench, a: Home, b: Home, runs: int) -> None:
    """The board's everyday commands, each against a connected peer's topic too."""
    a.cmd("topic", "create", "ops", "--open")
    a.cmd("topic", "create", "jobs", "--queue", "--open", "--attempts", "100")
    items = "\n".join(f"job {i}" for i in range(8 * (runs + 2))) + "\n"
    check(subprocess.run(a.argv("post", "jobs", "--lines", "-"), env=a.env, input=items,
                         capture_output=True, text=True, timeout=120))
    a.cmd("post", "ops", "first post")
    b.cmd("subscribe", "bench-a/ops", "--once", "--timeout", "10s", ok_codes=(0, 2))
    post_id = a.cmd("get", "ops", "--json").stdout.split('"id": "')[1].split('"')[0]
    bench("awp topics", "verb", lambda: timed(a.argv("topics"), a.env, runs))
    bench("awp get ops (own topic)", "verb", lambda: timed(a.argv("get", "ops"), a.env, runs))
    bench("awp get bench-a/ops (a peer's topic)", "verb",
          lambda: timed(b.argv("get", "bench-a/ops"), b.env, runs))
    bench("awp post ops x", "verb", lambda: timed(a.argv("post", "ops", "x"), a.env, runs))
    bench("awp post bench-a/ops x (a peer's topic)", "verb",
          lambda: timed(b.argv("post", "bench-a/ops", "x"), b.env, runs))
    bench("awp reply ID x", "verb", lambda: timed(a.argv("reply", post_id, "x"), a.env, runs))
    bench("awp subscribe ops --once --timeout 0s", "verb",
          lambda: timed(b.argv("subscribe", "bench-a/ops", "--once", "--timeout", "0s"),
                        b.env, runs, ok_codes=(0, 2)))
    bench("awp topic show ops", "verb", lambda: timed(a.argv("topic", "show", "ops"), a.env, runs))
    bench("awp queue jobs", "verb", lambda: timed(a.argv("queue", "jobs"), a.env, runs))
    bench("awp claim jobs", "verb", lambda: timed_claim(a, "jobs", runs))
    for op in ("complete", "fail", "release", "renew"):
        bench(f"awp {op} jobs LEASE", "verb", lambda op=op: timed_lease(a, "jobs", op, runs))
    bench("awp --help", "help", lambda: timed([*a.awp, "--help"], a.env, runs))
    bench("awp get --help", "help", lambda: timed([*a.awp, "get", "--help"], a.env, runs))
    bench("awp topic create --help", "help",
          lambda: timed([*a.awp, "topic", "create", "--help"], a.env, runs))
    bench("awp up --help", "help", lambda: timed([*a.awp, "up", "--help"], a.env, runs))


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
    """One bench's figures; ``floor`` is the median of the floors taken beside its runs."""
    med = statistics.median(ms)
    verdict = ""
    if target in TARGETS_X:
        limit_x = TARGETS_X[target]
        verdict = f"<= {limit_x:.1f}x floor  {'ok' if med <= limit_x * floor else 'OVER'}"
    elif target:
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
    ap.add_argument("--awp", help="bench this awp executable (a regular install made earlier)")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="run only the lines whose label contains TEXT (repeatable); the"
                         " big store's lines are then skipped")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="awpcli", dir="/tmp")
    awp, interp, extra = awp_argv(regular_install(root) if args.regular else args.awp)
    env = base_env(extra)
    homes: list[Home] = []
    failures: list[str] = []

    def home(name: str) -> Home:
        h = Home(awp, env, root, name)
        homes.append(h)
        return h

    env["COLUMNS"] = "80"  # the width the fast path's help is rendered for (a pipe's)

    def bench(label: str, target: str | None, fn):
        if args.only and not any(t in label for t in args.only):
            return None
        FLOORS.clear()
        try:
            ms = fn()
        except (BenchError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            failures.append(f"{label}: {e}")
            print(f"{label:<44} FAILED: {e}", flush=True)
            return None
        here = statistics.median(FLOORS) if len(FLOORS) >= len(ms) // 2 else floor
        print(line(label, ms, here, target) + f"  [floor {here:.1f} ms]", flush=True)
        return ms

    try:
        print(f"awp: {' '.join(awp)}\ninterpreter: {interp}\nhomes under {root}\n"
              f"median of {args.runs} runs ({args.start_runs} for daemon starts),"
              " wall clock per process", flush=True)
        floor_ms = timed([interp, "-c", "pass"], env, args.runs, warmup=2)
        floor = statistics.median(floor_ms)
        FLOOR_ARGV[:] = [interp, "-c", "pass"]
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
        board_benches(bench, a, b, args.runs)
        if args.only:
            raise Done

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
    except Done:
        pass
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
