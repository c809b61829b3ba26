"""Helpers for the CLI tests: run the real ``awp`` executable against temp homes.

Test modules import the fixtures (``homes_fixture``, ``cli_root_fixture``;
pytest knows them as ``homes`` and ``cli_root``).

Each home gets ``AWP_LISTEN=tcp:127.0.0.1:<free port>`` so commands start its
daemon on demand with a loopback TCP listener and no tailcat. Daemons started
that way are killed in teardown (pid from ``daemon.pid``, plus a scan for any
``awp daemon --home <home>`` process that outlived it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from awp.base.home import is_locked, read_pid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from nodes import free_port, wait_for  # noqa: E402


def daemon_pids(home: str) -> list[int]:
    """Every live ``awp daemon --home HOME`` process (by /proc scan)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if b"daemon" in argv and home.encode() in argv and b"awp" in argv:
            pids.append(int(entry))
    return pids


class Home:
    """One awp home driven through the CLI."""

    def __init__(self, path: str, *, port: int | None = None, env: dict | None = None,
                 identity: bool = True) -> None:
        """``identity``: give the home an identity before its first command, as ``awp up``
        would (commands other than ``up`` start no daemon in a home without one)."""
        self.path = path
        self.identity = identity
        self.port = port or free_port()
        self.address = f"tcp:127.0.0.1:{self.port}"
        self.env = dict(os.environ)
        self.env.pop("AWP_HOME", None)
        for k in list(self.env):
            if k.startswith("AWP_"):
                self.env.pop(k)
        self.env["AWP_LISTEN"] = self.address
        self.env["PYTHONPATH"] = ROOT + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.update(env or {})

    def run(self, cmd: str, *args: str, input: str | None = None, timeout: float = 90,
            cwd: str | None = None, home: bool = True) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "awp", cmd]
        if home:
            argv += ["--home", self.path]
            if self.identity:
                self.make_identity()
        argv += list(args)
        return subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout, env=self.env, cwd=cwd or ROOT)

    def make_identity(self) -> None:
        """The identity a first ``awp up`` makes, unless the home already has one."""
        from awp.base.home import ensure_home, has_identity
        from awp.daemon.keyfile import load_identity_seed

        if not has_identity(self.path):
            ensure_home(self.path)
            load_identity_seed(self.path)

    def ok(self, cmd: str, *args: str, **kw) -> subprocess.CompletedProcess:
        r = self.run(cmd, *args, **kw)
        assert r.returncode == 0, (
            f"awp {cmd} {' '.join(args)} exited {r.returncode}\n"
            f"stdout: {r.stdout}\nstderr: {r.stderr}\nlog:\n{self.log()}")
        return r

    def log(self) -> str:
        try:
            with open(os.path.join(self.path, "daemon.log"), errors="replace") as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def kill(self) -> None:
        pids = set(daemon_pids(self.path))
        pid = read_pid(self.path)
        if pid and is_locked(self.path):
            pids.add(pid)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if os.path.isdir(self.path):
            wait_for(lambda: not is_locked(self.path), 10, f"{self.path} unlocked")


@pytest.fixture(name="cli_root")
def cli_root_fixture():
    d = tempfile.mkdtemp(prefix="awpc", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(name="homes")
def homes_fixture(cli_root):
    made: list[Home] = []

    def make(name: str, **kw) -> Home:
        h = Home(os.path.join(cli_root, name), **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.kill()


def deadline_loop(timeout: float, interval: float = 0.05):
    """Yield until ``timeout`` passes (for polling loops with a body)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        yield
        time.sleep(interval)
