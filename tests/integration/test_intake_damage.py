"""A damaged or short intake journal: every acked line that still reads is
stored, a flipped bit loses nothing (each record is written twice), and a
record that lost both copies stops the daemon until ``awp repair`` has named
it by id and peer.

The journal holds lines b acked before committing them to SQLite; a crash in
that window leaves them there for the next start.  Here the crash is staged:
b is stopped, its journal is written as a crashed run would leave it (lines
from a, acked, not in SQLite), then damaged, and b is started again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nodes import ROOT, Node

from awp.node.intake import FILENAME
from awp.store import intake as ij
from awp.wire.ids import IdGenerator, new_thread_id

LINES = 4


def _staged(make_node) -> tuple[Node, Node, list[str], list[bytes]]:
    """b stopped, with LINES acked lines from a that only its journal holds."""
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    b.stop()
    gen, th = IdGenerator(), new_thread_id()
    ids, blobs = [], []
    serial = time.time_ns()
    for i in range(LINES):
        ident = gen.next()
        line = {"t": "msg", "id": ident, "ts": "2026-12-01T03:00:00.000Z", "th": th,
                "parts": [{"k": "text", "text": f"journaled {i}"}]}
        text = json.dumps(line, separators=(",", ":"))
        ids.append(ident)
        one = ij.encode(serial + i, ij.Record(a.key, int(time.time() * 1000), text))
        blobs.append(one + one)  # as the journal writes it: twice
    return a, b, ids, blobs


def _log(node: Node) -> str:
    with open(node.log_path, errors="replace") as f:
        return f.read()


def _kept(node: Node) -> list[str]:
    return [n for n in os.listdir(node.home) if n.startswith(FILENAME + ".damaged-")]


def _write_journal(node: Node, data: bytes) -> None:
    with open(os.path.join(node.home, FILENAME), "r+b") as f:
        f.write(data)


def test_a_flipped_bit_in_a_journal_record_loses_nothing_and_says_so(make_node):
    a, b, ids, blobs = _staged(make_node)
    data = bytearray(b"".join(blobs))
    data[len(blobs[0]) + 40] ^= 0x04  # a bit in the second line's first copy
    _write_journal(b, bytes(data))
    b.start()
    got = [r["id"] for r in b.inbound(peer=a.key) if r["t"] == "msg"]
    assert got == ids, got  # read from its other copy
    log = _log(b)
    assert "the intake journal is damaged: 1 stretch(es) failed their checksum" in log, log
    assert "every line read from its other copy" in log, log
    kept = _kept(b)
    assert len(kept) == 1
    with open(os.path.join(b.home, kept[0]), "rb") as f:
        assert f.read(len(data)) == bytes(data)  # kept as it was found


def _repair(node: Node, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AWP_HOME", None)
    return subprocess.run([sys.executable, "-m", "awp", "repair", "--home", node.home, *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def test_a_line_that_lost_both_copies_stops_the_start_until_repair_names_it(make_node):
    a, b, ids, blobs = _staged(make_node)
    data = bytearray(b"".join(blobs))
    one = len(blobs[1]) // 2
    data[len(blobs[0]) + one - 5] ^= 0x04  # the second line: its first copy's text ...
    data[len(blobs[0]) + 2 * one - 5] ^= 0x10  # ... and its second copy's
    _write_journal(b, bytes(data))
    b.start(wait=False)
    assert b.proc is not None and b.proc.wait(30) == 1
    b.proc = None
    log = _log(b)
    assert "acked line(s) lost both their copies" in log and f"awp repair --home {b.home}" in log
    assert f"id {ids[1]} from {a.key}" in log, log
    r = _repair(b, "--check")
    assert r.returncode == 1 and ids[1] in r.stderr, r.stderr
    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert "intake.journal: 3 line(s) read, 3 stored" in r.stdout, r.stdout
    assert f"acked line lost: id {ids[1]} from {a.key}" in r.stdout, r.stdout
    assert len(_kept(b)) == 1
    b.start()
    got = [r["id"] for r in b.inbound(peer=a.key) if r["t"] == "msg"]
    assert got == [ids[0], *ids[2:]], got
    b.stop()
    r = _repair(b, "--check")
    assert r.returncode == 0 and "sound" in r.stdout, (r.stdout, r.stderr)


def test_a_short_journal_is_read_before_it_is_extended(make_node):
    a, b, ids, blobs = _staged(make_node)
    path = os.path.join(b.home, FILENAME)
    with open(path, "wb") as f:  # shorter than the journal's size: ends right after them
        f.write(b"".join(blobs))
    b.start()
    got = [r["id"] for r in b.inbound(peer=a.key) if r["t"] == "msg"]
    assert got == ids, got
    assert os.path.getsize(path) == ij.SIZE
    assert not _kept(b)  # nothing damaged: nothing to keep
