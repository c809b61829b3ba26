"""The bulk rows (awp/store/bulk.py) on a real SQLite file: offers, quota, marks."""

from __future__ import annotations

import os

from awp.store import bulk as store
from awp.store.db import open_store
from awp.store.schema import BULK_MIGRATION, MIGRATIONS
from awp.wire import bulk as w

MiB = 1024 * 1024
PEER = "ed25519:peer"


def _part(ref: str, size: int) -> dict:
    p = w.piece_size(size)
    return {"k": "blob", "ref": ref, "name": f"{ref}.bin", "mime": "", "size": size,
            "bulk": w.describe(size, p, os.urandom(32 * w.piece_count(size, p)))}


def _offer(c, ref: str, size: int, quota: int = 100 * MiB, max_bytes: int = 64 * MiB):
    line = {"t": "msg", "id": "m_" + ref, "th": "thr_x", "parts": [_part(ref, size)]}
    return store.offer_in(c, "/nonexistent", PEER, line, line["parts"][0], max_bytes, quota, 1)


def test_bulk_is_migration_14():
    assert BULK_MIGRATION == 14 and len(MIGRATIONS) > 15
    assert "CREATE TABLE bulk" in MIGRATIONS[BULK_MIGRATION]


def test_offer_mark_and_resume_points(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    refusal, fetch = _offer(c, "b_1", 10 * MiB)
    assert refusal is None and fetch
    assert store.fetching(c) == [(PEER, "b_1")]
    r = store.row(c, PEER, "in", "b_1")
    assert store.missing(r["have"], 3) == [0, 1, 2]
    store.mark(c, PEER, "b_1", 1, True, 4 * MiB, 4 * MiB, 2)
    store.mark(c, PEER, "b_1", 2, False, 0, 2 * MiB, 2)  # failed its check
    r = store.row(c, PEER, "in", "b_1")
    assert store.missing(r["have"], 3) == [0, 2] and r["done"] == 4 * MiB
    assert r["refetched"] == 1 and r["wire"] == 6 * MiB
    store.mark(c, PEER, "b_1", 1, True, 4 * MiB, 0, 3)  # a repeat counts once
    assert store.row(c, PEER, "in", "b_1")["done"] == 4 * MiB
    store.unmark(c, PEER, "b_1", [1], 4 * MiB, 10 * MiB, 4)
    r = store.row(c, PEER, "in", "b_1")
    assert store.missing(r["have"], 3) == [0, 1, 2] and r["done"] == 0
    # a replayed msg changes nothing
    assert _offer(c, "b_1", 10 * MiB) == (None, True)


def test_quota_and_cap_refuse_with_the_reason(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    assert _offer(c, "b_a", 40 * MiB, quota=50 * MiB)[0] is None
    refusal, fetch = _offer(c, "b_b", 20 * MiB, quota=50 * MiB)
    assert not fetch and "peer_bulk_bytes" in refusal.detail and refusal.re == "m_b_b"
    refusal, _ = _offer(c, "b_c", 65 * MiB)
    assert "bulk_bytes" in refusal.detail
    st = c.execute("SELECT status FROM blobs WHERE ref = 'b_b'").fetchone()[0]
    assert st == "refused"
    # its hashes are kept for ranges (awp fetch), with no piece held, and it takes no quota
    kept = store.row(c, PEER, "in", "b_b")
    assert kept is not None and not any(kept["have"]) and store.held_by(c, PEER) == 40 * MiB
    assert store.offered(c, PEER, "b_b")["status"] == "refused"
    assert store.offered(c, PEER, kept["root"][:8])["ref"] == "b_b"
    assert store.offered(c, PEER, "b_nothing") is None
    line = {"t": "msg", "id": "m_bad", "parts": [{**_part("b_d", 5 * MiB), "size": 6 * MiB}]}
    refusal, _ = store.offer_in(c, "/x", PEER, line, line["parts"][0], 64 * MiB, 99 * MiB, 1)
    assert "bad bulk description" in refusal.detail
    assert store.row(c, PEER, "in", "b_d") is None  # nothing to check ranges against
