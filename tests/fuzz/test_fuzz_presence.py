"""Fuzz presence documents and lines: verification, batches, raw bytes."""

from __future__ import annotations

import json

from fuzzgen import edge_ints, json_values, texts
from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.keys import Identity
from awp.wire.messages import parse_line
from awp.wire.numbers import is_count
from awp.wire.presence import check_doc, line_entries, presence_line, raw_member, sign_doc

ORIGIN = Identity.generate()
TS = "2026-11-29T10:00:00.000Z"
doc_extras = st.dictionaries(texts.filter(lambda k: k not in ("origin", "seq", "ts", "sig")),
                             json_values(6), max_size=4)


def _signed(seq: int, extra: dict) -> str | None:
    try:
        return sign_doc(ORIGIN, {"origin": ORIGIN.key, "seq": seq, "ts": TS, **extra})
    except UnicodeEncodeError:  # a lone surrogate cannot be signed by anyone
        return None


@given(json_values(), st.integers(0, 200_000))
def test_check_doc_answers_anything_with_a_reason(doc, raw_len):
    why = check_doc(doc, raw_len)
    assert isinstance(why, str)
    if not why:  # accepted: then it really is a signed document
        assert isinstance(doc, dict) and is_count(doc["seq"])


@given(st.one_of(st.integers(0, 2 ** 63 - 1), edge_ints), doc_extras)
def test_signed_docs_verify_and_any_change_does_not(seq, extra):
    raw = _signed(seq, extra)
    if raw is None:
        return
    doc = json.loads(raw)
    assert (check_doc(doc, len(raw.encode())) == "") == is_count(seq)
    if not is_count(seq):
        return
    for key in [k for k in doc if k != "sig"]:
        changed = dict(doc)
        changed[key] = [doc[key]]  # a different value of a different type
        assert check_doc(changed, len(raw)) != "", key
    assert check_doc({**doc, "added": 1}, len(raw)) != ""


@given(st.lists(st.tuples(st.one_of(st.integers(0, 9), edge_ints),
                          st.integers(0, 2 ** 62), doc_extras), min_size=1, max_size=4))
@example([(2 ** 63, 1, {}), (1, 2, {})])  # the first entry must not cost the second
def test_batch_lines_round_trip_and_bad_hops_drop_only_their_entry(entries):
    docs = [(hops, _signed(seq, extra)) for hops, seq, extra in entries]
    docs = [(h, r) for h, r in docs if r is not None]
    if not docs:
        return
    text = presence_line("01J00000000000000000000000", TS, docs[0][0], docs[0][1],
                         docs[1:]).decode()[:-1]
    line = parse_line(text.encode())
    got = line_entries(text, line, 10)
    assert [(h, r) for h, r, _d in got] == [(h, r) for h, r in docs if is_count(h)]
    for _h, raw, doc in got:
        assert json.loads(raw) == doc and check_doc(doc, len(raw)) == ""


@given(st.dictionaries(texts, json_values(4), min_size=1, max_size=5), st.data())
def test_raw_member_is_the_exact_text_of_the_parsed_member(obj, data):
    sep = data.draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", "\t:\r ")]))
    try:
        text = json.dumps(obj, separators=sep)
    except ValueError:
        return
    name = data.draw(st.sampled_from(sorted(obj)))
    raw = raw_member(text, name)
    assert raw is not None and json.loads(raw) == obj[name]
    # a repeated member: the last one is the one the parser keeps
    twice = text[:-1] + sep[0] + json.dumps(name) + sep[1] + '"last"}'
    assert raw_member(twice, name) == '"last"' and json.loads(twice)[name] == "last"


@given(st.text(max_size=120), json_values(6))
def test_line_entries_never_raise(text, line):
    got = line_entries(text, line if isinstance(line, dict) else {"more": line}, 5)
    assert isinstance(got, list)


def test_a_doc_nested_too_deep_to_canonicalise_is_dropped():
    """Like the grant case: check_doc used to let RecursionError out."""
    deep: object = 1
    for _ in range(3000):
        deep = [deep]
    doc = {"origin": ORIGIN.key, "seq": 1, "ts": TS, "sig": "x", "deep": deep}
    assert check_doc(doc, 100) == "not canonicalisable"
