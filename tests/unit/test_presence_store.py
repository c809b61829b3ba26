"""Presence storage rules with an injected clock: newest per origin, expiry, the cap."""

from __future__ import annotations

import json

import pytest

from awp.node import presence as pres
from awp.store.db import open_store
from awp.wire.keys import Identity
from awp.wire.presence import check_doc, raw_member, sign_doc


@pytest.fixture
def db(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    yield c
    c.close()


def _doc(ident: Identity, seq: int) -> tuple[dict, str]:
    raw = sign_doc(ident, {"origin": ident.key, "name": "n", "seq": seq,
                           "ts": "2026-11-29T10:00:00.000Z"})
    return json.loads(raw), raw


def test_newest_per_origin_and_no_regression(db):
    ident = Identity.generate()
    d5, r5 = _doc(ident, 5)
    assert pres.Presence._store(db, ident.key, d5, r5, 1000, 1000, "via", 1) == "new"
    d4, r4 = _doc(ident, 4)
    assert pres.Presence._store(db, ident.key, d4, r4, 1000, 1001, "via", 1) == ""
    assert pres.Presence._store(db, ident.key, d5, r5, 1000, 1002, "via", 1) == ""
    d6, r6 = _doc(ident, 6)
    assert pres.Presence._store(db, ident.key, d6, r6, 2000, 1003, "via", 2) == "newer"
    assert [tuple(r) for r in db.execute("SELECT seq, hops FROM presence")] == [(6, 2)]


def test_expiry_forgets_documents_older_than_ten_minutes(db):
    a, b = Identity.generate(), Identity.generate()
    now = 10_000_000
    da, ra = _doc(a, 1)
    db_ = db
    pres.Presence._store(db_, a.key, da, ra, now - pres.MAX_AGE_MS - 1, now, "v", 0)
    dbb, rb = _doc(b, 1)
    pres.Presence._store(db_, b.key, dbb, rb, now - 60_000, now, "v", 0)
    assert pres.expire(db_, now - pres.MAX_AGE_MS) == [a.key]
    assert [r[0] for r in db_.execute("SELECT origin FROM presence")] == [b.key]


def test_at_most_a_thousand_origins(db, monkeypatch):
    monkeypatch.setattr(pres, "MAX_ORIGINS", 3)
    idents = [Identity.generate() for _ in range(5)]
    for i, ident in enumerate(idents):
        d, r = _doc(ident, 1)
        pres.Presence._store(db, ident.key, d, r, 1000, 1000 + i, "v", 0)
    kept = {r[0] for r in db.execute("SELECT origin FROM presence")}
    assert kept == {i.key for i in idents[2:]}


def test_signed_doc_checks_and_raw_member():
    ident = Identity.generate()
    d, raw = _doc(ident, 1)
    assert check_doc(d, len(raw)) == ""
    assert check_doc(dict(d, name="x"), len(raw)) == "signature does not verify"
    assert check_doc(d, 70_000) == "document over 64 KiB"
    line = '{"t":"presence", "hops": 2 ,"doc":' + raw + "}"
    assert raw_member(line, "doc") == raw
    assert raw_member(line, "hops") == "2"
    assert raw_member("[1]", "doc") is None
    assert pres.clip("x" * 300, 200) == "x" * 199 + "…"


def test_an_entry_the_database_cannot_hold_costs_only_that_entry(db):
    """seq past SQLite's 64 bits fails its own savepoint; the batch's others stay."""
    good, bad = Identity.generate(), Identity.generate()
    dg, rg = _doc(good, 5)
    db.execute("SAVEPOINT job")  # as the writer runs every job
    huge = {"origin": bad.key, "name": "n", "seq": 2 ** 63, "ts": "2026-11-29T10:00:00.000Z"}
    assert pres.Presence._store_one(db, bad.key, huge, "{}", 1000, 1000, "via", 1) == ""
    assert pres.Presence._store_one(db, good.key, dg, rg, 1000, 1000, "via", 1) == "new"
    db.execute("RELEASE job")
    assert [r[0] for r in db.execute("SELECT origin FROM presence")] == [good.key]


@pytest.mark.parametrize("seq", [2 ** 63, -1, True, 1.5, "7", None])
def test_seq_must_be_a_count_that_fits_64_bits(seq):
    ident = Identity.generate()
    raw = sign_doc(ident, {"origin": ident.key, "seq": seq, "ts": "2026-11-29T10:00:00.000Z"})
    assert check_doc(json.loads(raw), len(raw)) == "bad seq"
    raw = sign_doc(ident, {"origin": ident.key, "seq": 2 ** 63 - 1,
                           "ts": "2026-11-29T10:00:00.000Z"})
    assert check_doc(json.loads(raw), len(raw)) == ""


def test_a_repeated_doc_member_keeps_the_bytes_that_were_verified():
    """Two "doc" members: the parsed line holds the last, so must the raw text."""
    ident = Identity.generate()
    _d, signed = _doc(ident, 3)
    forged = signed.replace('"name":"n"', '"name":"evil"')
    text = '{"t":"presence","hops":0,"doc":' + forged + ',"doc":' + signed + "}"
    assert raw_member(text, "doc") == signed
    text = '{"t":"presence","hops":0,"doc":' + signed + ',"doc":' + forged + "}"
    assert raw_member(text, "doc") == forged
    assert check_doc(json.loads(text)["doc"], len(forged)) == "signature does not verify"
