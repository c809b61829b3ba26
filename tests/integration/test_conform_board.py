"""`awp conform`'s board scenarios (SPEC.md section 14).

Against our daemon, which announces ``board``, every board scenario passes:
connect mode with an open topic (both digest openers, chosen through the
runner's key), a topic open to read but not to post, and listen mode.  A
topic a stranger may not read fails ``board-sync`` with a clear reason.

Then the same daemon behind a proxy that breaks one rule of the board at a
time (an err for a malformed line, a re-encoded or mis-hopped relay, a record
sent back to its sender, a topic relayed though not subscribed, a digest
before the topic document, a lease for someone else's topic, a malformed
board-sub): each fails exactly the scenarios it should.  A peer without cap
``board`` has every board scenario skipped.  Last, the board line schema on
its own.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from fixtures.conformrun import conform_env, run_conform, scenarios_of
from nodes import ROOT, free_port, wait_for

from awp.conform import runner
from awp.conform.boardschema import check_board, check_board_size
from awp.conform.scenarios import SCENARIOS
from awp.conform.schema import decode
from awp.wire import board as wb
from awp.wire.canonical import compact_json
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts, now_ms

BOARD = [s.name for s in SCENARIOS if s.name.startswith("board-")]
OWNERS = {n for n in BOARD if n.startswith("board-owner-")}  # skipped without --owner-run
IDS = IdGenerator()


env = conform_env


def conform(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_conform(*args, timeout=timeout)[0]


board_report = scenarios_of


def only_board(*extra: str) -> list[str]:
    return [a for name in BOARD for a in ("--scenario", name)] + list(extra)


def open_topic(node, name: str = "ops", **policy) -> str:
    body = {"name": name, "read": "open", "post": "open", **policy}
    topic = node.api("POST", "/v1/board/topic", body)["topic"]["topic"]
    for i in range(3):
        node.api("POST", "/v1/board/post",
                 {"topic": name, "parts": [{"k": "text", "text": f"earlier post {i}"}]})
    return topic


def texts(node, name: str) -> list[str]:
    return [p["text"] for p in node.api("POST", "/v1/board/get", {"topic": name, "n": 0})["posts"]]


# -- our daemon -------------------------------------------------------------------------------


def test_daemon_passes_every_board_scenario(make_node):
    node = make_node("d").start()
    topic = open_topic(node)
    sub = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "awp", "subscribe", "--home",
                                            node.home, "--once", "--timeout", "1s"])
    r = conform(node.address, "--json", "--board-topic", topic, "--owner-run",
                sub + " {topic}", *only_board())
    assert r.returncode == 0, r.stdout + r.stderr
    rep = board_report(r)
    assert {n: s["status"] for n, s in rep.items()} == dict.fromkeys(BOARD, "pass"), rep
    assert "refused" in rep["board-owner-forged-author"]["detail"]
    assert "kept and passed on" in rep["board-owner-equivocates"]["detail"]
    assert "old head ignored" in rep["board-owner-heads"]["detail"]
    # the runner's dishonest topics are caught on the daemon too
    shown = node.api("GET", "/v1/board/topics")["topics"]
    assert any(t["equivocated"] for t in shown), shown
    assert "3 record(s)" in rep["board-sync"]["detail"] and "converged" in rep["board-sync"]["detail"]
    assert rep["board-relay"]["detail"].startswith("relayed in"), rep["board-relay"]
    assert rep["board-stamp"]["detail"].startswith("stamped as seq"), rep["board-stamp"]
    assert "not a queue of this host's" in rep["board-unknown-topic"]["detail"]
    # board-relay and board-stamp deleted their posts again: the topic shows what it showed
    assert texts(node, "ops") == [f"earlier post {i}" for i in range(3)]
    assert node.proc.poll() is None


@pytest.mark.parametrize("runner_smaller", [True, False])
def test_board_sync_with_either_side_opening(make_node, monkeypatch, runner_smaller):
    """The smaller key opens the digest exchange: run with a runner key on each side."""
    node = make_node("d").start()
    topic = open_topic(node)
    while True:
        ident = Identity.generate()
        if (ident.key < node.key) == runner_smaller:
            break
    monkeypatch.setattr(runner.Identity, "generate", staticmethod(lambda: ident))
    chosen = runner.select_scenarios(["board-sync"])
    rep = runner.run_connect(node.address, chosen, timeout=15, board_topic=topic)
    res = rep.results[0]
    assert res.status == "pass", res
    assert ("we opened" if runner_smaller else "the peer opened") in res.detail, res.detail
    assert rep.runner_key == ident.key


def test_topic_open_to_read_only(make_node):
    node = make_node("d").start()
    topic = open_topic(node, post="grant")
    r = conform(node.address, "--json", "--board-topic", topic, "--scenario", "board-relay",
                "--scenario", "board-sync", "--scenario", "board-stamp")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = board_report(r)
    assert rep["board-relay"]["status"] == "pass"
    assert "not open to post" in rep["board-relay"]["detail"]
    assert "refused, signed by the owner" in rep["board-stamp"]["detail"], rep["board-stamp"]
    assert rep["board-sync"]["status"] == "pass"


def test_topic_a_stranger_may_not_read(make_node):
    """The document goes to every subscriber, the records only to readers."""
    node = make_node("d").start()
    topic = open_topic(node, read="grant", post="grant")
    r = conform(node.address, "--json", "--board-topic", topic, "--scenario", "board-sync",
                "--scenario", "board-relay")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = board_report(r)
    assert "its document comes and its records and digests do not" in rep["board-sync"]["detail"]
    assert "not open to post" in rep["board-relay"]["detail"]


def test_listen_mode_a_later_board_sub_is_answered_by_the_peer(make_node):
    """On a shared connection board-sync's board-sub is not the first: the peer opens."""
    node = make_node("d").start()
    topic = open_topic(node)
    cmd = " ".join(shlex.quote(a) for a in
                   [sys.executable, "-m", "awp", "connect", "--home", node.home, "{addr}"])
    r = conform("--listen", "tcp:127.0.0.1:0", "--run", cmd, "--json", "--board-topic", topic,
                "--scenario", "handshake", "--scenario", "board-unknown-topic",
                "--scenario", "board-sync")
    assert r.returncode == 0, r.stdout + r.stderr
    detail = board_report(r)["board-sync"]["detail"]
    assert "the peer opened (a later board-sub)" in detail, detail


def test_listen_mode_runs_board_sync_on_the_shared_connection(make_node):
    node = make_node("d").start()
    topic = open_topic(node)
    cmd = " ".join(shlex.quote(a) for a in
                   [sys.executable, "-m", "awp", "connect", "--home", node.home, "{addr}"])
    r = conform("--listen", "tcp:127.0.0.1:0", "--run", cmd, "--json", "--board-topic", topic)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = board_report(r)
    assert {n: rep[n]["status"] for n in BOARD} == {
        "board-unknown-topic": "pass", "board-malformed": "pass", "board-sync": "pass",
        "board-unsubscribed": "skip", "board-relay": "skip", "board-stamp": "skip",
        **dict.fromkeys(OWNERS, "skip")}


def test_usage_errors_of_board_topic():
    for bad in ("ops", "alice/ops", "ed25519:short/ops", "ed25519:" + "A" * 43 + "/Bad Name"):
        r = conform("tcp:127.0.0.1:1", "--board-topic", bad)
        assert r.returncode == 2, (bad, r.stdout, r.stderr)
        assert "--board-topic" in r.stderr and "full topic" in r.stderr, r.stderr


def test_peer_without_board_skips_the_board_scenarios(tmp_home_root):
    addr = f"tcp:127.0.0.1:{free_port()}"
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "interop", "minipeer.py"), "--state",
                          os.path.join(tmp_home_root, "mp.json"), "--listen", addr],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        host, port = addr[4:].rsplit(":", 1)
        wait_for(lambda: _reachable(host, int(port)), 10, "minipeer listening")
        r = conform(addr, "--json", "--board-topic", "ed25519:" + "A" * 43 + "/ops",
                    *only_board())
    finally:
        p.kill()
        p.wait(5)
    assert r.returncode == 0, r.stdout + r.stderr
    for name, s in board_report(r).items():
        assert (s["status"], s["detail"]) == ("skip", "the peer does not list cap board"), name


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


# -- our daemon behind a proxy that breaks one rule ----------------------------------------------


class Proxy:
    """Line-by-line TCP proxy in front of a daemon; ``defect`` rewrites the traffic.

    ``down(line, conn)`` gets each line the daemon sends (decoded) and returns
    the lines to pass to the runner instead; ``up(line, conn)`` does the same
    for the runner's lines and may also push lines back to the runner with
    ``conn.to_runner``.  After the handshake no line is signed, so a proxy can
    make a well-behaved daemon misbehave in exactly one way.
    """

    def __init__(self, target_port: int, down: Callable | None = None,
                 up: Callable | None = None) -> None:
        self.target_port = target_port
        self.down = down or (lambda line, conn: [line])
        self.up = up or (lambda line, conn: [line])
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.address = f"tcp:127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = threading.Event()
        self.conns: list[ProxyConn] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(ProxyConn(self, c))

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()
        for c in self.conns:
            c.close()


class ProxyConn:
    def __init__(self, proxy: Proxy, runner_sock: socket.socket) -> None:
        self.proxy = proxy
        self.runner = runner_sock
        self.daemon = socket.create_connection(("127.0.0.1", proxy.target_port))
        self.lock = threading.Lock()
        threading.Thread(target=self._pump, args=(self.daemon, self.runner, proxy.down),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.runner, self.daemon, proxy.up),
                         daemon=True).start()

    def to_runner(self, line: dict | bytes) -> None:
        data = line if isinstance(line, bytes) else compact_json(line).encode()
        with self.lock:
            try:
                self.runner.sendall(data + b"\n")
            except OSError:
                pass

    def _pump(self, src: socket.socket, dst: socket.socket, fix: Callable) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    try:
                        line = json.loads(raw)
                    except ValueError:
                        line = None
                    if not isinstance(line, dict) or line.get("t") in ("hello", "auth"):
                        outs = [raw]  # the handshake passes untouched (auth signs the hellos)
                    else:
                        outs = [x if isinstance(x, bytes) else compact_json(x).encode()
                                for x in fix(line, self)]
                    for out in outs:
                        if dst is self.runner:
                            self.to_runner(out)
                        else:
                            dst.sendall(out + b"\n")
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        for s in (self.runner, self.daemon):
            try:
                s.close()
            except OSError:
                pass


def _valid(line: dict) -> bool:
    recs = line.get("recs")
    hops = line.get("hops")
    if not isinstance(recs, list) or not isinstance(hops, int) or not 0 <= hops < 7:
        return False
    try:
        for doc in recs:
            wb.check_record(compact_json(doc))
    except (wb.BoardError, TypeError, ValueError):
        return False
    return True


def _err_for_malformed(line: dict, conn: ProxyConn) -> list[dict]:
    if line.get("t") == "board-sub" and not isinstance(line.get("topics"), list):
        conn.to_runner({"t": "err", "id": IDS.next(), "ts": format_ts(now_ms()),
                        "code": "bad_frame", "detail": "topics is not a list"})
    return [line]


def _reencode(line: dict, conn: ProxyConn) -> list:
    if line.get("t") == "board-posts":
        return [json.dumps(line, sort_keys=True).encode()]  # spaces, sorted keys
    return [line]


def _same_hops(line: dict, conn: ProxyConn) -> list[dict]:
    if line.get("t") == "board-posts" and line.get("hops") == 1:
        return [dict(line, hops=0)]
    return [line]


def _echo(line: dict, conn: ProxyConn) -> list[dict]:
    if line.get("t") == "board-posts" and _valid(line):
        conn.to_runner(dict(line, id=IDS.next(), hops=line["hops"] + 1))
    return [line]


def _leak(line: dict, conn: ProxyConn) -> list[dict]:
    if line.get("t") == "board-posts" and _valid(line):
        for other in conn.proxy.conns:
            if other is not conn:
                other.to_runner(dict(line, id=IDS.next(), hops=line["hops"] + 1))
    return [line]


def _digest_first(line: dict, conn: ProxyConn) -> list[dict]:
    doc = line.get("doc")
    if line.get("t") == "board-topic" and isinstance(doc, dict):
        return [{"t": "board-digest", "id": IDS.next(), "ts": format_ts(now_ms()),
                 "topic": doc.get("topic"), "floor": 0, "ranges": []}, line]
    return [line]


STRANGER = Identity.generate()


def _lease_for_stranger(line: dict, conn: ProxyConn) -> list[dict]:
    topic = line.get("topic")
    if line.get("t") == "board-claim" and line.get("op") == "claim" and isinstance(topic, str):
        try:
            owner = wb.parse_topic(topic)[0]
        except wb.BoardError:
            return [line]
        if owner != STRANGER.key:
            # a lease record shaped right, signed by a key that is not the owner's
            lease = {"k": "lease", "topic": topic, "author": owner, "ts": format_ts(now_ms()),
                     "of": "0" * 32, "holder": STRANGER.key, "state": "claimed",
                     "lease": "x.1", "until": format_ts(now_ms() + 60_000),
                     "sig": STRANGER.sign(b"not the record")}
            conn.to_runner({"t": "board-lease", "id": IDS.next(), "ts": format_ts(now_ms()),
                            "topic": topic, "re": line["id"], "doc": lease})
    return [line]


def _bad_sub(line: dict, conn: ProxyConn) -> list[dict]:
    if line.get("t") == "board-sub":
        return [dict(line, topics=[{"topic": "ops"}])]
    return [line]


@pytest.mark.parametrize("defect, down, up, expected, words", [
    ("err-for-malformed", None, _err_for_malformed, {"board-malformed"},
     "expected no err for malformed board lines"),
    ("re-encoded relay", _reencode, None, {"board-relay"}, "re-encoded, not in its signer's"),
    ("hops not raised", _same_hops, None, {"board-relay"}, "with hops 0"),
    ("echo to the sender", None, _echo, {"board-unsubscribed", "board-relay"}, "back to us"),
    ("relays what it does not subscribe to", None, _leak,
     {"board-unsubscribed", "board-relay"}, "relayed it to another subscriber"),
    ("digest before the document", _digest_first, None,
     {"board-sync", "board-relay", "board-stamp"},
     "before its board-topic"),
    ("lease for a topic it does not own", None, _lease_for_stranger, {"board-unknown-topic"},
     "only the owner arbitrates"),
    ("malformed board-sub", _bad_sub, None, set(BOARD) - OWNERS,
     "board-sub.topics[0].topic is not a topic"),
])
def test_a_broken_board_peer_fails_exactly_the_right_scenarios(make_node, defect, down, up,
                                                                 expected, words):
    node = make_node("d").start()
    topic = open_topic(node)
    proxy = Proxy(node.port, down, up)
    try:
        r = conform(proxy.address, "--json", "--timeout", "5s", "--board-topic", topic,
                    *only_board())
    finally:
        proxy.close()
    rep = board_report(r)
    assert r.returncode == 1, r.stdout
    assert {n for n, s in rep.items() if s["status"] == "fail"} == expected, r.stdout
    assert all(rep[n]["status"] == ("skip" if n in OWNERS else "pass")
               for n in BOARD if n not in expected), r.stdout
    assert any(words in rep[n]["detail"] for n in expected), r.stdout


# -- the board line schema -------------------------------------------------------------------


OWNER = Identity.generate()
TOPIC = f"{OWNER.key}/ops"


def env_line(**fields) -> dict:
    return {"t": fields.pop("t"), "id": IDS.next(), "ts": format_ts(now_ms()), **fields}


def test_well_formed_board_lines_pass_the_schema():
    doc = wb.make_topic(OWNER, "ops", 1, now_ms(), read="open")
    post = wb.make_post(OWNER, TOPIC, [{"k": "text", "text": "hi"}], now_ms())
    lease = wb.make_lease(OWNER, TOPIC, post.hash, OWNER.key, "claimed", "x.1", now_ms(),
                          now_ms())
    good = [
        env_line(t="board-sub", topics=[{"topic": TOPIC}, {"topic": TOPIC, "grant": {}}],
                 drop=[TOPIC]),
        env_line(t="board-sub", topics=[], drop=[]),
        env_line(t="board-topic", hops=0, doc=doc.doc),
        env_line(t="board-posts", topic=TOPIC, hops=7, recs=[post.doc, lease.doc]),
        env_line(t="board-digest", topic=TOPIC, floor=0, ranges=[
            {"lo": 0, "hi": 10, "n": 0, "fp": "0" * 24}, {"lo": 10, "hi": 20, "ids": [post.hash]},
            {"lo": 20, "hi": 30, "ask": True}]),
        env_line(t="board-want", topic=TOPIC, ids=[post.hash]),
        env_line(t="board-claim", topic=TOPIC, op="claim", req="r1"),
        env_line(t="board-claim", topic=TOPIC, op="complete", lease="x.1"),
        env_line(t="board-lease", topic=TOPIC, re=IDS.next(), doc=lease.doc),
        env_line(t="board-lease", topic=TOPIC, re=IDS.next(), error="empty"),
        env_line(t="board-future-line", anything=[1]),
    ]
    for line in good:
        obj, problems = decode(compact_json(line).encode())
        assert obj is not None and problems == [], (line["t"], problems)


@pytest.mark.parametrize("fields, problem", [
    ({"t": "board-sub"}, "neither 'topics' nor 'drop'"),
    ({"t": "board-sub", "topics": [TOPIC]}, "is not an object {topic"),
    ({"t": "board-sub", "topics": [{"topic": "ops"}]}, "board-sub.topics[0].topic is not a topic"),
    ({"t": "board-sub", "topics": [{"topic": TOPIC}] * 257}, "lists 257 topics"),
    ({"t": "board-sub", "drop": "ops"}, "board-sub.drop is not a list"),
    ({"t": "board-topic", "hops": 0, "doc": {"k": "topic"}}, "board-topic.doc is not a valid"),
    ({"t": "board-topic", "hops": 9, "doc": {}}, "beyond the 8-hop limit"),
    ({"t": "board-topic", "doc": {}}, "without a non-negative integer 'hops'"),
    ({"t": "board-posts", "topic": TOPIC, "hops": 0}, "without a list 'recs'"),
    ({"t": "board-posts", "topic": "x", "hops": 0, "recs": []}, "board-posts.topic is not a"),
    ({"t": "board-digest", "topic": TOPIC, "ranges": []}, "without an integer 'floor'"),
    ({"t": "board-digest", "topic": TOPIC, "floor": 0, "ranges": [{"lo": 5, "hi": 5, "ask": True}]},
     "empty or reversed"),
    ({"t": "board-digest", "topic": TOPIC, "floor": 0, "ranges": [{"lo": 0, "hi": 5, "n": 1,
                                                                   "fp": "XYZ"}]},
     "fp is not 24 lowercase hex"),
    ({"t": "board-digest", "topic": TOPIC, "floor": 0, "ranges": [{"lo": 0, "hi": 5}]},
     "neither ids, ask nor a summary"),
    ({"t": "board-digest", "topic": TOPIC, "floor": 0,
      "ranges": [{"lo": 0, "hi": 5, "ids": ["a" * 32] * 4097}]}, "lists 4097 hashes"),
    ({"t": "board-want", "topic": TOPIC, "ids": ["A" * 32]}, "not a list of record hashes"),
    ({"t": "board-claim", "topic": TOPIC, "op": "take"}, "board-claim.op is not one of"),
    ({"t": "board-claim", "topic": TOPIC, "op": "renew"}, "without a string 'lease'"),
    ({"t": "board-lease", "topic": TOPIC, "re": "r"}, "neither or both of 'doc' and 'error'"),
    ({"t": "board-lease", "topic": TOPIC, "error": "x"}, "without 're'"),
])
def test_board_line_problems_are_named(fields, problem):
    problems = check_board(fields["t"], fields)
    assert any(problem in p for p in problems), problems


def test_board_records_must_verify_and_match_the_line():
    post = wb.make_post(OWNER, TOPIC, [{"k": "text", "text": "hi"}], now_ms())
    forged = dict(post.doc, parts=[{"k": "text", "text": "changed"}])
    other = wb.make_post(OWNER, f"{OWNER.key}/other", [{"k": "text", "text": "x"}], now_ms())
    p = check_board("board-posts", {"topic": TOPIC, "hops": 0,
                                    "recs": [post.doc, forged, other.doc]})
    assert len(p) == 2, p
    assert "recs[1] is not a valid record (signature does not verify)" in p[0]
    assert f"recs[2] belongs to topic {OWNER.key}/other" in p[1]
    lease_kind = check_board("board-lease", {"topic": TOPIC, "re": "r", "doc": post.doc})
    assert any("is a 'post' record, not 'lease'" in x for x in lease_kind), lease_kind


def test_board_posts_line_size():
    assert check_board_size("board-posts", 512 * 1024 - 1) == []
    assert "stays under 512 KiB" in check_board_size("board-posts", 512 * 1024)[0]
    assert check_board_size("board-digest", 10 ** 6) == []
