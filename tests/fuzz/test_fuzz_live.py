"""Fuzz a live daemon lightly: after a real handshake, generated lines.

Each example is one authenticated connection that sends a few generated
lines, then a ping.  The connection must either answer the ping or have been
closed for a reason the protocol gives (an err with a closing code from the
daemon, or a bye or closing err we sent ourselves); the daemon never answers
``internal``.  After all examples the daemon must still be running, with
nothing in its log that says a connection task died, and an honest peer's
message must still be stored and acked.
"""

from __future__ import annotations

from fuzzgen import deep_text, dumps, envelopes, lines, mutated, typed_lines
from hypothesis import event, given, settings
from hypothesis import strategies as st
from nodes import wait_for
from rawpeer import RawPeer

from awp.wire.errors import CLOSING

CAPS = ["chat", "blob", "grant", "introduce", "presence", "presence-batch", "mirror"]
# Shapes that reach the engine: valid envelopes of every type (the raw peer
# fills in id and ts), the same with bytes changed, and anything at all.
live_lines = st.one_of(
    typed_lines(),
    envelopes(),
    mutated(typed_lines().map(dumps)),
    lines,
    st.integers(60, 70).map(lambda d: {"t": "msg", "th": "thr_deep", "parts": [
        {"k": "data", "data": __import__("json").loads(deep_text(d))}]}),
)


def _closing_sent(sent: list[object]) -> bool:
    """Did we send something after which the daemon may close: a bye, a closing err?"""
    for line in sent:
        if isinstance(line, dict) and (line.get("t") == "bye" or (
                line.get("t") == "err" and line.get("code") in CLOSING)):
            return True
        if isinstance(line, bytes) and (b'"bye"' in line or b'"err"' in line):
            return True  # possibly a bye or err after all: cannot tell without parsing
    return False


def fuzz_live(node, examples: int) -> int:
    """Run ``examples`` generated connections against ``node``; returns how many ran.

    Shared with ``bench/fuzz.py``, which runs it much longer.
    """
    ran = 0

    @settings(max_examples=examples, database=None, deadline=None)
    @given(st.lists(live_lines, min_size=1, max_size=6))
    def one_connection(batch):
        nonlocal ran
        ran += 1
        with RawPeer(node.address, name="fuzz") as p:
            assert p.handshake(caps=CAPS)["t"] == "resume"
            p.resume()
            send_and_judge(p, batch)

    one_connection()
    check_still_serving(node)
    return ran


def send_and_judge(p: RawPeer, batch: list) -> None:
    """Send ``batch`` (objects get an envelope, bytes go as they are), then a ping.

    The daemon must answer the ping, or have closed with a closing err (or
    after a bye or closing err of ours); it never answers ``internal``.
    """
    sent: list[object] = []
    try:
        for line in batch:
            if isinstance(line, dict):
                line = p.envelope(line)
                p.send_raw(dumps(line) + b"\n")
            else:
                p.send_raw(line + b"\n")
            sent.append(line)
        ping = p.send_line({"t": "ping"})
    except OSError:  # closed under us: judged below from what came back
        ping = {"id": None}
    try:
        p.recv_until(lambda x: x.get("t") == "pong" and x.get("re") == ping["id"], 20)
        closed = False
    except AssertionError:
        closed = True
    got = p.skipped
    event("closed" if closed else "answered")
    assert not [x for x in got if x.get("t") == "err" and x.get("code") == "internal"], got
    if closed:
        errs = [x for x in got if x.get("t") == "err" and x.get("code") in CLOSING]
        assert errs or _closing_sent(sent), (batch, got)


def check_still_serving(node) -> None:
    """The daemon runs, logged no dead task, and an honest msg is stored and acked."""
    assert node.proc.poll() is None, node.tail_log()
    with RawPeer(node.address) as q:
        assert q.handshake()["t"] == "resume"
        q.resume()
        sent = q.msg("after the fuzz", th="thr_honest01")
        q.expect("ack", 20, re=sent["id"])
    wait_for(lambda: any(r["id"] == sent["id"] for r in node.inbound()), 10, "stored")
    with open(node.log_path, errors="replace") as f:
        log = f.read().splitlines()
    bad = [i for i, ln in enumerate(log)
           if any(w in ln for w in ("Traceback", "internal error", "RecursionError", "failed"))]
    assert not bad, "\n".join(log[bad[0] - 3:bad[0] + 40])


def test_live_daemon_survives_generated_lines(make_node):
    node = make_node("fz").start()
    assert fuzz_live(node, max(10, settings.default.max_examples // 2)) > 0
