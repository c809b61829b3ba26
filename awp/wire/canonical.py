"""Canonical JSON: what grants and presence documents are signed over.

Keys sorted by code point, no whitespace, UTF-8, and only ``"``, ``\\`` and
control characters below U+0020 escaped.  Python's json module with
``ensure_ascii=False`` produces exactly that form, which is also what every
other implementation checks against.
"""

from __future__ import annotations

import json


def canonical_json(value: object) -> str:
    """``ValueError`` for NaN or an infinity: no JSON parser would read them back."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def canonical_bytes(value: object) -> bytes:
    return canonical_json(value).encode("utf-8")


# One encoder for every call: ``json.dumps`` with options builds a new one each time.
# NaN is let through here: what we write comes from input the strict decoder
# (wire/strictjson.py) already checked, and this also writes the local API's
# answers, which must never fail on a value stored before that check existed.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact_json(value: object) -> str:
    """How we write wire lines: no whitespace, no HTML or non-ASCII escaping."""
    return _COMPACT.encode(value)
