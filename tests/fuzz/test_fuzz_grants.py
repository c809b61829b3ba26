"""Fuzz grant verification: nothing unsigned passes, nothing raises."""

from __future__ import annotations

from fuzzgen import json_values, texts
from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.grants import CAPABILITIES, check_grant, make_grant
from awp.wire.keys import Identity

ISSUER, SUBJECT, OTHER = Identity.generate(), Identity.generate(), Identity.generate()
EXP = 4_102_444_800_000  # 2100-01-01


@given(json_values())
@example({"iss": ISSUER.key, "sub": SUBJECT.key, "caps": [], "exp": "2100-01-01T00:00:00Z",
          "sig": "x", "n": 2 ** 64})
def test_check_grant_answers_anything_with_a_reason(g):
    assert isinstance(check_grant(g), str)


def test_a_grant_nested_too_deep_to_canonicalise_is_refused():
    """Found by fuzzing: canonical JSON of a deep grant raised RecursionError
    (an example too deep for hypothesis to print, so it lives here)."""
    deep: object = 1
    for _ in range(3000):
        deep = [deep]
    g = {"iss": ISSUER.key, "sub": SUBJECT.key, "caps": [], "exp": "2100-01-01T00:00:00Z",
         "sig": "x", "deep": deep}

    def at_depth(n: int) -> str:  # as deep in the stack as a daemon task may be
        return at_depth(n - 1) if n else check_grant(g)

    assert at_depth(100) == "not canonicalisable"


@given(st.lists(st.one_of(st.sampled_from(CAPABILITIES), texts), max_size=4),
       st.booleans(), st.dictionaries(texts, json_values(4), max_size=2))
def test_made_grants_verify_and_no_change_survives(caps, with_aud, extra):
    try:
        g = make_grant(ISSUER, SUBJECT.key, caps, EXP, aud=OTHER.key if with_aud else None)
    except UnicodeEncodeError:  # a lone surrogate in a cap: nobody can sign that
        return
    assert check_grant(g) == ""
    for key in [k for k in g if k != "sig"]:
        assert check_grant({**g, key: [g[key]]}) != "", key
    if extra:
        assert check_grant({**extra, **g}) != "" or set(extra) <= set(g)
    # the signature of another issuer, or over another subject, does not verify
    assert check_grant({**g, "iss": OTHER.key}) == "signature does not verify"
    forged = make_grant(OTHER, SUBJECT.key, caps, EXP)
    assert check_grant({**g, "sig": forged["sig"]}) != ""
