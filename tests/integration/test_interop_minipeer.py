"""Our daemon against interop/minipeer.py, an independent peer written from SPEC.md.

Both ways (the daemon dials the minipeer; the minipeer dials the daemon), msgs
in both directions with acks, and resume across a minipeer kill -9: what the
daemon queued meanwhile is delivered exactly once, and what the minipeer
queued while away reaches the daemon.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from nodes import ROOT, free_port, wait_for

MINIPEER = os.path.join(ROOT, "interop", "minipeer.py")


class MiniPeer:
    """A minipeer process; its JSON-line events are collected by a reader thread."""

    def __init__(self, state: str, *args: str) -> None:
        self.events: list[dict] = []
        self._tags = 0
        self._q: queue.Queue = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, MINIPEER, "--state", state, "--stdin", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, cwd=ROOT)
        threading.Thread(target=self._read, daemon=True).start()
        first = self.wait_event(lambda e: e["event"] in ("listening", "dialing"), 10)
        self.key = first["key"]
        self.addr = first.get("addr", "")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._q.put(json.loads(line))
            except ValueError:
                self._q.put({"event": "output", "text": line.rstrip()})

    def wait_event(self, pred, timeout: float = 15.0) -> dict:
        """The first event (seen before or arriving) that satisfies ``pred``."""
        for e in self.events:
            if pred(e):
                return e
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching minipeer event in {timeout}s; "
                                     f"events: {self.events[-15:]}")
            try:
                e = self._q.get(timeout=left)
            except queue.Empty:
                continue
            self.events.append(e)
            if pred(e):
                return e

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.events.append(self._q.get(timeout=max(0.01, end - time.monotonic())))
            except queue.Empty:
                pass

    def command(self, **cmd: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def send(self, text: str, to: str, th: str | None = None) -> dict:
        """Queue a msg through stdin; returns its "queued" event (with the id)."""
        self._tags += 1
        tag = f"t{self._tags}"
        self.command(cmd="send", text=text, to=to, tag=tag, **({"th": th} if th else {}))
        return self.wait_event(lambda e: e["event"] == "queued" and e.get("tag") == tag, 10)

    def msgs(self, text: str | None = None) -> list[dict]:
        return [e for e in self.events if e["event"] == "msg"
                and (text is None or e["line"]["parts"][0]["text"] == text)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


@pytest.fixture
def minipeers(tmp_home_root):
    started: list[MiniPeer] = []

    def start(name: str, *args: str) -> MiniPeer:
        mp = MiniPeer(os.path.join(tmp_home_root, name + ".json"), *args)
        started.append(mp)
        return mp

    yield start
    for mp in started:
        mp.kill()


def texts_in(node, peer: str) -> list[str]:
    return [r["line"]["parts"][0]["text"] for r in node.inbound(peer=peer) if r["t"] == "msg"]


def queued_for(node, key: str) -> int:
    for p in node.api("GET", "/v1/status")["peers"]:
        if p["key"] == key:
            return p["queued"]
    return 0


def exchange(node, mp: MiniPeer) -> None:
    """A msg each way, each acked by the receiver, plus a state from the daemon."""
    res = node.send(mp.key, "from the daemon", wait_ack=10)
    assert res["acked"], res
    got = mp.wait_event(lambda e: e["event"] == "msg" and e["line"]["id"] == res["id"])
    assert got["line"]["th"] == res["th"]
    assert got["line"]["parts"] == [{"k": "text", "text": "from the daemon"}]

    queued = mp.send("from the minipeer", to=node.key, th=res["th"])
    mp.wait_event(lambda e: e["event"] == "ack" and e["re"] == queued["id"])
    wait_for(lambda: "from the minipeer" in texts_in(node, mp.key), 10, "daemon stored it")

    st = node.api("POST", "/v1/state", {"peer": mp.key, "th": res["th"], "state": "done"})
    mp.wait_event(lambda e: e["event"] == "state" and e["line"]["id"] == st["id"])
    wait_for(lambda: queued_for(node, mp.key) == 0, 10, "daemon outbox empty")


def test_daemon_dials_minipeer(make_node, minipeers):
    node = make_node("d").start()
    mp = minipeers("mp", "--listen", "tcp:127.0.0.1:0")
    res = node.api("POST", "/v1/connect", {"target": mp.addr, "timeout": 10})
    assert res["key"] == mp.key
    conn = mp.wait_event(lambda e: e["event"] == "connected")
    assert conn["peer"] == node.key and conn["outbound"] is False
    exchange(node, mp)


def test_minipeer_dials_daemon(make_node, minipeers):
    node = make_node("d").start()
    mp = minipeers("mp", "--dial", node.address)
    conn = mp.wait_event(lambda e: e["event"] == "connected")
    assert conn["peer"] == node.key and conn["outbound"] is True
    exchange(node, mp)


def test_minipeer_dials_daemon_over_unix_socket(make_node, minipeers):
    node = make_node("d", unix=True).start()
    mp = minipeers("mp", "--dial", node.address)
    mp.wait_event(lambda e: e["event"] == "connected")
    exchange(node, mp)


def test_resume_after_minipeer_kill_listening(make_node, minipeers):
    """Daemon dials; the minipeer is killed; the daemon queues; the minipeer
    comes back on the same address and the daemon redials and replays."""
    node = make_node("d").start()
    addr = f"tcp:127.0.0.1:{free_port()}"
    mp = minipeers("mp", "--listen", addr)
    node.api("POST", "/v1/connect", {"target": addr, "timeout": 10})
    first = node.send(mp.key, "before the kill", wait_ack=10)
    assert first["acked"]
    th = first["th"]
    mp.kill()
    wait_for(lambda: not node.peer_state(mp.key).startswith("connected"), 10, "daemon saw the drop")
    sent = [node.send(mp.key, f"queued {i}", th=th)["id"] for i in range(3)]
    other = node.send(mp.key, "queued in a new thread")["id"]

    mp2 = minipeers("mp", "--listen", addr, "--send", "queued by the minipeer",
                    "--to", node.key, "--thread", th)
    assert mp2.key == mp.key  # same state file, same identity
    for ident in [*sent, other]:
        mp2.wait_event(lambda e, i=ident: e["event"] == "msg" and e["line"]["id"] == i, 20)
    wait_for(lambda: "queued by the minipeer" in texts_in(node, mp.key), 15,
             "minipeer's queued msg reached the daemon")
    wait_for(lambda: queued_for(node, mp.key) == 0, 10, "daemon outbox empty")
    mp2.drain(1.0)
    ids = [e["line"]["id"] for e in mp2.msgs()]
    assert sorted(ids) == sorted([*sent, other]), ids  # exactly once, nothing old again
    # Order within the thread is kept.
    in_thread = [e["line"]["id"] for e in mp2.msgs() if e["line"]["th"] == th]
    assert in_thread == sent
    assert texts_in(node, mp.key).count("queued by the minipeer") == 1


def test_resume_after_minipeer_kill_dialing(make_node, minipeers):
    """The minipeer dials; it is killed; the daemon queues; it dials again."""
    node = make_node("d").start()
    mp = minipeers("mp", "--dial", node.address)
    mp.wait_event(lambda e: e["event"] == "connected")
    first = node.send(mp.key, "before the kill", wait_ack=10)
    assert first["acked"]
    mp.kill()
    wait_for(lambda: not node.peer_state(mp.key).startswith("connected"), 10, "drop seen")
    sent = [node.send(mp.key, f"while away {i}", th=first["th"])["id"] for i in range(3)]

    mp2 = minipeers("mp", "--dial", node.address)
    for ident in sent:
        mp2.wait_event(lambda e, i=ident: e["event"] == "msg" and e["line"]["id"] == i, 20)
    wait_for(lambda: queued_for(node, mp.key) == 0, 10, "daemon outbox empty")
    mp2.drain(1.0)
    assert [e["line"]["id"] for e in mp2.msgs()] == sent

    # Kill and restart once more with nothing queued: nothing is delivered again.
    mp2.kill()
    mp3 = minipeers("mp", "--dial", node.address)
    mp3.wait_event(lambda e: e["event"] == "connected")
    mp3.drain(1.5)
    assert mp3.msgs() == []


def test_duplicate_from_minipeer_replay_is_stored_once(make_node, minipeers):
    """A msg the minipeer replays (its outbox survived, the ack did not arrive)
    is acked again by the daemon and stored once."""
    node = make_node("d").start()
    mp = minipeers("mp", "--dial", node.address, "--send", "replayed line")
    mp.wait_event(lambda e: e["event"] == "connected")
    q = next(e for e in mp.events if e["event"] == "queued")
    mp.wait_event(lambda e: e["event"] == "ack" and e["re"] == q["id"])
    wait_for(lambda: texts_in(node, mp.key) == ["replayed line"], 10, "stored")
    # Put the line back in the minipeer's outbox, as if the ack had been lost.
    mp.kill()
    path = mp.proc.args[mp.proc.args.index("--state") + 1]
    with open(path) as f:
        data = json.load(f)
    sent_line = {"t": "msg", "id": q["id"], "ts": "2026-01-01T00:00:00.000Z", "th": q["th"],
                 "parts": [{"k": "text", "text": "replayed line"}]}
    data["peers"][node.key]["outbox"] = [sent_line]
    with open(path, "w") as f:
        json.dump(data, f)
    mp2 = minipeers("mp", "--dial", node.address)
    mp2.wait_event(lambda e: e["event"] == "connected")
    # The daemon's resume lists the thread with that id, so the minipeer drops
    # it without sending; either way the daemon must not store it twice.
    mp2.wait_event(lambda e: e["event"] == "ack" and e["re"] == q["id"], 20)
    mp2.drain(0.5)
    assert texts_in(node, mp.key) == ["replayed line"]
