"""A topic's owner that rotated its key (SPEC.md section 14, "When the owner
rotates its key"): its records under the new key count once the rotation is
held, from a link or from the topic document's own ``rotation`` chain."""

from __future__ import annotations

import pytest

from awp.wire import board as wb
from awp.wire import rotation as R
from awp.wire.keys import Identity

TS = 1796677000000


@pytest.fixture(autouse=True)
def _fresh():
    saved = dict(wb._HEIRS)
    wb._HEIRS.clear()
    yield
    wb._HEIRS.clear()
    wb._HEIRS.update(saved)


def _keys(n: int) -> list[Identity]:
    return [Identity(bytes([i + 1]) * 32) for i in range(n)]


def test_a_document_with_its_chain_teaches_the_succession():
    a, b, c = _keys(3)
    chain = [R.make(a, b, 1, c.key, TS)]
    doc = wb.make_topic(b, "plan", 2, TS, topic_owner=a.key, rotation=chain, read="open")
    stamp = wb.make_stamp(b, doc.topic, "0" * 32, 1, TS)  # the owner's host knows its chain
    wb._HEIRS.clear()  # a host that never met the owner
    with pytest.raises(wb.BoardError, match="rotated to"):
        wb.check_record(stamp.raw)  # not before the succession is known
    got = wb.check_record(doc.raw)
    assert got.author == b.key and got.owner == a.key and got.topic == f"{a.key}/plan"
    assert wb.is_owner(a.key, b.key) and not wb.is_owner(b.key, a.key)
    assert wb.current_owner(a.key) == b.key and wb.former_keys(b.key) == [a.key]
    assert wb.owned_by(doc.topic, b.key) and not wb.owned_by(doc.topic, c.key)
    assert wb.check_record(stamp.raw).author == b.key


def test_two_rotations_in_a_row_are_followed():
    a, b, c, d = _keys(4)
    chain = [R.make(a, b, 1, c.key, TS), R.make(b, c, 2, d.key, TS)]
    doc = wb.make_topic(c, "plan", 3, TS, topic_owner=a.key, rotation=chain)
    wb._HEIRS.clear()
    wb.check_record(doc.raw)
    assert wb.lineage(a.key) == [a.key, b.key, c.key] and wb.current_owner(b.key) == c.key


def test_forged_and_broken_chains_are_refused():
    a, b, c, m = _keys(4)
    good = R.make(a, b, 1, c.key, TS)
    cases = {
        "a chain from another key": [R.make(m, b, 1, c.key, TS)],
        "a chain that ends elsewhere": [R.make(a, c, 1, c.key, TS)],
        "a forged record": [dict(good, sig_old=R.make(m, b, 1, c.key, TS)["sig_old"])],
        "an uncommitted second step": [good, R.make(b, m, 2, c.key, TS)],
        "not a list": {"old": a.key},
    }
    for what, chain in cases.items():
        wb._HEIRS.clear()
        signer = m if what == "an uncommitted second step" else b
        body = {"k": "topic", "topic": f"{a.key}/plan", "seq": 2, "ts": "2026-12-07T00:00:00Z",
                "author": signer.key, "rotation": chain}
        body["sig"] = signer.sign(wb.canonical_bytes(body))
        with pytest.raises(wb.BoardError):
            wb.check_record(wb.compact_json(body))
        assert not wb.is_owner(a.key, signer.key), what


def test_a_second_successor_of_one_key_is_refused_as_a_conflict():
    a, b, c, d = _keys(4)
    wb.check_record(wb.make_topic(b, "x", 2, TS, topic_owner=a.key,
                                  rotation=[R.make(a, b, 1, c.key, TS)]).raw)
    other = R.make(a, d, 1, c.key, TS)  # the same key rotated to another one
    body = {"k": "topic", "topic": f"{a.key}/y", "seq": 2, "ts": "2026-12-07T00:00:00Z",
            "author": d.key, "rotation": [other]}
    body["sig"] = d.sign(wb.canonical_bytes(body))
    with pytest.raises(wb.BoardError, match="conflicts"):
        wb.check_record(wb.compact_json(body))
    assert wb.current_owner(a.key) == b.key


def test_heads_and_refusals_by_the_successor_count():
    a, b, c = _keys(3)
    wb.learn_rotation(a.key, b.key)
    ref = wb.make_refusal(b, f"{a.key}/plan", "0" * 32, "full", True, TS)
    assert wb.check_refusal(ref)["author"] == b.key
    with pytest.raises(wb.BoardError):
        wb.check_refusal(wb.make_refusal(c, f"{a.key}/plan", "0" * 32, "full", True, TS))


def test_a_record_without_an_author_is_a_board_error():
    a, = _keys(1)
    body = {"k": "post", "topic": f"{a.key}/plan", "ts": "2026-12-07T00:00:00Z",
            "parts": [{"k": "text", "text": "x"}]}
    body["sig"] = a.sign(wb.canonical_bytes(body))
    with pytest.raises(wb.BoardError):
        wb.check_record(wb.compact_json(body))
