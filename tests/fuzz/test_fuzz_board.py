"""Fuzz the board: records, topic policies, digests, and a live daemon's board lines.

``check_record`` is the one gate a peer's records pass: anything at all
must come out as a :class:`Record` or a :class:`BoardError`, and a record
that comes out must be one its author really signed.  A digest body is
answered, never raised on.  A live daemon that owns a queue topic gets
connections that announce ``board``, subscribe, and send generated board
lines: it never answers ``internal``, never logs a dead task, and its board
still takes an honest peer's post afterwards.
"""

from __future__ import annotations

import json

from fuzzgen import edge_ints, json_values, mutated, texts
from hypothesis import event, given, settings
from hypothesis import strategies as st
from nodes import wait_for
from rawpeer import RawPeer
from test_fuzz_live import CAPS, check_still_serving, send_and_judge

from awp.board import sync as bsync
from awp.wire.board import (
    KINDS,
    LEASE_STATES,
    BoardError,
    Record,
    check_policy,
    check_record,
    make_post,
    record_hash,
    sign_record,
    topic_id,
)
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts, now_ms

AUTHOR = Identity.generate()
T0 = 1_790_000_000_000
TOPIC = topic_id(AUTHOR.key, "ops")
HASH = "0123456789abcdef0123456789abcdef"

hashes = st.one_of(st.sampled_from([HASH, HASH.upper(), HASH[:-1], ""]),
                   st.binary(min_size=16, max_size=16).map(bytes.hex))
record_values = {
    "k": st.one_of(st.sampled_from(KINDS), texts),
    "topic": st.one_of(st.just(TOPIC), texts, st.just(AUTHOR.key + "/" + "x" * 65)),
    "author": st.one_of(st.just(AUTHOR.key), texts),
    "ts": st.one_of(st.just(format_ts(T0)), texts, edge_ints),
    "until": st.one_of(st.just(format_ts(T0)), texts, edge_ints),
    "of": hashes, "parent": hashes,
    "parts": st.one_of(st.just([{"k": "text", "text": "hi"}]), json_values(6)),
    "seq": st.one_of(edge_ints, st.integers(0, 9)),
    "state": st.one_of(st.sampled_from(LEASE_STATES), texts),
    "holder": st.one_of(st.just(AUTHOR.key), texts),
    "lease": texts,
    "read": st.sampled_from(["open", "grant", "", 1]),
    "post": st.sampled_from(["open", "grant", None]),
    "queue": st.one_of(st.booleans(), json_values(2)),
    "keep": st.one_of(edge_ints, st.integers(0, 20)),
    "revoked": json_values(6), "banned": json_values(6),
    "grant": json_values(6), "via": json_values(6),
    "sig": st.one_of(st.just("A" * 86), texts),
}
record_docs = st.builds(
    lambda known, extra: {**extra, **known},
    st.fixed_dictionaries({}, optional=record_values),
    st.dictionaries(texts, json_values(4), max_size=2))


_ts = st.integers(T0, T0 + 10 ** 9).map(format_ts)
_common = {"topic": st.just(TOPIC), "author": st.just(AUTHOR.key), "ts": _ts}
_parts = st.lists(st.fixed_dictionaries({"k": st.just("text"), "text": st.text(
    st.characters(blacklist_categories=("Cs",)), max_size=30)}), min_size=1, max_size=3)
valid_docs = st.one_of(
    st.fixed_dictionaries({"k": st.just("post"), **_common, "parts": _parts},
                          optional={"parent": st.just(HASH)}),
    st.fixed_dictionaries({"k": st.just("edit"), **_common, "of": st.just(HASH),
                           "parts": _parts}),
    st.fixed_dictionaries({"k": st.sampled_from(["delete", "hide"]), **_common,
                           "of": st.just(HASH)}),
    st.fixed_dictionaries({"k": st.just("lease"), **_common, "of": st.just(HASH),
                           "holder": st.just(AUTHOR.key), "state": st.sampled_from(LEASE_STATES),
                           "lease": st.just(HASH[:16] + ".1"), "until": _ts}),
    st.fixed_dictionaries({"k": st.just("topic"), "topic": st.just(TOPIC), "ts": _ts,
                           "seq": st.integers(0, 2 ** 63 - 1)},
                          optional={"read": st.sampled_from(["open", "grant"]),
                                    "keep": st.integers(1, 10 ** 6),
                                    "queue": st.booleans()}),
)


def _text(doc: dict) -> str | None:
    try:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return None


def _signed(doc: dict) -> Record | None:
    """``doc`` signed by AUTHOR when it is a record at all, else None."""
    try:
        return sign_record(AUTHOR, doc)
    except (BoardError, UnicodeEncodeError):
        return None


@given(st.one_of(record_docs.map(_text), st.text(max_size=300), json_values().map(_text),
                 st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_check_record_answers_anything_with_a_record_or_a_reason(raw):
    try:
        rec = check_record(raw)
    except BoardError:
        event("refused")
        return
    # only a record really signed by the key it names gets through, and it is
    # named by its content
    event("taken")
    assert rec.hash == record_hash(rec.doc) and rec.raw == raw


@given(st.one_of(valid_docs, record_docs), st.data())
def test_a_signed_record_is_taken_and_a_changed_one_is_not(doc, data):
    rec = _signed(doc)
    if rec is None:
        event("not a record")
        return
    event(f"signed {rec.kind}")
    assert check_record(rec.raw).hash == rec.hash
    changed = data.draw(mutated(st.just(rec.raw.encode())))
    try:
        text = changed.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        again = check_record(text)
    except BoardError:
        return
    # a change that still verifies kept the signed content: the same fields,
    # the same name (a record has one spelling, so it cannot take a second)
    assert again.doc == rec.doc and again.hash == rec.hash


@given(st.one_of(record_docs, st.dictionaries(texts, json_values(), max_size=6)))
def test_check_policy_answers_any_document_with_a_policy_or_a_reason(doc):
    try:
        pol = check_policy(doc)
    except BoardError:
        return
    assert pol.keep >= 1 and pol.rate >= 1 and pol.attempts >= 1


ranges = st.lists(st.one_of(
    st.fixed_dictionaries({"lo": st.one_of(edge_ints, st.integers(T0 - 10, T0 + 10)),
                           "hi": st.one_of(edge_ints, st.integers(T0 - 10, T0 + 10))},
                          optional={"n": st.one_of(edge_ints, st.integers(0, 40)),
                                    "fp": texts, "ask": json_values(1),
                                    "ids": st.lists(hashes, max_size=40)}),
    json_values(4)), max_size=20)


@given(st.lists(st.tuples(st.integers(T0 - 5, T0 + 5), hashes), max_size=80),
       st.one_of(st.fixed_dictionaries({"floor": st.one_of(edge_ints, texts), "ranges": ranges}),
                 json_values()),
       st.one_of(edge_ints, st.integers(T0 - 5, T0 + 5)))
def test_a_digest_body_is_answered_never_raised_on(held, body, floor):
    h = bsync.Holdings(held)
    step = bsync.respond(h, floor, body)
    assert set(step.push) <= h.hashes() and not set(step.want) & h.hashes()
    assert len(step.want) <= bsync.MAX_RANGES * bsync.MAX_IDS


# -- a live daemon ---------------------------------------------------------------------------

BOARD_TYPES = ("board-sub", "board-topic", "board-posts", "board-digest", "board-want",
               "board-claim", "board-lease")


def board_lines(topic: str, author: Identity) -> st.SearchStrategy:
    """Board lines aimed at ``topic`` (one the daemon holds), with the rest fuzzed."""
    topics = st.one_of(st.just(topic), texts)
    anything = json_values(6)
    now = now_ms()
    post = st.builds(lambda text, ts: make_post(author, topic, [{"k": "text", "text": text}],
                                                ts).raw,
                     st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
                     st.integers(now - 10 ** 6, now + 10 ** 6))
    recs = st.lists(st.one_of(post, record_docs.map(_text).filter(bool),
                              mutated(post.map(str.encode)).map(
                                  lambda b: b.decode("utf-8", "replace"))), max_size=4)
    return st.one_of(
        st.builds(lambda ts, extra: {"t": "board-sub", "topics": ts, **extra},
                  st.lists(st.one_of(st.fixed_dictionaries({"topic": topics},
                                                           optional={"grant": anything,
                                                                     "via": anything}),
                                     anything), max_size=4),
                  st.fixed_dictionaries({}, optional={"drop": st.lists(topics, max_size=3)})),
        st.builds(lambda hops, doc: {"t": "board-topic", "hops": hops, "doc": doc},
                  st.one_of(st.integers(0, 9), edge_ints, anything),
                  st.one_of(record_docs, anything)),
        st.builds(lambda t, hops, rs: {"t": "board-posts", "topic": t, "hops": hops,
                                       "recs": [json.loads(r) if _loads(r) else r for r in rs]},
                  topics, st.one_of(st.integers(0, 9), edge_ints, anything), recs),
        st.builds(lambda t, floor, rs: {"t": "board-digest", "topic": t, "floor": floor,
                                        "ranges": rs},
                  topics, st.one_of(edge_ints, st.integers(T0 - 10, T0 + 10)), ranges),
        st.builds(lambda t, ids: {"t": "board-want", "topic": t, "ids": ids},
                  topics, st.one_of(st.lists(hashes, max_size=8), anything)),
        st.builds(lambda t, op, extra: {"t": "board-claim", "topic": t, "op": op, **extra},
                  topics, st.one_of(st.sampled_from(["claim", "renew", "release", "complete",
                                                     "fail"]), texts),
                  st.fixed_dictionaries({}, optional={"req": texts, "lease": texts,
                                                      "id": texts})),
        st.builds(lambda extra: {"t": "board-lease", **extra},
                  st.fixed_dictionaries({}, optional={"re": texts, "topic": topics,
                                                      "doc": anything, "error": anything})),
        st.builds(lambda t, extra: {"t": t, **extra}, st.sampled_from(BOARD_TYPES),
                  st.dictionaries(texts, anything, max_size=4)),
    )


def _loads(raw: str) -> bool:
    try:
        json.loads(raw)
        return True
    except ValueError:
        return False


def fuzz_board_live(node, examples: int) -> int:
    """``examples`` connections of generated board lines against ``node``; how many ran.

    ``node`` must be running; an open queue topic ``fuzz`` is made on it, with
    an item, so claims, posts, digests and wants all reach real code.
    Shared with ``bench/fuzz.py``, which runs it much longer.
    """
    node.api("POST", "/v1/board/topic", {"name": "fuzz", "read": "open", "post": "open",
                                         "queue": True, "rate": 6000})
    topic = f"{node.key}/fuzz"
    node.api("POST", "/v1/board/post", {"topic": topic, "parts": [{"k": "text", "text": "item"}]})
    peer = Identity.generate()  # one key for every connection, as a persistent attacker
    ran = 0

    @settings(max_examples=examples, database=None, deadline=None)
    @given(st.lists(board_lines(topic, peer), min_size=1, max_size=6), st.booleans())
    def one_connection(batch, subscribe):
        nonlocal ran
        ran += 1
        with RawPeer(node.address, peer, name="fuzz") as p:
            # the daemon's resume comes first: no board line of its goes ahead of it
            assert p.handshake(caps=[*CAPS, "board"])["t"] == "resume"
            p.resume()
            if subscribe:
                p.send_line(p.envelope({"t": "board-sub", "topics": [{"topic": topic}]}))
            send_and_judge(p, batch)

    one_connection()
    check_still_serving(node)
    # the board still takes an honest peer's post, and its queue still answers
    honest = make_post(peer, topic, [{"k": "text", "text": "after the fuzz"}], now_ms())
    with RawPeer(node.address, peer, name="honest") as p:
        assert p.handshake(caps=[*CAPS, "board"])["t"] == "resume"
        p.resume()
        p.send_line(p.envelope({"t": "board-sub", "topics": [{"topic": topic}]}))
        p.send_line(p.envelope({"t": "board-posts", "topic": topic, "hops": 0,
                                "recs": [json.loads(honest.raw)]}))
        wait_for(lambda: any(x["hash"] == honest.hash for x in node.api(
            "POST", "/v1/board/get", {"topic": topic, "n": 1000})["posts"]), 20,
                 "the honest post")
    assert node.api("POST", "/v1/board/claim", {"topic": topic})["state"] in ("claimed", "empty")
    stats = node.api("GET", "/v1/status")["board"]
    assert stats["lines_in"] >= ran, stats  # the lines reached the board, not a wall before it
    return ran


def test_live_daemon_survives_generated_board_lines(make_node):
    node = make_node("fzb").start()
    assert fuzz_board_live(node, max(10, settings.default.max_examples // 2)) > 0
