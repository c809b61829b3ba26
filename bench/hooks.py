"""Hook bench: whole-process wall-clock time of ``awp hook inbox``.

``awp hook`` runs after every tool call an agent makes, so what it costs is
paid all day. Every figure is the median of N runs (default 40, after two
untimed warm-ups) of a fresh process, fork and exec included, fed a recorded
Claude Code ``PostToolUse`` input on stdin:

- the floor: ``python -c pass`` with the interpreter awp runs on;
- ``awp hook inbox`` with the daemon running and nothing new (target <= 30 ms);
- ``awp hook inbox`` with 5 new messages (sent by a connected peer before
  each run, untimed; the run renders them and marks them read);
- ``awp hook inbox`` with no daemon (it must print nothing, start nothing).

Two daemons (``a``, ``b``) run in temp homes on loopback TCP, joined with a
connect; the hook runs against ``a``.

Run: ``.venv/bin/python bench/hooks.py [--runs N] [--awp PATH]``. ``--awp``
times another installation (for example a regular, non-editable install in a
scratch venv: an editable install's import finder alone costs ~15 ms at each
interpreter start). The daemons always run from this checkout. Figures on a
loaded machine (2 cores) are noisy: run it alone, and watch ``uptime``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from nodes import Node, wait_for  # noqa: E402

TARGET_MS = 30.0
INPUT = json.dumps({
    "session_id": "0b9d1c64-5a43-4c1e-9f1e-2b7c0a0d1e11",
    "transcript_path": "/nonexistent/transcript.jsonl",
    "cwd": "/tmp",
    "permission_mode": "default",
    "hook_event_name": "PostToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "ls", "description": "List files"},
    "tool_response": {"stdout": "a\nb\n", "stderr": "", "interrupted": False},
}).encode()


def default_awp() -> list[str]:
    script = os.path.join(ROOT, ".venv", "bin", "awp")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "awp"]


def interpreter_of(argv: list[str]) -> str:
    """The Python an ``awp`` script runs on (its ``#!`` line), for the floor."""
    if len(argv) > 1:
        return argv[0]
    try:
        with open(argv[0], "rb") as f:
            first = f.readline().decode().strip()
    except OSError:
        return sys.executable
    if first.startswith("#!") and "python" in first:
        return first[2:].split()[0]
    return sys.executable


def clean_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWP_", "CLAUDE", "CODEX_", "CURSOR_", "GEMINI_", "COPILOT_"))
           and k not in ("AI_AGENT", "OPENCODE", "PI_CODING_AGENT")}
    env["AWP_HOME"] = home
    return env


CPU: dict[str, list[float]] = {}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_run(argv: list[str], env: dict, *, stdin: bytes = b"") -> tuple[float, bytes]:
    """Wall-clock ms of one run (its CPU ms go to ``CPU["last"]``)."""
    c0 = _cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=30)
    ms = (time.perf_counter() - t0) * 1000
    CPU["last"] = [(_cpu() - c0) * 1000]
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return ms, proc.stdout


def keep(label: str, i: int, xs: list[float], ms: float) -> None:
    """Record a timed run (the first two are warm-ups)."""
    if i >= 2:
        xs.append(ms)
        CPU.setdefault(label, []).extend(CPU["last"])


def line(label: str, xs: list[float], floor: float | None, target: float | None = None) -> str:
    med = statistics.median(xs)
    cpu = CPU.get(label)
    rel = f"{med / floor:5.1f}x floor" if floor else " " * 11
    s = (f"{label:<44} {med:7.1f} ms  {rel}  (min {min(xs):6.1f}, p90 "
         f"{sorted(xs)[int(len(xs) * 0.9) - 1]:6.1f}, max {max(xs):6.1f}, n={len(xs)})")
    if target is not None:
        s += f"  <= {target:g} ms  {'ok' if med <= target else 'OVER'}"
    if cpu:
        s += f"\n{'':<44} cpu {statistics.median(cpu):5.1f} ms (user+sys of the process)"
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--awp", help="the awp executable to time (default: this checkout's)")
    args = ap.parse_args()
    awp = [os.path.abspath(args.awp)] if args.awp else default_awp()
    python = interpreter_of(awp)
    print(f"awp: {' '.join(awp)}")
    print(f"interpreter: {python}  PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')}")
    print(f"load average: {os.getloadavg()[0]:.2f}")
    root = tempfile.mkdtemp(prefix="awph", dir="/tmp")
    a = Node(os.path.join(root, "a"), "bench-a")
    b = Node(os.path.join(root, "b"), "bench-b")
    failed = False
    try:
        a.start()
        b.start()
        b.connect(a)
        env = clean_env(a.home)
        hook = [*awp, "hook", "inbox"]
        n = args.runs

        floor = []
        for i in range(n + 2):
            ms, _ = time_run([python, "-c", "pass"], env)
            keep('floor: python -c pass', i, floor, ms)
        fl = statistics.median(floor)
        print(line("floor: python -c pass", floor, fl))

        idle = []
        for i in range(n + 2):
            ms, out = time_run(hook, env, stdin=INPUT)
            if out.strip():
                raise RuntimeError(f"nothing new, yet the hook printed: {out[:200]!r}")
            keep('awp hook inbox, nothing new', i, idle, ms)
        print(line("awp hook inbox, nothing new", idle, fl, TARGET_MS))
        failed |= statistics.median(idle) > TARGET_MS

        five = []
        th = None
        for i in range(n + 2):
            before = len(a.inbound())
            for k in range(5):
                res = b.send(None if th else a.key, f"message {k} of run {i}", th=th,
                             **({} if th else {"subject": "Bench thread"}))
                th = res["th"]
            wait_for(lambda before=before: len(a.inbound()) >= before + 5, 10, "5 messages")
            ms, out = time_run(hook, env, stdin=INPUT)
            ctx = json.loads(out)["hookSpecificOutput"]["additionalContext"]
            if not ctx.startswith("New awp messages (5)."):
                raise RuntimeError(f"unexpected hook output: {ctx[:200]!r}")
            keep('awp hook inbox, 5 new messages', i, five, ms)
        print(line("awp hook inbox, 5 new messages", five, fl))

        a.stop()
        gone = []
        for i in range(n + 2):
            ms, out = time_run(hook, env, stdin=INPUT)
            if out.strip():
                raise RuntimeError(f"no daemon, yet the hook printed: {out[:200]!r}")
            keep('awp hook inbox, no daemon', i, gone, ms)
        print(line("awp hook inbox, no daemon", gone, fl))
        if os.path.exists(os.path.join(a.home, "daemon.pid")):
            raise RuntimeError("the hook started a daemon")
    finally:
        a.kill()
        b.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
