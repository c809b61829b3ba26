#!/usr/bin/env python3
"""Run `awp conform` against any AWP peer, in connect mode, listen mode, or both.

A peer is given as an address it already listens on, or as commands that
start it (``{addr}`` is replaced by an address this harness picks):

    # a peer that is already running
    run_conform.py --address tcp:127.0.0.1:7000

    # a peer started here: --listen-cmd makes it listen on {addr} (connect
    # mode); --dial-cmd makes it dial {addr} (listen mode)
    run_conform.py --listen-cmd "mypeer serve {addr}" --dial-cmd "mypeer connect {addr}"

    # ready-made peers: our own daemon, or interop/minipeer.py
    run_conform.py --preset awp
    run_conform.py --preset minipeer

--transport tcp|unix|both picks the addresses used for {addr}. Everything
after ``--`` goes to `awp conform` (e.g. ``-- --timeout 5s --trace``).
Each run's report is printed; the last line adds them up, and the exit
status is 1 if any scenario failed (or a peer could not be started).
Standard library only; `awp` is run as ``python -m awp`` unless --awp is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pick_address(kind: str, tmp: str, tag: str) -> str:
    if kind == "tcp":
        return f"tcp:127.0.0.1:{free_port()}"
    return f"unix:{os.path.join(tmp, tag + '.sock')}"


def reachable(addr: str) -> bool:
    try:
        if addr.startswith("unix:"):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(addr[5:])
        else:
            host, _, port = addr[4:].rpartition(":")
            with socket.create_connection((host, int(port)), timeout=1):
                pass
        return True
    except OSError:
        return False


class Started:
    """A peer process started by the harness (its own process group)."""

    def __init__(self, cmd: str, log_path: str, env: dict | None = None) -> None:
        self.cmd = cmd
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=ROOT, env=env)

    def wait_listening(self, addr: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode}: {self.tail()}"
            if reachable(addr):
                return ""
            time.sleep(0.05)
        return f"not listening on {addr} after {timeout:g}s: {self.tail()}"

    def tail(self, n: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                self.proc.wait(5)
                return
            except subprocess.TimeoutExpired:
                continue


def conform(awp: list[str], args: list[str], extra: list[str], env: dict) -> dict:
    """Run awp conform --json; returns the report (or a synthetic failure)."""
    cmd = [*awp, "conform", *args, "--json", *extra]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if r.stderr:
        sys.stderr.write(r.stderr)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return {"error": f"awp conform exited {r.returncode} without a report: "
                         f"{(r.stdout + r.stderr).strip()[-500:]}"}
    for s in report["scenarios"]:
        detail = f": {s['detail']}" if s["detail"] and s["status"] != "pass" else ""
        print(f"  {s['status'].upper()} {s['scenario']}{detail}")
    print(f"  {report['passed']} passed, {report['failed']} failed, "
          f"{report['skipped']} skipped", flush=True)
    return report


def presets(name: str, tmp: str, kind: str) -> tuple[str | None, str | None, list[Started]]:
    """(listen_cmd, dial_cmd, helpers started for the preset)."""
    py = shlex.quote(sys.executable)
    if name == "minipeer":
        mp = shlex.quote(os.path.join(HERE, "minipeer.py"))
        return (f"{py} {mp} --state {shlex.quote(tmp)}/{kind}-l.json --listen {{addr}}"
                " --caps chat,blob,grant,introduce",
                f"{py} {mp} --state {shlex.quote(tmp)}/{kind}-d.json --dial {{addr}}"
                " --caps chat,blob,grant,introduce", [])
    if name == "awp":
        # Connect mode: a daemon listening on {addr}. Listen mode: a second,
        # long-running daemon told to connect to {addr}.
        home_l = os.path.join(tmp, f"{kind}-l")
        home_d = os.path.join(tmp, f"{kind}-d")
        listen_cmd = (f"{py} -m awp daemon --home {shlex.quote(home_l)} --no-tailcat"
                      " --listen {addr} --name conform-target")
        side = pick_address(kind, tmp, f"{kind}-d-own")
        helper = Started(f"{py} -m awp daemon --home {shlex.quote(home_d)} --no-tailcat"
                         f" --listen {shlex.quote(side)} --name conform-dialer",
                         os.path.join(tmp, f"{kind}-d.log"))
        why = helper.wait_listening(side)
        if why:
            helper.stop()
            raise RuntimeError(f"could not start the dialing daemon: {why}")
        return listen_cmd, f"{py} -m awp connect --home {shlex.quote(home_d)} {{addr}}", [helper]
    raise SystemExit(f"unknown preset {name!r} (awp or minipeer)")


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", help="a peer already listening here (connect mode)")
    ap.add_argument("--listen-cmd", help="command that makes the peer listen on {addr}")
    ap.add_argument("--dial-cmd", help="command that makes the peer dial {addr}")
    ap.add_argument("--preset", choices=["awp", "minipeer"], help="a ready-made peer")
    ap.add_argument("--transport", choices=["tcp", "unix", "both"], default="both")
    ap.add_argument("--mode", choices=["connect", "listen", "both"], default="both")
    ap.add_argument("--awp", help="the awp executable (default: python -m awp)")
    args = ap.parse_args(argv)
    if not (args.address or args.listen_cmd or args.dial_cmd or args.preset):
        ap.error("give --address, --listen-cmd/--dial-cmd, or --preset")

    awp = shlex.split(args.awp) if args.awp else [sys.executable, "-m", "awp"]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("AWP_HOME", None)
    kinds = ["tcp", "unix"] if args.transport == "both" else [args.transport]
    tmp = tempfile.mkdtemp(prefix="awpi", dir="/tmp")  # short: Unix socket paths
    reports: list[dict] = []
    helpers: list[Started] = []
    try:
        if args.address:
            reports.append(conform(awp, [args.address], extra, env))
        for kind in kinds:
            listen_cmd, dial_cmd = args.listen_cmd, args.dial_cmd
            if args.preset:
                try:
                    listen_cmd, dial_cmd, more = presets(args.preset, tmp, kind)
                except RuntimeError as e:
                    reports.append({"error": str(e)})
                    continue
                helpers += more
            if listen_cmd and args.mode in ("connect", "both"):
                addr = pick_address(kind, tmp, f"{kind}-peer")
                peer = Started(listen_cmd.replace("{addr}", shlex.quote(addr)),
                               os.path.join(tmp, f"{kind}-peer.log"), env)
                helpers.append(peer)
                print(f"# connect mode over {kind}: peer started with {peer.cmd}", flush=True)
                why = peer.wait_listening(addr)
                if why:
                    print(f"  peer did not start: {why}")
                    reports.append({"error": why})
                else:
                    reports.append(conform(awp, [addr], extra, env))
                peer.stop()
            if dial_cmd and args.mode in ("listen", "both"):
                addr = pick_address(kind, tmp, f"{kind}-conform")
                print(f"# listen mode over {kind}", flush=True)
                reports.append(conform(awp, ["--listen", addr, "--run", dial_cmd], extra, env))
    finally:
        for h in helpers:
            h.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    passed = sum(r.get("passed", 0) for r in reports)
    failed = sum(r.get("failed", 0) for r in reports)
    skipped = sum(r.get("skipped", 0) for r in reports)
    broken = [r["error"] for r in reports if "error" in r]
    for e in broken:
        print(f"error: {e}")
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or broken or not reports else 0


if __name__ == "__main__":
    sys.exit(main())
