"""`awp conform` against our own daemon: every scenario must pass, both modes.

Connect mode over TCP and over a Unix socket must pass every scenario (but
the WebSocket binding's, which test_conform_ws.py runs over ws); listen mode
(our daemon dials in with `awp connect`) must give no failure, the five
scenarios that need their own connection being skipped.  The interop harness
is run once too, and the command's own usage errors are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from fixtures.conformrun import conform_env, run_conform
from nodes import ROOT

from awp.conform.scenarios import SCENARIOS

ALL = [s.name for s in SCENARIOS]
OWN = {s.name for s in SCENARIOS if s.own_connection}
# skipped without --board-topic, and the dishonest-owner ones without --owner-run
NEEDS_TOPIC = {"board-sync", "board-relay", "board-stamp", "board-owner-forged-author",
               "board-owner-equivocates", "board-owner-heads"}
WS = {n for n in ALL if n.startswith("ws-")}  # skipped unless the target is a ws URL
SKIPPED = NEEDS_TOPIC | WS  # in connect mode over TCP or a Unix socket


env = conform_env


def conform(*args: str, timeout: float = 55) -> subprocess.CompletedProcess:
    return run_conform(*args, timeout=timeout)[0]


def awp_cmd(*args: str) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "awp", *args])


def assert_all_pass(r: subprocess.CompletedProcess) -> None:
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert [ln.split(":")[0] for ln in lines[:-1]] == [
        f"SKIP {name}" if name in SKIPPED else f"PASS {name}" for name in ALL], r.stdout
    assert lines[-1] == f"{len(ALL) - len(SKIPPED)} passed, 0 failed, {len(SKIPPED)} skipped"


def test_connect_mode_over_tcp_all_pass(make_node):
    node = make_node("d").start()
    assert_all_pass(conform(node.address))


def test_connect_mode_over_unix_socket_all_pass(make_node):
    node = make_node("d", unix=True).start()
    assert node.address.startswith("unix:")
    assert_all_pass(conform(node.address))


def test_json_report(make_node):
    node = make_node("d").start()
    r = conform(node.address, "--json", "--scenario", "ping", "--scenario", "handshake")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert [s["scenario"] for s in rep["scenarios"]] == ["handshake", "ping"]  # catalogue order
    for s in rep["scenarios"]:
        assert s["status"] == "pass" and isinstance(s["duration_ms"], int)
        assert set(s) == {"scenario", "status", "detail", "duration_ms"}
    assert (rep["passed"], rep["failed"], rep["skipped"]) == (2, 0, 0)
    assert rep["mode"] == "connect" and rep["target"] == node.address
    assert rep["peer"]["key"] == node.key
    assert rep["runner_key"].startswith("ed25519:") and rep["runner_key"] != node.key


def test_fresh_runner_key_every_run(make_node):
    node = make_node("d").start()
    keys = {json.loads(conform(node.address, "--json", "--scenario", "ping").stdout)
            ["runner_key"] for _ in range(2)}
    assert len(keys) == 2


def test_trace_prints_every_line_on_stderr(make_node):
    node = make_node("d").start()
    r = conform(node.address, "--trace", "--scenario", "ping")
    assert r.returncode == 0
    assert r.stdout.strip().splitlines() == ["PASS ping", "1 passed, 0 failed, 0 skipped"]
    err = r.stderr
    for t in ("hello", "auth", "resume", "ping", "pong"):
        assert f'[ping] > {{"t":"{t}"' in err or f'[ping] < {{"t":"{t}"' in err, err
    assert '[ping] < {"t":"pong"' in err and '[ping] > {"t":"ping"' in err


def _listen_mode(node, listen: str) -> None:
    r = conform("--listen", listen, "--run", awp_cmd("connect", "--home", node.home, "{addr}"),
                "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    status = {s["scenario"]: s["status"] for s in rep["scenarios"]}
    assert status == {n: ("skip" if n in OWN | NEEDS_TOPIC else "pass") for n in ALL}, rep
    skipped = len(OWN | NEEDS_TOPIC)
    assert (rep["passed"], rep["failed"], rep["skipped"]) == (len(ALL) - skipped, 0, skipped)
    assert rep["peer"]["key"] == node.key
    assert rep["command_exit"] == 0


def test_listen_mode_over_tcp_no_failures(make_node):
    node = make_node("d").start()
    _listen_mode(node, "tcp:127.0.0.1:0")


def test_listen_mode_over_unix_socket_no_failures(make_node, tmp_home_root):
    node = make_node("d", unix=True).start()
    _listen_mode(node, "unix:" + os.path.join(tmp_home_root, "conform.sock"))
    assert not os.path.exists(os.path.join(tmp_home_root, "conform.sock"))


def test_listen_mode_text_report(make_node):
    node = make_node("d").start()
    r = conform("--listen", "tcp:127.0.0.1:0", "--run",
                awp_cmd("connect", "--home", node.home, "{addr}"))
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    skipped = len(OWN | NEEDS_TOPIC)
    assert lines[-1] == f"{len(ALL) - skipped} passed, 0 failed, {skipped} skipped"
    assert "SKIP version: needs its own connection" in r.stdout
    assert "PASS bye" in lines


def test_daemon_still_healthy_after_conform(make_node):
    """Abrupt closes, refusals and a 1 MiB line leave the daemon serving."""
    node = make_node("d").start()
    assert conform(node.address).returncode == 0
    assert node.proc.poll() is None
    st = node.api("GET", "/v1/status")
    assert st["key"] == node.key
    assert_all_pass(conform(node.address))


def test_interop_harness_against_our_daemon():
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "interop", "run_conform.py"),
                        "--preset", "awp", "--", "--timeout", "10s"],
                       capture_output=True, text=True, timeout=58, env=env(), cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "total: 76 passed, 0 failed, 68 skipped"
    assert time.monotonic() - t0 < 58


def test_list_and_usage_errors():
    r = conform("--list")
    assert r.returncode == 0
    names = [ln.split()[0] for ln in r.stdout.strip().splitlines()]
    assert names == ALL
    assert all(len(ln.split(None, 1)) == 2 for ln in r.stdout.strip().splitlines())

    for args, words in [
        ((), "give the ADDRESS"),
        (("--listen", "tcp:127.0.0.1:0"), "--listen needs --run"),
        (("tcp:127.0.0.1:1", "--run", "x {addr}"), "--run goes with --listen"),
        (("tcp:127.0.0.1:1", "--listen", "tcp:127.0.0.1:0", "--run", "x {addr}"), "not both"),
        (("--listen", "tcp:127.0.0.1:0", "--run", "no placeholder"), "{addr}"),
        (("tcp:127.0.0.1:1", "--scenario", "nope"), "unknown scenario nope"),
        (("tcp:127.0.0.1:1", "--timeout", "soon"), "--timeout"),
        (("not-an-address",), "not an address"),
        (("tcp:127.0.0.1:1", "--bogus"), "No such option"),
    ]:
        r = conform(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert words in r.stderr, (args, r.stderr)
