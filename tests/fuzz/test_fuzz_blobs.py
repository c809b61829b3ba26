"""Fuzz the receiving side of blobs: any chunks and msgs, in any order.

Properties: nothing raises; a ``complete`` blob has exactly the bytes its
msg declared, all on disk at its final path; a refused blob leaves no
partial file; every refusal names the blob.
"""

from __future__ import annotations

import atexit
import base64
import itertools
import os
import shutil
import tempfile

from fuzzgen import edge_ints
from hypothesis import example, given
from hypothesis import strategies as st

from awp.store import blobs
from awp.store.db import open_store

PEER = "ed25519:" + "A" * 43
LIMIT = 64
_refs = itertools.count()
_store: dict = {}


def _shared_store():
    """One store for the whole run (each example uses a new ref): migrating a
    fresh database per example would be most of the test's time."""
    if not _store:
        home = tempfile.mkdtemp(prefix="awpfz")
        atexit.register(shutil.rmtree, home, True)
        _store["c"] = open_store(os.path.join(home, "awp.db"))
        _store["c"].execute("PRAGMA synchronous = OFF")  # durability is not under test
        _store["dir"] = os.path.join(home, "blobs")
    return _store["c"], _store["dir"]

chunk_ops = st.tuples(
    st.just("chunk"),
    st.one_of(st.integers(0, 4), edge_ints, st.booleans(), st.none()),  # n
    st.one_of(st.binary(max_size=24).map(lambda b: base64.b64encode(b).decode()),
              st.sampled_from(["", "!!", "QQ=", "QQ==", 5])),  # data
    st.booleans())  # last
msg_ops = st.tuples(
    st.just("msg"),
    st.one_of(st.integers(0, 80), edge_ints, st.booleans(), st.none(), st.just("10")))
ops = st.lists(st.one_of(chunk_ops, chunk_ops, msg_ops), min_size=1, max_size=8)


def _apply(c, blobs_dir: str, ref: str, steps: list) -> list[blobs.Refusal]:
    refusals: list[blobs.Refusal] = []
    for i, step in enumerate(steps):
        c.execute("BEGIN")
        if step[0] == "chunk":
            _, n, data, last = step
            line = {"t": "chunk", "id": f"C{i}", "th": "thr_f", "ref": ref, "n": n,
                    "data": data, "last": last}
            refusal, _done = blobs.chunk_in(c, blobs_dir, PEER, line, LIMIT, 1000 + i)
            refusals += [refusal] if refusal else []
        else:
            part = {"k": "blob", "ref": ref, "name": "f.bin", "mime": "x/y"}
            if step[1] is not None:
                part["size"] = step[1]
            line = {"t": "msg", "id": f"M{i}", "th": "thr_f", "parts": [part]}
            refusals += blobs.msg_named_blobs(c, blobs_dir, PEER, line, LIMIT, 1000 + i)
        c.execute("COMMIT")
    return refusals


@given(ops)
@example([("chunk", 0, base64.b64encode(b"0123456789").decode(), True), ("msg", 1000)])
@example([("msg", 1000), ("chunk", 0, base64.b64encode(b"0123456789").decode(), True)])
@example([("msg", 2 ** 63), ("chunk", 0, "", True)])
# found by bench/fuzz.py: a second msg naming a complete blob rewrote its size
@example([("chunk", 0, "", True), ("msg", 0), ("chunk", None, "", False), ("msg", 1)])
def test_complete_means_every_declared_byte_and_refused_leaves_nothing(steps):
    c, blobs_dir = _shared_store()
    ref = f"b_fuzz{next(_refs)}"
    try:
        refusals = _apply(c, blobs_dir, ref, steps)
    finally:
        if c.in_transaction:
            c.execute("ROLLBACK")
    row = c.execute("SELECT * FROM blobs WHERE ref = ?", (ref,)).fetchone()
    assert all(r.ref == ref and r.detail for r in refusals)
    part = blobs.part_path(blobs_dir, PEER, ref)
    if row is None:
        return
    if row["status"] == "complete":
        assert row["size"] < 0 or row["received"] == row["size"]
        assert os.path.getsize(row["path"]) == row["received"] and not os.path.exists(part)
    elif row["status"] == "refused":
        assert refusals and not os.path.exists(part)
    else:
        assert row["received"] <= LIMIT
