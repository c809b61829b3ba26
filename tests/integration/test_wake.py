"""Reaching a peer that sleeps: fast redial while it wakes, and a daemon that
notices its own pause (awp/node/wake.py, awp/node/pausewatch.py).

Real daemons on loopback; the sandbox platform is tests/fixtures/wakeproxy.py
in front of one daemon's listener.  Every wait is on a condition with a
deadline; the only sleeps are the scenario's own (a peer that comes up 5 s
late, a pause that lasts a few seconds).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from datetime import datetime

from fixtures.wakeproxy import WakeProxy
from nodes import wait_for

DELIVERY = 15.0  # deadline for what should take a second or two, on a busy machine


def _texts(node, peer: str) -> Counter:
    """How many inbound records from ``peer`` carry each text."""
    return Counter(r["line"]["parts"][0]["text"] for r in node.inbound(peer=peer)
                   if r["t"] == "msg")


def _has_all(node, peer: str, texts: list[str]) -> bool:
    got = _texts(node, peer)
    return all(got[t] for t in texts)


def _connected(node, key: str) -> bool:
    return node.peer_state(key).startswith("connected")


def _log_lines(node, pattern: str) -> list[str]:
    with open(node.log_path, errors="replace") as f:
        return [ln for ln in f if re.search(pattern, ln)]


REFUSED = r"redial \S+ (via \S+ )?failed"


def _stamps(node, pattern: str) -> list[float]:
    """When the daemon logged each line matching ``pattern`` (its log's asctime)."""
    return [datetime.strptime(ln[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for ln in _log_lines(node, pattern)]


def _config(node, **cfg: object):
    os.makedirs(node.home, mode=0o700, exist_ok=True)
    with open(os.path.join(node.home, "config.json"), "w") as f:
        json.dump(cfg, f)
    return node


def test_a_peer_that_comes_up_late_is_reached_within_a_fast_retry(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    first = a.send(b.key, "before")
    wait_for(lambda: _has_all(b, a.key, ["before"]), DELIVERY, "the first line")
    b.kill()  # gone without a bye: its port refuses now
    wait_for(lambda: not _connected(a, b.key), DELIVERY, "a sees b go")
    before = len(_stamps(a, REFUSED))
    a.send(b.key, "while b was down", th=first["th"])  # kicks: a dial now, backoff reset
    time.sleep(5)  # the scenario: b comes up 5 s late
    refusals = _stamps(a, REFUSED)[before:]
    b.start()  # back on the same port
    up = time.monotonic()
    wait_for(lambda: _has_all(b, a.key, ["while b was down"]), DELIVERY, "the queued line")
    took = time.monotonic() - up
    # The ordinary backoff (1, 2, 4 s, jittered to 1.5x) may wait 6 s here.
    assert took <= 3.0, (took, a.tail_log())
    # 0.5, 1, 2, 2 s between refusals; the ordinary backoff's third wait is 2-6 s.
    gaps = [y - x for x, y in zip(refusals, refusals[1:], strict=False)]
    assert len(refusals) >= 3 and max(gaps) <= 2.5, (gaps, a.tail_log())
    assert _texts(b, a.key) == Counter({"before": 1, "while b was down": 1})


def test_a_dial_wakes_a_paused_peer_behind_the_platform(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    with WakeProxy(b.port, b.proc.pid, wake_time=0.75, wake_on_dial=False) as w:
        a.api("POST", "/v1/connect", {"target": w.address, "timeout": 20})
        a.send(b.key, "awake")
        wait_for(lambda: _has_all(b, a.key, ["awake"]), DELIVERY, "the first line")
        w.pause()  # cuts the link, SIGSTOPs b; dials are refused and do not wake yet
        wait_for(lambda: not _connected(a, b.key), DELIVERY, "a sees the link cut")
        queued = [f"queued {i}" for i in range(20)]
        for text in queued:
            a.send(b.key, text)  # each kicks the redial: a dial now, backoff reset
        # Let the streak run on: five refusals take ~5.5 s fast (0.5, 1, 2, 2) and
        # at least 7.5 s ordinary (1, 2, 4, 8 jittered), whose next wait is 8-24 s.
        before = len(_stamps(a, REFUSED))
        wait_for(lambda: len(_stamps(a, REFUSED)) - before >= 5, DELIVERY, "five refusals")
        w.arm()  # a's next fast retry wakes b
        wait_for(lambda: w.wakes == 1, DELIVERY, "a's dial wakes b")
        wait_for(lambda: _has_all(b, a.key, queued), DELIVERY, "the queued lines")
        done = time.monotonic()
        assert w.refused >= 1  # the waking dial itself was refused
        # Refused for the wake time, then within a fast retry (at most ~2.2 s).
        assert done - w.woke_at <= w.wake_time + 2.5, (done - w.woke_at, a.tail_log())
    assert _texts(b, a.key) == Counter({t: 1 for t in ["awake", *queued]})


def test_a_paused_daemon_drops_dead_links_and_redials_at_once(make_node):
    """b is SIGSTOPped and its link cut; on SIGCONT it notices the pause and
    dials a itself at once (the platform still refuses a's dials), instead of
    waiting out the dial-back grace of 15 s; everything queued on either side
    is delivered exactly once."""
    a = make_node("a").start()
    b = _config(make_node("b"), pause_gap="2s").start()
    with WakeProxy(b.port, b.proc.pid, wake_on_dial=False) as w:
        a.api("POST", "/v1/connect", {"target": w.address, "timeout": 20})
        a_before = [f"a before {i}" for i in range(5)]
        b_before = [f"b before {i}" for i in range(5)]
        for text in a_before:
            a.send(b.key, text)
        for text in b_before:
            b.send(a.key, text)
        wait_for(lambda: _has_all(b, a.key, a_before) and _has_all(a, b.key, b_before),
                 DELIVERY, "both ways before the pause")
        a.send(b.key, "a just before")  # may be in flight when the link is cut
        w.pause()
        wait_for(lambda: not _connected(a, b.key), DELIVERY, "a sees the link cut")
        a_while = [f"a while b slept {i}" for i in range(10)]
        for text in a_while:
            a.send(b.key, text)
        time.sleep(4)  # the scenario: b sleeps twice its pause_gap
        w.resume()  # SIGCONT only: the proxy keeps refusing a's dials
        cont = time.monotonic()
        wait_for(lambda: _connected(b, a.key), DELIVERY, "b redials a")
        took = time.monotonic() - cont
        assert took <= 4.0, (took, b.tail_log())
        notes = _log_lines(b, r"resumed after a pause of \d+ s: redialing \d+ peers")
        assert len(notes) == 1, b.tail_log()
        assert int(re.search(r"pause of (\d+) s", notes[0]).group(1)) >= 3
        b_after = [f"b after {i}" for i in range(5)]
        for text in b_after:
            b.send(a.key, text)
        a_all = [*a_before, "a just before", *a_while]
        wait_for(lambda: _has_all(b, a.key, a_all) and _has_all(a, b.key, [*b_before, *b_after]),
                 DELIVERY, "everything, both ways")
        assert w.proxied == 1  # a never got through again: b dialed
    assert _texts(b, a.key) == Counter({t: 1 for t in a_all})
    assert _texts(a, b.key) == Counter({t: 1 for t in [*b_before, *b_after]})
