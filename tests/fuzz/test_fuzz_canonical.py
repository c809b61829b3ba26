"""Fuzz canonical JSON: what grants and presence are signed over."""

from __future__ import annotations

import json

from fuzzgen import json_values
from hypothesis import given

from awp.wire.canonical import canonical_bytes, canonical_json, compact_json


@given(json_values(20))
def test_canonical_form_round_trips_and_is_stable(v):
    try:
        text = canonical_json(v)
        canonical_bytes(v)
    except UnicodeEncodeError:  # lone surrogates: not UTF-8, never signed
        return
    back = json.loads(text)
    assert back == v
    assert canonical_json(back) == text
    assert json.loads(compact_json(v)) == v
