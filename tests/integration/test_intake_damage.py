"""A damaged or short intake journal: every acked line that still reads is
stored, and what was damaged is reported and kept.

The journal holds lines b acked before committing them to SQLite; a crash in
that window leaves them there for the next start.  Here the crash is staged:
b is stopped, its journal is written as a crashed run would leave it (lines
from a, acked, not in SQLite), then damaged, and b is started again.
"""

from __future__ import annotations

import json
import os
import time

from nodes import Node

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
        blobs.append(ij.encode(serial + i, ij.Record(a.key, int(time.time() * 1000), text)))
    return a, b, ids, blobs


def _log(node: Node) -> str:
    with open(node.log_path, errors="replace") as f:
        return f.read()


def _kept(node: Node) -> list[str]:
    return [n for n in os.listdir(node.home) if n.startswith(FILENAME + ".damaged-")]


def test_a_flipped_bit_in_a_journal_record_loses_only_that_line_and_says_so(make_node):
    a, b, ids, blobs = _staged(make_node)
    data = bytearray(b"".join(blobs))
    data[len(blobs[0]) + 40] ^= 0x04  # a bit in the second line's payload
    with open(os.path.join(b.home, FILENAME), "r+b") as f:
        f.write(bytes(data))
    b.start()
    got = [r["id"] for r in b.inbound(peer=a.key) if r["t"] == "msg"]
    assert got == [ids[0], *ids[2:]], got  # the lines after the damaged one are stored
    log = _log(b)
    assert "the intake journal is damaged: 1 stretch(es) failed their checksum" in log, log
    kept = _kept(b)
    assert len(kept) == 1
    with open(os.path.join(b.home, kept[0]), "rb") as f:
        assert f.read(len(data)) == bytes(data)  # kept as it was found


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
