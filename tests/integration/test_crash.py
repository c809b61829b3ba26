"""kill -9 either side at random while messages flow both ways.

Afterwards each side must hold every message the other side committed to
send exactly once, in send order within each thread.  The sender's store is
the truth for "what was sent": a send call cut off by a kill may or may not
have been queued, and either is fine as long as the two stores agree.
"""

from __future__ import annotations

import random
import threading
import time

from nodes import Node, wait_for

from awp.localapi.client import ApiFailure, DaemonNotRunning

THREADS = 4
PER_DIRECTION = 1050
KILLS = 12


def _sender(src: Node, dst_key: str, ths: list[str], count: int, stop: threading.Event,
            errors: list) -> None:
    i = 0
    while i < count and not stop.is_set():
        th = ths[i % len(ths)]
        try:
            src.api("POST", "/v1/send", {"peer": dst_key, "th": th, "wait_ack": 0,
                                         "parts": [{"k": "text", "text": f"{src.name} #{i}"}]})
            i += 1
        except (DaemonNotRunning, ConnectionError, OSError, TimeoutError):
            time.sleep(0.02)  # the node is being restarted; the retry is a new message
        except ApiFailure as e:
            errors.append(e)
            return


def _out_ids(node: Node, peer: str) -> dict[str, list[str]]:
    recs = node.api("POST", "/v1/read", {"peer": peer, "n": 1_000_000, "mark": False})["records"]
    by: dict[str, list[str]] = {}
    for r in recs:
        if r["dir"] == "out" and r["t"] == "msg":
            by.setdefault(r["th"], []).append(r["id"])
    return by


def _in_ids(node: Node, peer: str) -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for r in node.inbound(peer=peer):
        if r["t"] == "msg":
            by.setdefault(r["th"], []).append(r["id"])
    return by


def test_kill9_both_sides_loses_and_duplicates_nothing(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    # One thread per slot, opened from both sides, so both directions share threads.
    ths = []
    for k in range(THREADS):
        ths.append(a.send(b.key, f"open {k}", subject=f"crash thread {k}")["th"])
    stop = threading.Event()
    errors: list = []
    senders = [
        threading.Thread(target=_sender, args=(a, b.key, ths, PER_DIRECTION, stop, errors)),
        threading.Thread(target=_sender, args=(b, a.key, ths, PER_DIRECTION, stop, errors)),
    ]
    for t in senders:
        t.start()
    rnd = random.Random(20261129)
    kills = 0
    try:
        while kills < KILLS:
            time.sleep(rnd.uniform(0.2, 0.7))
            victim = rnd.choice([a, b])
            victim.kill()
            kills += 1
            time.sleep(rnd.uniform(0.0, 0.3))
            victim.start()
        for t in senders:
            t.join(timeout=180)
    finally:
        stop.set()
    assert not errors, errors
    assert kills >= 10

    def drained() -> bool:
        return a.api("GET", "/v1/status")["queued"] == 0 and \
            b.api("GET", "/v1/status")["queued"] == 0

    wait_for(drained, 120, "both outboxes to drain", interval=0.2)

    for src, dst in ((a, b), (b, a)):
        sent = _out_ids(src, dst.key)
        got = _in_ids(dst, src.key)
        total = sum(len(v) for v in sent.values())
        assert total >= PER_DIRECTION, (src.name, total)
        assert set(sent) == set(got)
        for th in sent:
            # exactly once, and in send order (ids increase in send order)
            assert got[th] == sent[th], (src.name, th, len(sent[th]), len(got[th]))
            assert got[th] == sorted(got[th])
