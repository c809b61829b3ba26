"""Hypothesis strategies shared by the fuzz tests and ``bench/fuzz.py``.

They aim at the edges a hostile peer would try: integers around 2**63 and
bools where numbers go, lone surrogates, control characters, deep nesting,
duplicate keys, and valid lines with a few bytes changed.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

TYPES = ("hello", "auth", "resume", "msg", "state", "ack", "chunk", "ping", "pong", "bye",
         "err", "grant", "introduce", "presence", "mirror", "private", "future-thing")

edge_ints = st.sampled_from([0, 1, -1, 2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63),
                             -(2 ** 63) - 1, 2 ** 64, 10 ** 30])
ints = st.one_of(st.integers(), edge_ints)
texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "\ud800", "a\udfffb", "\x00", "\u2028", "ed25519:", "thr_x", "b_1",
                     "2026-11-29T10:00:00.000Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z"]),
)
scalars = st.one_of(st.none(), st.booleans(), ints,
                    st.floats(allow_nan=False, allow_infinity=False), texts)


def json_values(max_leaves: int = 12) -> st.SearchStrategy:
    """Any JSON value (no NaN or infinities: those are not JSON)."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(texts, inner, max_size=4)),
        max_leaves=max_leaves)


def envelopes() -> st.SearchStrategy:
    """Objects shaped like lines: a ``t``, often the envelope fields, anything else."""
    fields = st.dictionaries(
        st.one_of(st.sampled_from(["id", "ts", "th", "re", "state", "ref", "n", "last", "data",
                                   "parts", "seen", "hops", "doc", "more", "grant", "code",
                                   "sig", "key", "nonce", "v", "caps", "line", "size"]),
                  texts),
        json_values(8), max_size=6)
    return st.builds(lambda t, rest: {"t": t, **rest},
                     st.one_of(st.sampled_from(TYPES), texts, ints), fields)


def deep_text(depth: int, leaf: str = "1") -> str:
    """JSON text ``depth`` containers deep, lists and objects alternating."""
    opens = "".join('{"x":' if i % 2 == 0 else "[" for i in reversed(range(depth)))
    closes = "".join("}" if i % 2 == 0 else "]" for i in range(depth))
    return opens + leaf + closes


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """A valid-ish line with a few bytes inserted, deleted or replaced."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        pos = draw(st.integers(0, len(data)))
        byte = draw(st.sampled_from(list(b'{}[]",:\\0-1e.tfn \x00\xff\xc3u')))
        if op == "insert":
            data.insert(pos, byte)
        elif data and pos < len(data):
            if op == "delete":
                del data[pos]
            else:
                data[pos] = byte
    return bytes(data)


def dumps(obj: object) -> bytes:
    """Compact JSON as lines are written; with a lone surrogate, \\u-escaped
    (raw, it could not be UTF-8 at all)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode()


envelope_bytes = envelopes().map(lambda o: json.dumps(o, separators=(",", ":")).encode())
lines = st.one_of(
    st.binary(max_size=200),
    envelope_bytes,
    mutated(envelope_bytes),
    st.integers(1, 3000).map(lambda d: ('{"t":"x","v":' + deep_text(d) + "}").encode()),
)


def _obj(t: str, **fields: st.SearchStrategy) -> st.SearchStrategy:
    """A line of type ``t`` with these fields, plus a few unknown ones."""
    return st.builds(lambda known, extra: {**extra, "t": t, **known},
                     st.fixed_dictionaries(fields),
                     st.dictionaries(st.sampled_from(["x", "more", "ref", "n", "size"]),
                                     json_values(4), max_size=2))


names = st.text(min_size=1, max_size=12)
parts = st.lists(st.one_of(
    st.fixed_dictionaries({"k": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"k": st.just("data"), "mime": texts, "data": json_values(6)}),
    st.fixed_dictionaries({"k": st.just("blob"), "ref": names, "name": texts,
                           "size": st.one_of(ints, st.booleans(), texts)}),
    st.dictionaries(texts, json_values(4), max_size=3)), max_size=3)


def typed_lines() -> st.SearchStrategy:
    """Lines of every type with their required fields right and the rest fuzzed,
    so they get past the envelope checks and into the engine."""
    anything = json_values(6)
    return st.one_of(
        _obj("msg", th=names, parts=parts),
        _obj("state", th=names, state=st.one_of(st.sampled_from(["working", "done"]), names)),
        _obj("chunk", th=names, ref=names, n=st.one_of(ints, st.booleans()), last=anything,
             data=st.one_of(st.binary(max_size=30).map(
                 lambda b: __import__("base64").b64encode(b).decode()), anything)),
        _obj("ack", th=texts, re=texts),
        _obj("resume", seen=st.one_of(st.dictionaries(texts, texts, max_size=3), anything)),
        _obj("presence", hops=st.one_of(ints, st.booleans(), anything), doc=anything),
        _obj("grant", grant=st.dictionaries(st.sampled_from(
            ["iss", "sub", "caps", "exp", "nonce", "sig", "aud"]), anything, max_size=7)),
        _obj("introduce", peer=anything, grant=anything, addr=anything),
        _obj("mirror", th=names, line=st.one_of(envelopes(), anything), withdraw=anything),
        _obj("private", th=names),
        _obj("pong", re=texts),
        _obj("err", code=st.sampled_from(["forbidden", "unsupported", "blob_refused",
                                          "internal", "nonsense"]), ref=anything),
        _obj("future-thing", v=anything),
    )
