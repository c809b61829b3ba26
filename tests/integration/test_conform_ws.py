"""`awp conform` over the WebSocket binding: a real daemon passes, broken ws peers fail loudly.

Against a daemon listening on ws every scenario runs over the binding and
passes (the three that need --board-topic are skipped, saying so).  Against
peers that get the binding wrong on purpose the scenario about that very
thing fails, in words naming it:

* an HTTP server that answers 101 to any upgrade and names no subprotocol
  (ws-no-subprotocol fails; the real dial refuses it too);
* one that answers 426 to everything (every dial fails naming the 426, and
  ws-healthz and ws-other-request fail; ws-no-subprotocol's 4xx is right);
* a front to a real daemon that drops text frames (ws-frames fails, the
  scenarios writing binary frames pass).

wss:// goes through a TLS front (a throwaway CA): untrusted without
``--ca``, in words that name the option; every scenario passes with it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import socket
import ssl
import subprocess
import threading
import time

import pytest
from fixtures.conformrun import run_conform, scenarios_of
from fixtures.derp import make_test_ca
from fixtures.threadserver import servers
from nodes import wait_for
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request, TextMessage

from awp.conform.scenarios import SCENARIOS

ALL = [s.name for s in SCENARIOS]
WS = [n for n in ALL if n.startswith("ws-")]
# skipped without --board-topic, and the dishonest-owner ones without --owner-run
NEEDS_TOPIC = {"board-sync", "board-relay", "board-stamp", "board-owner-forged-author",
               "board-owner-equivocates", "board-owner-heads"}
TOPIC_SKIP = "needs --"
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def conform(*args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    return run_conform(*args, timeout=timeout)


report = scenarios_of


def ws_url(node) -> str:
    return wait_for(lambda: next((a for a in node.api("GET", "/v1/status")["reachable"]
                                  if a.startswith("ws://")), None), 10, "the ws listener")


@pytest.fixture
def ws_daemon(make_node):
    return make_node("d", extra=["--listen", "ws:127.0.0.1:0"]).start()


def test_every_scenario_passes_over_ws_against_our_daemon(ws_daemon):
    url = ws_url(ws_daemon)
    r, _ = conform(url, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = report(r)
    assert list(rep) == ALL
    for name, s in rep.items():
        if name in NEEDS_TOPIC:
            assert s["status"] == "skip" and TOPIC_SKIP in s["detail"], s
        else:
            assert s["status"] == "pass", s
    assert rep["ws-no-subprotocol"]["detail"] == "HTTP 400"
    assert json.loads(r.stdout)["target"] == url
    assert ws_daemon.proc.poll() is None


def test_the_text_report_and_the_listen_form_over_ws(ws_daemon):
    port = ws_url(ws_daemon).rsplit(":", 1)[1].rstrip("/")
    r, _ = conform(f"ws:127.0.0.1:{port}", *[a for n in WS for a in ("--scenario", n)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines() == [f"PASS {n}" for n in WS] + [
        f"{len(WS)} passed, 0 failed, 0 skipped"]


def test_ws_scenarios_are_skipped_for_a_tcp_target(make_node):
    node = make_node("d").start()
    r, _ = conform(node.address, "--json", *[a for n in WS for a in ("--scenario", n)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert {n: (s["status"], s["detail"]) for n, s in report(r).items()} == {
        n: ("skip", "the target is not a ws:// or wss:// URL") for n in WS}


def test_usage_errors_of_ca(tmp_home_root):
    bad = os.path.join(tmp_home_root, "bad.pem")
    with open(bad, "w") as f:
        f.write("not a certificate\n")
    for args, words in [
        (("wss://127.0.0.1:1/", "--ca", bad), "no PEM certificate"),
        (("wss://127.0.0.1:1/", "--ca", bad + ".missing"), "--ca"),
        (("--listen", "tcp:127.0.0.1:0", "--run", "x {addr}", "--ca", bad), "--ca goes with"),
    ]:
        r, _ = conform(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert words in r.stderr, (args, r.stderr)


def tls_front(daemon_port: int, certdir: str):
    """TLS in (a certificate for localhost from a throwaway CA), plain bytes on to the daemon."""
    paths = make_test_ca(certdir)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(paths["cert"], paths["key"])

    def handle(c: socket.socket) -> None:
        try:
            tls = ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError):
            return  # a client that does not trust us: what the test looks for
        with tls, socket.create_connection(("127.0.0.1", daemon_port), timeout=20) as up:
            while True:
                ready = [tls] if tls.pending() else select.select([tls, up], [], [], 20)[0]
                if not ready:
                    return
                for src, dst in ((tls, up), (up, tls)):
                    if src in ready:
                        data = src.recv(65536)
                        if not data:
                            return
                        dst.sendall(data)
    return handle, paths["ca"]


def test_wss_needs_the_ca_then_every_scenario_passes(server, ws_daemon, tmp_home_root):
    port = int(ws_url(ws_daemon).rsplit(":", 1)[1].rstrip("/"))
    handler, ca = tls_front(port, os.path.join(tmp_home_root, "ca"))
    url = server(handler).url.replace("ws://127.0.0.1", "wss://localhost")
    r, _ = conform(url, "--json", "--timeout", "5s", "--scenario", "handshake")
    assert r.returncode == 1
    detail = report(r)["handshake"]["detail"]
    assert "the TLS certificate of localhost is not trusted" in detail and "--ca FILE" in detail
    r, _ = conform(url, "--json", "--ca", ca)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {n for n, s in report(r).items() if s["status"] != "pass"} == NEEDS_TOPIC


# -- broken ws peers -----------------------------------------------------------------------

@pytest.fixture
def server():
    yield from servers(close_after=True)


def read_head(c: socket.socket) -> tuple[str, dict[str, str]]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(ln.split(":", 1) for ln in lines[1:])
    return lines[0], {k.strip().lower(): v.strip() for k, v in headers.items()}


def answer(c: socket.socket, status: str, body: str = "", extra: str = "") -> None:
    c.sendall(f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
              f"{extra}\r\n{body}".encode())


def lax_upgrader(c: socket.socket) -> None:
    """101 to any upgrade, naming no subprotocol; 200 to the health check."""
    line, headers = read_head(c)
    if "sec-websocket-key" in headers:
        accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode()
                                               + WS_GUID).digest()).decode()
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                  b"connection: Upgrade\r\nsec-websocket-accept: " + accept.encode()
                  + b"\r\n\r\n")
        time.sleep(0.2)
    elif line.startswith("GET /healthz "):
        answer(c, "200 OK", "ok")
    else:
        answer(c, "404 Not Found")


def always_426(c: socket.socket) -> None:
    read_head(c)
    answer(c, "426 Upgrade Required", "not here", "upgrade: websocket\r\n")


def test_a_peer_that_upgrades_without_the_subprotocol_fails(server):
    s = server(lax_upgrader)
    r, took = conform(s.url, "--json", "--timeout", "2s", "--scenario", "handshake",
                      "--scenario", "ws-healthz", "--scenario", "ws-no-subprotocol")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = report(r)
    assert {n: s["status"] for n, s in rep.items()} == {
        "handshake": "fail", "ws-healthz": "pass", "ws-no-subprotocol": "fail"}
    assert "accepted (101) a WebSocket upgrade that offers no subprotocol" in \
        rep["ws-no-subprotocol"]["detail"]
    assert "did not agree to the subprotocol awp.v0" in rep["handshake"]["detail"]
    assert took < 15


def test_a_peer_that_answers_426_to_everything_fails_every_dial(server):
    s = server(always_426)
    r, took = conform(s.url, "--json", "--timeout", "2s")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = report(r)
    assert {n for n, s in rep.items() if s["status"] == "fail"} == set(ALL) - {
        "ws-no-subprotocol"}, r.stdout
    assert rep["ws-no-subprotocol"]["detail"] == "HTTP 426"
    assert "refused the WebSocket upgrade: HTTP 426 (not here)" in rep["handshake"]["detail"]
    assert rep["ws-healthz"]["detail"] == "GET /healthz got HTTP 426 (not here), expected 200"
    assert "POST / got HTTP 426 (not here), expected 405" in rep["ws-other-request"]["detail"]
    assert took < len(ALL) * 2 + 15


def text_dropping_front(daemon_port: int):
    """A ws front to the daemon's plain TCP listener that loses every text frame."""
    def handle(c: socket.socket) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        lock = threading.Lock()
        up = socket.create_connection(("127.0.0.1", daemon_port), timeout=20)

        def down() -> None:  # the daemon's bytes, as binary messages
            try:
                while data := up.recv(65536):
                    with lock:
                        c.sendall(ws.send(BytesMessage(data)))
            except OSError:
                pass
            with lock:
                try:
                    c.sendall(ws.send(CloseConnection(code=1000)))
                except Exception:
                    pass

        with up:
            while data := c.recv(65536):
                with lock:
                    ws.receive_data(data)
                    events = list(ws.events())
                for ev in events:
                    if isinstance(ev, Request):
                        with lock:
                            c.sendall(ws.send(AcceptConnection(subprotocol="awp.v0")))
                        threading.Thread(target=down, daemon=True).start()
                    elif isinstance(ev, BytesMessage):
                        up.sendall(ev.data)
                    elif isinstance(ev, TextMessage):
                        pass  # the defect
                    elif isinstance(ev, CloseConnection):
                        up.shutdown(socket.SHUT_WR)
    return handle


def test_a_front_that_drops_text_frames_fails_ws_frames(server, make_node):
    node = make_node("d").start()
    s = server(text_dropping_front(node.port))
    r, took = conform(s.url, "--json", "--timeout", "2s", "--scenario", "ping",
                      "--scenario", "msg-ack", "--scenario", "ws-frames",
                      "--scenario", "ws-big-line")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = report(r)
    assert {n: s["status"] for n, s in rep.items()} == {
        "ping": "pass", "msg-ack": "pass", "ws-frames": "fail", "ws-big-line": "pass"}, r.stdout
    detail = rep["ws-frames"]["detail"]
    assert detail.startswith("expected ack of the msg in a text frame"), detail
    assert took < 20
