"""Board records: signing, the one canonical spelling, topic names, policies, hostile text."""

from __future__ import annotations

import json
import random

import pytest

from awp.wire import board as b
from awp.wire.b64 import b64decode_any, b64std
from awp.wire.canonical import canonical_bytes, compact_json
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)


def _topic(**policy):
    return b.make_topic(OWNER, "ops", 1, T0, **policy)


def _post(text="hello", ts=T0 + 1, **kw):
    return b.make_post(ALICE, f"{OWNER.key}/ops", [{"k": "text", "text": text}], ts, **kw)


def _resign(ident: Identity, doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "sig"}
    body["sig"] = ident.sign(canonical_bytes(body))
    return compact_json(body)


def test_post_round_trip_and_hash_is_content_name():
    p = _post()
    again = b.check_record(p.raw)
    assert again.hash == p.hash == b.record_hash(json.loads(p.raw))
    assert (again.kind, again.author, again.owner, again.ts) == ("post", ALICE.key, OWNER.key,
                                                                 T0 + 1)
    assert len(p.hash) == 32
    # whitespace in transit changes nothing: the name is over the canonical form
    spaced = json.dumps(json.loads(p.raw), indent=1)
    assert b.check_record(spaced).hash == p.hash
    assert _post("other").hash != p.hash


def test_tampering_fails_signature():
    doc = json.loads(_post().raw)
    doc["parts"][0]["text"] = "changed"
    with pytest.raises(b.BoardError, match="signature"):
        b.check_record(compact_json(doc))
    doc = json.loads(_post().raw)
    doc["author"] = OWNER.key
    with pytest.raises(b.BoardError, match="signature"):
        b.check_record(compact_json(doc))


def test_a_relay_cannot_respell_a_record_into_a_second_name():
    doc = json.loads(_post().raw)
    sig = doc["sig"]
    for other in (sig + "==", b64std(b64decode_any(sig))):
        respelled = dict(doc, sig=other)
        with pytest.raises(b.BoardError, match="sig must be"):
            b.check_record(compact_json(respelled))
    # a key in another base64 spelling is refused as well
    padded = dict(doc, author=doc["author"] + "=")
    with pytest.raises(b.BoardError, match="author"):
        b.check_record(_resign(ALICE, padded))


@pytest.mark.parametrize("name", ["ops", "a", "team-1.builds_x", "9" * 64])
def test_topic_names_accepted(name):
    assert b.parse_topic(f"{OWNER.key}/{name}") == (OWNER.key, name)


@pytest.mark.parametrize("topic", [
    "ops", "/ops", f"{OWNER.key}/", f"{OWNER.key}/Ops", f"{OWNER.key}/-ops",
    f"{OWNER.key}/o ps", f"{OWNER.key}/оps", f"{OWNER.key}/a/b", f"{OWNER.key}/" + "a" * 65,
    "ed25519:short/ops", f"{OWNER.key}=/ops", None, 7, f"{OWNER.key}/ops\n",
])
def test_topic_names_refused(topic):
    with pytest.raises(b.BoardError):
        b.parse_topic(topic)


def test_capabilities_name_one_topic_or_all_of_an_owner():
    t = f"{OWNER.key}/ops"
    assert b.read_cap(t) == "board:read:" + t and b.post_cap(t) == "board:post:" + t
    assert b.cap_covers(b.post_cap(t), "post", t)
    assert b.cap_covers(b.post_cap(t), "read", t)  # posting implies reading
    assert not b.cap_covers(b.read_cap(t), "post", t)
    assert b.cap_covers(f"board:post:{OWNER.key}/*", "post", t)
    assert not b.cap_covers(f"board:post:{ALICE.key}/*", "post", t)
    assert not b.cap_covers(b.post_cap(f"{OWNER.key}/ops2"), "post", t)
    assert not b.cap_covers("exec", "read", t)
    with pytest.raises(b.BoardError):
        b.read_cap("nope")


def test_owner_only_kinds():
    p = _post()
    hide = b.make_hide(OWNER, p, T0 + 2)
    assert b.check_record(hide.raw).of == p.hash
    forged = dict(json.loads(hide.raw), author=ALICE.key)
    with pytest.raises(b.BoardError, match="owner"):
        b.check_record(_resign(ALICE, forged))
    lease = b.make_lease(OWNER, p.topic, p.hash, ALICE.key, "claimed", "L1", T0 + 9, T0 + 3)
    assert b.check_record(lease.raw).kind == "lease"
    for bad in ({"state": "stolen"}, {"holder": "x"}, {"lease": ""}, {"until": "soon"},
                {"of": "nothash"}):
        with pytest.raises(b.BoardError):
            b.check_record(_resign(OWNER, dict(json.loads(lease.raw), **bad)))
    with pytest.raises(b.BoardError, match="signature"):  # a topic is checked against its owner
        b.check_record(_resign(ALICE, {"k": "topic", "topic": f"{OWNER.key}/ops", "seq": 1,
                                       "ts": "2026-01-01T00:00:00Z"}))


def test_edit_delete_and_reply_shapes():
    p = _post()
    e = b.make_edit(ALICE, p, [{"k": "text", "text": "fixed"}], T0 + 5)
    d = b.make_delete(ALICE, p, T0 + 6)
    r = b.make_post(ALICE, p.topic, [{"k": "text", "text": "re"}], T0 + 7, parent=p.hash)
    assert (e.of, d.of, r.parent) == (p.hash, p.hash, p.hash)
    for bad in ({"parent": "01J9ABC"}, {"parts": []}, {"parts": ["text"]},
                {"parts": [{"k": "text"}] * 17}, {"grant": "x"}, {"via": {}}):
        with pytest.raises(b.BoardError):
            b.check_record(_resign(ALICE, dict(json.loads(p.raw), **bad)))


def test_policy_defaults_and_bounds():
    pol = b.check_policy(json.loads(_topic().raw))
    assert (pol.read_open, pol.post_open, pol.keep, pol.rate, pol.queue) == (
        False, False, b.DEFAULT_KEEP, b.DEFAULT_RATE, False)
    t = _topic(read="open", post="open", keep=5, keep_days=1, rate=2, queue=True,
               revoked=[{"grant": "ab" * 16, "at": "2026-01-01T00:00:00Z"}], banned=[ALICE.key])
    pol = b.check_policy(t.doc)
    assert pol.read_open and pol.post_open and pol.queue and pol.keep == 5
    assert pol.revoked == {"ab" * 16: 1767225600000} and pol.banned == {ALICE.key}
    for bad in ({"read": "everyone"}, {"keep": 0}, {"keep": True}, {"rate": 10 ** 9},
                {"max_post": 10}, {"queue": "yes"}, {"title": "x" * 201},
                {"banned": ["nope"]}, {"revoked": [{"grant": "x"}]},
                {"banned": [ALICE.key] * 257}):
        with pytest.raises(b.BoardError):
            b.make_topic(OWNER, "ops", 2, T0, **bad)


def test_size_bound_is_on_bytes():
    big = "é" * (b.MAX_RECORD // 2)
    with pytest.raises(b.BoardError, match="64 KiB"):
        _post(big)


def test_unknown_fields_are_signed_and_kept():
    doc = dict(json.loads(_post().raw), mood="fine")
    rec = b.check_record(_resign(ALICE, doc))
    assert rec.doc["mood"] == "fine"


def _mutations(raw: str, rng: random.Random):
    yield raw[: rng.randrange(len(raw))]
    i = rng.randrange(len(raw))
    yield raw[:i] + rng.choice('{}[]",:\\0aZ\u2028\ud800') + raw[i + 1:]
    doc = json.loads(raw)
    key = rng.choice(list(doc))
    for v in (None, 1, -1, 2 ** 70, 1.5, True, "", [], {}, "x" * 100, [[[[]]]]):
        yield compact_json(dict(doc, **{key: v}))
    yield "[" * 100_000
    yield json.dumps([doc])


@pytest.mark.parametrize("seed", range(8))
def test_hostile_text_only_ever_raises_board_error(seed):
    rng = random.Random(seed)
    p = _post()
    samples = [p.raw, _topic(post="open").raw, b.make_hide(OWNER, p, T0).raw,
               b.make_lease(OWNER, p.topic, p.hash, ALICE.key, "done", "L", T0, T0).raw]
    for raw in samples:
        for bad in _mutations(raw, rng):
            try:
                b.check_record(bad)
            except b.BoardError:
                pass
    nan = _resign(ALICE, dict(json.loads(p.raw), parts=[{"k": "data", "data": 1}]))
    with pytest.raises(b.BoardError, match="not JSON"):
        b.check_record(nan.replace('"data":1', '"data":NaN'))
    deep = compact_json(dict(json.loads(p.raw), parts=[{"k": "data", "data": []}]))
    with pytest.raises(b.BoardError):
        b.check_record(deep.replace("[]", "[" * 5000 + "]" * 5000))
    for junk in (None, 5, b"{}", "", "null", "{}", '{"k":"post"}'):
        with pytest.raises(b.BoardError):
            b.check_record(junk)


def test_asks_are_signed_by_their_claimant_and_checked():
    from awp.wire.board import check_ask, make_ask

    me = Identity(b"\x07" * 32)
    topic = Identity(bytes([1]) * 32).key + "/jobs"
    ask = make_ask(me, topic, "claim", 1_790_000_000_000, req="r1")
    assert check_ask(ask) is ask
    for bad in (dict(ask, by=Identity(b"\x08" * 32).key), dict(ask, req="r2"),
                dict(ask, op="steal"), dict(ask, k="post"), {k: v for k, v in ask.items()
                                                             if k != "sig"}, "ask"):
        with pytest.raises(b.BoardError):
            check_ask(bad)


def test_an_asks_offers_and_bid_are_under_its_signature():
    """A host carrying a claim over the mesh cannot change what the worker offers or bids."""
    from awp.wire.board import check_ask, make_ask

    me = Identity(b"\x07" * 32)
    topic = Identity(bytes([1]) * 32).key + "/jobs"
    ask = make_ask(me, topic, "claim", 1_790_000_000_000, req="r1", offers=("gpu", "linux"),
                   bid={"price": 3, "ms": 900})
    assert check_ask(ask)["offers"] == ["gpu", "linux"] and ask["bid"] == {"price": 3, "ms": 900}
    for bad in (dict(ask, offers=["gpu"]), dict(ask, offers=["gpu", "linux", "claude"]),
                dict(ask, bid={"price": 0, "ms": 900}),
                {k: v for k, v in ask.items() if k != "bid"}):
        with pytest.raises(b.BoardError):
            check_ask(bad)


def test_a_claimants_name_is_under_its_signature_and_bounded():
    """The name a worker signs in its ask (and the owner copies into lease records) cannot
    be changed on the way, and is at most 64 characters."""
    from awp.wire.board import check_ask, make_ask, make_lease

    me = Identity(b"\x07" * 32)
    owner = Identity(bytes([1]) * 32)
    topic = owner.key + "/jobs"
    ask = make_ask(me, topic, "claim", 1_790_000_000_000, req="r1", name="builder")
    assert check_ask(ask)["name"] == "builder"
    for bad in (dict(ask, name="mallory"), {k: v for k, v in ask.items() if k != "name"}):
        with pytest.raises(b.BoardError, match="signature"):
            check_ask(bad)
    long = dict(make_ask(me, topic, "claim", 1, req="r1"), name="x" * 65)
    with pytest.raises(b.BoardError, match="name: a string of at most 64"):
        check_ask(long)
    rec = make_lease(owner, topic, "a" * 32, me.key, "claimed", "L1", 2, 1, holder_name="w" * 80)
    assert json.loads(rec.raw)["holder_name"] == "w" * 64  # cut to the bound when signed
    doc = dict(json.loads(rec.raw), holder_name=7)
    doc.pop("sig")
    doc["sig"] = owner.sign(canonical_bytes(doc))
    with pytest.raises(b.BoardError, match="holder_name"):
        b.check_record(compact_json(doc), lambda *a: None)


def test_key_and_topic_memories_are_bounded():
    """A crowd of fresh keys grows what a host remembers of checked keys, verifiers and
    topic names only to 4,096 of each; past it they are checked again, as before."""
    from awp.wire import board as wb
    from awp.wire import keys

    for i in range(4096 + 10):
        key = keys.encode_key(i.to_bytes(32, "big"))
        wb.parse_topic(f"{key}/t")
        keys.verify(key, b"m", "A" * 86)  # fails (not the key's signature), remembered all the same
    assert len(wb._KNOWN_KEYS) <= 4096 and len(wb._KNOWN_TOPICS) <= 4096
    assert len(keys._VERIFIERS) <= 4096
    key = keys.encode_key((7).to_bytes(32, "big"))
    assert wb.parse_topic(f"{key}/t") == (key, "t")  # forgotten or not, the answer is the same


def test_a_records_name_and_signed_bytes_come_from_one_encoding_as_canonical_json():
    """Members sorted before and after ``sig`` joined make the canonical JSON with and
    without the signature, whatever the members (nested ``sig``, keys around it)."""
    sig = "A" * 86
    docs = [{"sig": sig}, {"a": 1, "sig": sig}, {"z": [1, {"sig": "x"}], "sig": sig},
            {"k": "post", "topic": "t", "ts": "x", "parts": [{"k": "text", "text": 'é"\n'}],
             "via": {"sig": "b", "z": None}, "seq": 5, "sif": 1, "sih": 2, "Sig": 3, "é": 4,
             "sig": sig}]
    for doc in docs:
        halves = b._halves(doc)
        assert b._joined(halves, sig) == canonical_bytes(doc)
        assert b._joined(halves, None) == canonical_bytes(
            {k: v for k, v in doc.items() if k != "sig"})
    p = _post("named once")
    again = b.parse_unverified(p.raw)
    assert again.hash == p.hash == b.record_hash(json.loads(p.raw)) and b.verify_record(again)


def test_line_recs_cuts_each_record_as_the_full_scan_does():
    st, p = _post("one"), _post("two", ts=T0 + 2)
    line = ('{"t":"board-posts","id":"x","ts":"y","topic":"t","hops":1,"recs":['
            + st.raw + "," + p.raw + "]}")
    got = b.line_recs(line, 10)
    assert [r for r, _v in got] == [st.raw, p.raw]
    assert [v for _r, v in got] == [json.loads(st.raw), json.loads(p.raw)]
    assert b.line_recs(line, 1) is None  # over the limit: the line is dropped
    # Spaced, recs not last, a nested recs, recs twice: the last top-level one counts.
    assert b.line_recs(' { "recs" : [ 1 , 2 ] } ', 5) == [("1", 1), ("2", 2)]
    assert b.line_recs('{"recs":[1],"hops":0}', 5) == [("1", 1)]
    assert b.line_recs('{"x":{"recs":[9]},"recs":[2]}', 5) == [("2", 2)]
    assert b.line_recs('{"recs":[1],"recs":[2]}', 5) == [("2", 2)]
    assert b.line_recs('{"recs":[]}', 5) == []
    for bad in ('{"x":{"recs":[9]}}', '{"recs":[1,]}', '{"recs":[1]', '{"recs":5}',
                '{"recs":[NaN]}', "", "[]"):
        assert b.line_recs(bad, 5) is None, bad
