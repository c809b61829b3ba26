"""Running real awp daemons as subprocesses for tests and benches."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from awp.localapi.client import DaemonNotRunning, LocalClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A port free at this instant, for a listener that cannot report its own.

    It can be handed to two callers (here or in another process) before
    either binds it: :class:`Node` lets its daemon bind port 0 instead.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def disk_bytes(path: str) -> int:
    """Bytes of every file under ``path`` (a home's disk use, for floods and budgets)."""
    total = 0
    for d, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(d, name))
            except OSError:
                pass
    return total


def queued_to(pid: int) -> int:
    """Bytes waiting unread in the Unix sockets of process ``pid`` (``ss``'s Recv-Q): a
    stopped reader the daemon has already answered has them."""
    out = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[2]) for line in out.splitlines() if f"pid={pid}," in line)


def wait_for(cond, timeout: float = 10.0, what: str = "condition", interval: float = 0.02):
    """Poll ``cond`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


ANY_PORT = "tcp:127.0.0.1:0"


def bound_port(status: dict) -> int:
    """The loopback TCP port a daemon's status says it listens on (0: none)."""
    for a in status.get("addresses") or []:
        if a.startswith("tcp:127.0.0.1:"):
            return int(a.rsplit(":", 1)[1])
    return 0


class Node:
    """One daemon in its own home, listening on loopback TCP (or a Unix socket).

    The first start lets the daemon bind port 0 and reads the port it got
    from its status, so no two daemons can be handed one port; later starts
    ask for that port again, so peers find the node where they left it (a
    daemon that cannot have it exits, and :meth:`wait_ready` says why).
    ``port`` and ``address`` are known once the node has started.
    """

    def __init__(self, home: str, name: str = "node", *, unix: bool = False,
                 extra: list[str] | None = None, env: dict | None = None) -> None:
        self.home = home
        self.name = name
        self.port = 0
        self.unix_path = os.path.join(os.path.dirname(home), f"{name}.l.sock")
        self.listen = f"unix:{self.unix_path}" if unix else ANY_PORT
        self.extra = extra or []
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = home + ".log"
        self.learn_port = False  # this start asked for port 0: read the port from the status

    def with_limits(self, **limits: object) -> Node:
        """Write ``limits`` as the home's config.json (before :meth:`start`)."""
        os.makedirs(self.home, mode=0o700, exist_ok=True)
        with open(os.path.join(self.home, "config.json"), "w") as f:
            json.dump({"limits": limits}, f)
        return self

    @property
    def address(self) -> str:
        if self.listen == ANY_PORT:
            raise AssertionError(f"{self.name} has not started: its port is not known yet")
        return self.listen

    @property
    def client(self) -> LocalClient:
        return LocalClient(os.path.join(self.home, "awp.sock"), timeout=60)

    def start(self, *more: str, wait: bool = True) -> Node:
        env = dict(os.environ)
        env.pop("AWP_HOME", None)
        env.update(self.env)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.learn_port = self.listen == ANY_PORT
        args = [sys.executable, "-m", "awp", "daemon", "--home", self.home, "--no-tailcat",
                "--listen", self.listen, "--name", self.name, *self.extra, *more]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        def ready():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon {self.name} exited: {self.tail_log()}")
            try:
                return self.client.get("/v1/status")
            except (DaemonNotRunning, ConnectionError, OSError):
                return None

        self.status = wait_for(ready, timeout, f"daemon {self.name} ready")
        self.key = self.status["key"]
        if self.learn_port:
            self.learn_port = False
            self.port = bound_port(self.status)
            if not self.port:
                raise AssertionError(f"daemon {self.name} listens on no loopback port:"
                                     f" {self.status.get('listen_errors')}")
            self.listen = f"tcp:127.0.0.1:{self.port}"

    def tail_log(self, n: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    # -- API shortcuts ---------------------------------------------------------------

    def api(self, method: str, path: str, body=None, **query):
        return self.client.request(method, path, body, query=query or None)

    def connect(self, other: Node, timeout: float = 20) -> dict:
        return self.api("POST", "/v1/connect", {"target": other.address, "timeout": timeout})

    def send(self, peer: str | None, text: str, **kw) -> dict:
        body = {"parts": [{"k": "text", "text": text}], **kw}
        if peer:
            body["peer"] = peer
        return self.api("POST", "/v1/send", body)

    def peer_state(self, key: str) -> str:
        for p in self.api("GET", "/v1/peers"):
            if p["key"] == key:
                return p["state"]
        return "unknown"

    def inbound(self, th: str | None = None, peer: str | None = None) -> list[dict]:
        body = {"n": 1_000_000, "mark": False}
        if th:
            body["th"] = th
        if peer:
            body["peer"] = peer
        recs = self.api("POST", "/v1/read", body)["records"]
        return [r for r in recs if r["dir"] == "in"]
