"""Test daemons get ports that cannot collide, and a foreground daemon that
cannot listen says so and exits (issue 24, item 3)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from nodes import ROOT
from rawpeer import RawPeer


def test_daemons_started_together_each_listen_on_their_own_port(make_node):
    nodes = [make_node(f"p{i}") for i in range(12)]
    for n in nodes:  # all chosen before any binds: what the benches do
        n.start(wait=False)
    for n in nodes:
        n.wait_ready(60)  # twelve at once on a shared machine
    ports = [n.port for n in nodes]
    assert all(ports) and len(set(ports)) == len(ports), ports
    for n in nodes[:3]:
        with RawPeer(n.address) as p:
            assert p.handshake()["t"] == "resume"
            assert p.peer_hello["key"] == n.key  # the daemon that owns the port answers


def test_a_restarted_node_asks_for_its_port_again(make_node):
    a, b = make_node("a").start(), make_node("b").start()
    port = a.port
    b.connect(a)
    a.stop()
    a.start()
    assert a.port == port and a.address == f"tcp:127.0.0.1:{port}"
    assert b.connect(a)["key"] == a.key


def test_an_unstarted_node_has_no_address_yet(make_node):
    with pytest.raises(AssertionError, match="not started"):
        _ = make_node("x").address


def _foreground(home: str, *listen: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AWP_HOME", None)
    args = [sys.executable, "-m", "awp", "daemon", "--home", home, "--no-tailcat"]
    for item in listen:
        args += ["--listen", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def test_foreground_daemon_that_cannot_listen_says_so_and_exits(tmp_home_root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _foreground(os.path.join(tmp_home_root, "h"), f"tcp:127.0.0.1:{port}")
    assert r.returncode == 1, r.stderr
    assert f"awp daemon: cannot listen on tcp:127.0.0.1:{port}:" in r.stderr
    # One good listener does not excuse a bad one: every listener asked for must bind.
    with open(os.path.join(tmp_home_root, "file"), "w"):
        pass
    bad = f"unix:{tmp_home_root}/file/l.sock"  # under a file: no directory can be made
    r = _foreground(os.path.join(tmp_home_root, "h"), "tcp:127.0.0.1:0", bad)
    assert r.returncode == 1, r.stderr
    assert f"awp daemon: cannot listen on {bad}:" in r.stderr


def test_node_on_a_taken_port_fails_to_start_loudly(make_node):
    a = make_node("a").start()
    b = make_node("b")
    b.listen = a.listen  # the collision the helpers used to make by chance
    with pytest.raises(AssertionError, match="cannot listen on"):
        b.start()
