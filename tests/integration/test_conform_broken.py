"""`awp conform` against peers that are broken on purpose.

Each broken minipeer must fail exactly the scenarios its defect touches and
pass the rest; a peer that sends malformed lines fails on the schema; things
that are not AWP peers at all (an HTTP server, a closed port, a peer that
accepts and hangs, one that hangs up at once) make every scenario fail and
the run exit 1 within its timeouts.  Listen mode gives up in time when the
command fails or never dials, and ends the command it started.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from fixtures.conformrun import run_conform, scenarios_of
from fixtures.threadserver import servers
from nodes import ROOT, free_port, wait_for

from awp.conform.scenarios import SCENARIOS
from awp.wire.b64 import b64url
from awp.wire.canonical import compact_json
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity, auth_transcript
from awp.wire.timefmt import format_ts, now_ms

ALL = [s.name for s in SCENARIOS]
# The minipeer lists neither cap board, seal nor bulk, and it speaks no WebSocket.
CORE = [n for n in ALL if not n.startswith(("board-", "seal", "ws-", "rotate", "op-", "bulk-"))]
WS = [n for n in ALL if n.startswith("ws-")]  # skipped: these targets are no ws URL
MINIPEER = os.path.join(ROOT, "interop", "minipeer.py")


def conform(*args: str, timeout: float = 55) -> tuple[subprocess.CompletedProcess, float]:
    return run_conform(*args, timeout=timeout)


report = scenarios_of


def failed(r: subprocess.CompletedProcess) -> set[str]:
    return {n for n, s in report(r).items() if s["status"] == "fail"}


@pytest.fixture
def minipeer(tmp_home_root):
    procs: list[subprocess.Popen] = []

    def start(*flags: str) -> str:
        addr = f"tcp:127.0.0.1:{free_port()}"
        p = subprocess.Popen([sys.executable, MINIPEER, "--state",
                              os.path.join(tmp_home_root, f"mp{len(procs)}.json"),
                              "--listen", addr, "--caps", "chat,blob,grant,introduce", *flags],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        procs.append(p)
        host, port = addr[4:].rsplit(":", 1)

        def up() -> bool:
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_for(up, 10, "minipeer listening")
        return addr

    yield start
    for p in procs:
        p.kill()
        p.wait(5)


def test_minipeer_as_is_passes_everything(minipeer):
    r, _ = conform(minipeer(), "--json", "--timeout", "5s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert failed(r) == set()
    assert {n: s["status"] for n, s in report(r).items()} == {
        n: "pass" if n in CORE else "skip" for n in ALL}


@pytest.mark.parametrize("flag, expected", [
    ("--skip-ack", {"msg-ack", "state-ack", "dedup", "unknown-field", "chunk"}),
    ("--bad-transcript", {"handshake"}),
    ("--accept-any-version", {"version"}),
    ("--close-on-err", {"err-nonclosing"}),
    ("--forget-introduce", {"introduce-replay"}),
])
def test_broken_minipeer_fails_exactly_the_right_scenarios(minipeer, flag, expected):
    r, took = conform(minipeer(flag), "--json", "--timeout", "2s")
    assert r.returncode == 1, r.stdout + r.stderr
    assert failed(r) == expected, r.stdout
    rep = report(r)
    assert all(rep[n]["status"] == "pass" for n in CORE if n not in expected), r.stdout
    assert took < 5 * 2 + 15
    details = " ".join(rep[n]["detail"] for n in expected)
    words = {
        "--skip-ack": "expected ack of the",
        "--bad-transcript": "auth does not verify",
        "--accept-any-version": "accepted a v 99 hello",
        "--close-on-err": "closed the connection",
        "--forget-introduce": "does not list the introduction's thread",
    }[flag]
    assert words in details, details


def test_text_report_of_a_broken_peer(minipeer):
    r, _ = conform(minipeer("--accept-any-version"), "--timeout", "2s")
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 1
    assert lines[0] == "PASS handshake"
    assert lines[1].startswith("FAIL version: the peer accepted a v 99 hello")
    assert lines[-1] == f"{len(CORE) - 1} passed, 1 failed, {len(ALL) - len(CORE)} skipped"


# -- scripted peers ----------------------------------------------------------------------

@pytest.fixture
def server():
    yield from servers()


def assert_all_fail(r: subprocess.CompletedProcess, took: float, limit: float) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines[:-1]] == [
        f"SKIP {n}" if n in WS else f"FAIL {n}" for n in ALL], r.stdout
    assert lines[-1] == f"0 passed, {len(ALL) - len(WS)} failed, {len(WS)} skipped"
    assert took < limit, took


def test_http_server_fails_every_scenario(server):
    def http_reply(c: socket.socket) -> None:
        c.recv(65536)  # whatever came first: our hello, or nothing until we give up
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        c.close()

    s = server(http_reply)
    r, took = conform(s.address, "--timeout", "1s")
    assert_all_fail(r, took, len(ALL) * 1 + 10)
    assert "non-JSON line HTTP/1.1 400 Bad Request" in r.stdout


def test_real_http_server_fails_every_scenario():
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        r, took = conform(f"tcp:127.0.0.1:{httpd.server_address[1]}", "--timeout", "1s")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert_all_fail(r, took, len(ALL) * 1 + 10)


def test_peer_that_accepts_and_hangs(server):
    s = server(lambda c: time.sleep(30))
    r, took = conform(s.address, "--timeout", "0.5s")  # whole run: 0.5 s per scenario at most
    assert_all_fail(r, took, len(ALL) * 0.5 + 10)
    assert "got nothing" in r.stdout


def test_peer_that_hangs_up_at_once(server):
    s = server(lambda c: c.close())
    r, took = conform(s.address, "--timeout", "1s")
    assert_all_fail(r, took, 10)
    assert "closed the connection" in r.stdout


def test_closed_port():
    r, took = conform(f"tcp:127.0.0.1:{free_port()}", "--timeout", "1s")
    assert_all_fail(r, took, 10)
    assert "Connection refused" in r.stdout


def test_missing_unix_socket(tmp_home_root):
    r, took = conform("unix:" + os.path.join(tmp_home_root, "nothing.sock"), "--timeout", "1s")
    assert_all_fail(r, took, 10)


def _read_line(c: socket.socket, buf: bytearray) -> bytes:
    while b"\n" not in buf:
        data = c.recv(65536)
        if not data:
            raise OSError("closed")
        buf += data
    i = buf.index(b"\n")
    line = bytes(buf[:i])
    del buf[:i + 1]
    return line


def sloppy_peer(c: socket.socket) -> None:
    """A peer that gets the protocol right but writes malformed lines: a short
    nonce in its hello, and acks with an id that is not a ULID."""
    me, ids, buf = Identity.generate(), IdGenerator(), bytearray()

    def line(obj: dict) -> bytes:
        return compact_json({"id": ids.next(), "ts": format_ts(now_ms()), **obj}).encode()

    hello = line({"t": "hello", "v": 0, "key": me.key, "name": "sloppy",
                  "nonce": b64url(os.urandom(16)), "caps": ["chat"]})
    c.sendall(hello + b"\n")
    theirs = _read_line(c, buf)
    sig = me.sign(auth_transcript(hello, theirs))
    c.sendall(line({"t": "auth", "sig": sig}) + b"\n")
    _read_line(c, buf)  # their auth (not checked: this peer is only sloppy)
    c.sendall(line({"t": "resume", "seen": {}}) + b"\n")
    while True:
        obj = json.loads(_read_line(c, buf))
        if obj["t"] == "msg":
            c.sendall(compact_json({"t": "ack", "id": "ack-1", "ts": format_ts(now_ms()),
                                    "th": obj["th"], "re": obj["id"]}).encode() + b"\n")
        elif obj["t"] == "ping":
            c.sendall(line({"t": "pong"}) + b"\n")  # pong without re


def test_schema_violations_fail_the_scenario(server):
    s = server(sloppy_peer)
    r, _ = conform(s.address, "--json", "--timeout", "2s", "--scenario", "msg-ack",
                   "--scenario", "ping")
    assert r.returncode == 1
    rep = report(r)
    msg_ack = rep["msg-ack"]
    assert msg_ack["status"] == "fail"
    assert msg_ack["detail"].startswith("schema:"), msg_ack
    assert "hello.nonce is not 43 base64url chars" in msg_ack["detail"]
    assert "ack.id is not a 26-char uppercase ULID" in msg_ack["detail"]
    ping = rep["ping"]
    assert ping["status"] == "fail"
    assert "pong without 're'" in ping["detail"]


# -- listen mode: commands that never dial ------------------------------------------------

def test_listen_mode_command_fails_fast():
    r, took = conform("--listen", "tcp:127.0.0.1:0", "--run",
                      "echo 'cannot reach {addr}' >&2; exit 3", "--timeout", "10s")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    own = sum(s.own_connection for s in SCENARIOS)  # need their own connection: skipped
    assert lines[-1] == f"0 passed, {len(ALL) - own} failed, {own} skipped"
    assert "exited with status 3 before dialing in: cannot reach tcp:127.0.0.1:" in r.stdout
    assert took < 8


def test_listen_mode_command_that_never_dials_is_ended(tmp_home_root):
    pidfile = os.path.join(tmp_home_root, "sleeper.pid")
    r, took = conform("--listen", "tcp:127.0.0.1:0", "--run",
                      f"echo $$ > {pidfile}; exec sleep 120 # {{addr}}", "--timeout", "1s")
    assert r.returncode == 1
    assert "no inbound connection within 1s" in r.stdout
    assert took < 15
    with open(pidfile) as f:
        pid = int(f.read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_listen_mode_peer_that_dials_and_hangs(tmp_home_root):
    """A 'peer' that connects but never speaks: handshake fails, the rest
    report that no session was established."""
    script = ("import socket,sys,time; a=sys.argv[1]; h,p=a[4:].rsplit(':',1);"
              " s=socket.create_connection((h,int(p))); time.sleep(60)")
    r, took = conform("--listen", "tcp:127.0.0.1:0", "--run",
                      f"{sys.executable} -c \"{script}\" {{addr}}", "--timeout", "1s", "--json")
    assert r.returncode == 1
    rep = report(r)
    assert rep["handshake"]["status"] == "fail"
    assert "got nothing" in rep["handshake"]["detail"]
    assert rep["bye"]["detail"] == "no session: the handshake failed"
    assert took < 20
