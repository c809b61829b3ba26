"""Helpers for the awp web tests: the web process, and a seeded network.

``seed_network`` writes presence documents and mirrored lines straight into
a daemon's store (WAL lets it beside the running daemon), the way the engine
stores what it receives, so the dashboard can be tested with a network of
any size without running dozens of daemons. The web process itself only
ever reads through the daemon.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nodes import free_port, wait_for  # noqa: E402

from awp.wire.keys import encode_key  # noqa: E402
from awp.wire.timefmt import format_ts  # noqa: E402

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


class Web:
    """``awp web`` as a subprocess on a free loopback port.

    ``token`` is read from the URL it prints; ``get``/``post``/``stream`` send
    it as the page's cookie, the way a browser does after the first visit.
    """

    def __init__(self, home: str, *, extra: list[str] | None = None, host: str = "127.0.0.1",
                 env: dict | None = None) -> None:
        self.home = home
        self.port = free_port()
        self.host = host
        self.extra = extra or []
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = home.rstrip("/") + ".web.log"
        self.token = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def login_url(self) -> str:
        """The URL ``awp web`` printed: the page, with the token."""
        return f"{self.url}/?token={self.token}"

    @property
    def cookie(self) -> str:
        return f"awp_token_{self.port}={self.token}"

    def _kw(self, kw: dict) -> dict:
        kw["headers"] = {"cookie": self.cookie, **(kw.get("headers") or {})}
        return kw

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, **self._kw(kw))

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(self.url + path, **self._kw(kw))

    def stream(self, method: str, path: str, **kw):
        return httpx.stream(method, self.url + path, **self._kw(kw))

    def _printed_token(self) -> str:
        # Two awp web on one home share a log: the line with our port is ours.
        for url, token in re.findall(r"awp web: serving (http://\S+)/\?token=([A-Za-z0-9_-]+) for ",
                                     self.tail_log(200)):
            if url == self.url:
                return token
        return ""

    def start(self) -> Web:
        env = dict(os.environ)
        env.pop("AWP_HOME", None)
        env.update(self.env)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        args = [sys.executable, "-m", "awp", "web", "--home", self.home,
                "--listen", f"{self.host}:{self.port}", *self.extra]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=ROOT)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"awp web exited: {self.tail_log()}")
            self.token = self.token or self._printed_token()
            if not self.token:
                return False
            try:
                return self.get("/api/state", timeout=2).status_code in (200, 503)
            except httpx.HTTPError:
                return False

        wait_for(up, 15, "awp web to answer")
        return self

    def wait_state(self, cond=lambda st: True, timeout: float = 15.0, what: str = "state"):
        def check():
            r = self.get("/api/state", timeout=5)
            if r.status_code != 200:
                return None
            st = r.json()
            return st if cond(st) else None

        return wait_for(check, timeout, what, interval=0.1)

    def tail_log(self, n: int = 40) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def fake_key(rng: random.Random) -> str:
    return encode_key(bytes(rng.getrandbits(8) for _ in range(32)))


def seed_network(home: str, *, agents: int = 50, threads: int = 500, sharer: str = "",
                 shared_threads: int = 3, seed: int = 7, now_ms: int | None = None) -> dict:
    """Presence for ``agents`` agents carrying ``threads`` threads in all, plus
    ``shared_threads`` conversations mirrored to this host by ``sharer``."""
    rng = random.Random(seed)
    now = now_ms or int(time.time() * 1000)
    harnesses = ["claude", "codex", "cursor", "gemini", "copilot", "grok", "opencode", "pi"]
    states = ["open", "working", "waiting", "done", "failed", "closed"]
    keys = [fake_key(rng) for _ in range(agents)]
    names = [f"{harnesses[i % 8]}-{i}@host{i % 7}" for i in range(agents)]
    per = max(1, threads // max(1, agents))
    docs = []
    made = 0
    for i, key in enumerate(keys):
        peers = []
        for j in (i - 1, i + 1, (i * 7) % agents):
            if 0 <= j < agents and j != i:
                peers.append({"key": keys[j], "name": names[j], "up": rng.random() > 0.2,
                              "rtt": rng.randint(2, 180)})
        ths = []
        for _ in range(per if made + per <= threads else threads - made):
            other = keys[(i + 1 + rng.randint(0, agents - 2)) % agents]
            ths.append({"th": f"thr_{rng.getrandbits(40):010x}", "peer": other,
                        "subject": f"Task {made}: build and test part {made % 37}",
                        "mine": rng.choice(states), "theirs": rng.choice(states),
                        "updated": format_ts(now - rng.randint(0, 3_600_000)), "unread": 0})
            made += 1
        active = now - rng.randint(0, 30 * 60_000)
        doc = {"origin": key, "name": names[i], "seq": now + i, "ts": format_ts(now - 5000),
               "peers": peers, "threads": ths, "version": "0.5.0",
               "harness": harnesses[i % 8], "model": rng.choice(["gpt-5.5", "claude-opus-5",
                                                               "gemini-3-pro"]),
               "host": f"host{i % 7}", "active": format_ts(active - active % 30_000),
               "waiting": i % 9 == 0, "outbox": 0, "unread": 0, "sig": "x"}
        if i % 5 == 0:
            doc["about"] = f"working on subsystem {i}"
        docs.append(doc)
    mirrors = []
    if sharer:
        for n in range(shared_threads):
            th = f"thr_shared{n}"
            of = keys[n]
            base = now - 60_000
            mirrors.append((sharer, f"m{n}a", th, of, names[n], f"Shared task {n}", "out",
                            {"t": "msg", "id": f"o{n}a", "ts": format_ts(base), "th": th,
                             "subject": f"Shared task {n}",
                             "parts": [{"k": "text", "text": f"please do shared task {n}"}]},
                            base))
            mirrors.append((sharer, f"m{n}b", th, of, names[n], f"Shared task {n}", "in",
                            {"t": "state", "id": f"o{n}b", "ts": format_ts(base + 1000),
                             "th": th, "state": "working", "note": "on it"}, base + 1000))
    conn = sqlite3.connect(os.path.join(home, "awp.db"), timeout=30)
    try:
        with conn:
            for d in docs:
                conn.execute(
                    "INSERT OR REPLACE INTO presence (origin, name, seq, doc, doc_ts, received,"
                    " via, hops) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (d["origin"], d["name"], d["seq"], json.dumps(d), now - 5000, now,
                     keys[0], 1))
            for m in mirrors:
                conn.execute(
                    "INSERT OR REPLACE INTO mirrors (sharer, id, th, of, of_name, subject, dir,"
                    " line, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*m[:7], json.dumps(m[7]), m[8]))
    finally:
        conn.close()
    return {"keys": keys, "names": names, "docs": docs, "threads": made,
            "shared": [m for m in mirrors]}


def add_mirror_line(home: str, sharer: str, th: str, of: str, line: dict, *, ident: str,
                    direction: str = "out", subject: str = "", of_name: str = "") -> None:
    conn = sqlite3.connect(os.path.join(home, "awp.db"), timeout=30)
    try:
        with conn:
            conn.execute(
                "INSERT OR REPLACE INTO mirrors (sharer, id, th, of, of_name, subject, dir, line,"
                " at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sharer, ident, th, of, of_name, subject, direction, json.dumps(line),
                 int(time.time() * 1000)))
    finally:
        conn.close()


def png_bytes(width: int = 48, height: int = 32, rgb: tuple[int, int, int] = (37, 99, 235)) -> bytes:
    """A small valid PNG, made without any imaging library."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def sse_events(lines):
    """Parse server-sent events from an iterator of text lines: yields
    (event, data, id) and ("comment", text, None) for comment lines."""
    event, data, ident = None, [], None
    for line in lines:
        if line.startswith(":"):
            yield ("comment", line[1:].strip(), None)
            continue
        if line == "":
            if data or event:
                yield (event or "message", "\n".join(data), ident)
            event, data, ident = None, [], None
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            ident = value
        elif field == "retry":
            yield ("retry", value, None)
