"""CLI readers mark read only what they printed: a reader killed before printing loses nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import pytest
from nodes import ROOT, Node, queued_to, wait_for


@pytest.fixture(scope="module")
def pair():
    root = tempfile.mkdtemp(prefix="awpr", dir="/tmp")
    a = Node(os.path.join(root, "a"), "alice").start()
    b = Node(os.path.join(root, "b"), "bob").start()
    b.connect(a)
    yield a, b
    a.kill()
    b.kill()
    shutil.rmtree(root, ignore_errors=True)


def awp(node: Node, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               AWP_HOME=node.home)
    return subprocess.Popen([sys.executable, "-m", "awp", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)


def unread(node: Node) -> list[dict]:
    return node.api("POST", "/v1/inbox", {"mark": False})["records"]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss to see the socket's queue")
def test_a_wait_killed_before_printing_loses_nothing(pair) -> None:
    a, b = pair
    a.api("POST", "/v1/inbox", {"mark": True})
    p = awp(a, "wait", "--timeout", "60s")
    try:
        wait_for(lambda: a.api("GET", "/v1/activity")["waiting"], 15, "awp wait is waiting")
        os.kill(p.pid, signal.SIGSTOP)
        res = b.send(a.key, "answered to a stopped wait", subject="Stopped wait")
        wait_for(lambda: queued_to(p.pid) > 0, 15, "the daemon answered the stopped wait")
    finally:
        p.kill()
        p.wait(10)
    assert [r["id"] for r in unread(a)] == [res["id"]]


def test_tail_mark_marks_each_record_once_printed(pair) -> None:
    a, b = pair
    a.api("POST", "/v1/inbox", {"mark": True})
    p = awp(a, "tail", "--mark", "--json")
    stop = threading.Event()

    def keep_sending() -> None:  # the stream starts at "now": send until one shows
        while not stop.is_set():
            b.send(a.key, "tailed", subject="Tail")
            stop.wait(0.2)

    sender = threading.Thread(target=keep_sending, daemon=True)
    sender.start()
    try:
        assert p.stdout is not None
        rec = json.loads(p.stdout.readline())
        assert rec["seq"] and "tailed" in json.dumps(rec)
        wait_for(lambda: rec["seq"] not in {r["seq"] for r in unread(a)}, 10,
                 "what tail printed is marked read")
    finally:
        stop.set()
        sender.join(10)
        p.kill()
        p.wait(10)
    a.api("POST", "/v1/inbox", {"mark": True})
