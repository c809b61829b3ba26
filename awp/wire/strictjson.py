"""JSON as the wire carries it: numbers only, never NaN or an infinity.

Python's ``json`` reads ``NaN`` and ``Infinity`` and turns ``1e999`` into an
infinity, and writes them all back as ``NaN`` or ``Infinity``, which no
other JSON parser (the Go reference's included) takes.  A value like that
let into a line we send makes the peer refuse the line and close, and the
outbox replays it on every reconnect: one ``--data '{"a": NaN}'`` would cut
a link for good.  So everything read from a peer or a local caller is read
with :data:`DECODER`, and what we sign refuses such numbers too
(:func:`awp.wire.canonical.canonical_json`).

The same goes for a ``\ud800``-style escape of a lone surrogate: it
decodes to a string no UTF-8 writer takes (not SQLite, not the socket), so
each one becomes U+FFFD, as Go's decoder makes it
(:func:`without_lone_surrogates`).
"""

from __future__ import annotations

import json
import math
import re


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


# An escape that may decode to a surrogate, in the raw text (it is rare: only
# then is the decoded value walked).
_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPE_S = re.compile(r"\\u[dD][89a-fA-F]")
_LONE = re.compile("[\ud800-\udfff]")


def _replaced(v: object) -> object:
    if isinstance(v, str):
        return _LONE.sub("\ufffd", v)
    if isinstance(v, list):
        return [_replaced(x) for x in v]
    if isinstance(v, dict):
        return {_replaced(k): _replaced(x) for k, x in v.items()}
    return v


def without_lone_surrogates(text: str | bytes, value: object) -> object:
    """``value`` (decoded from ``text``) with each lone surrogate made U+FFFD.

    Walks the value, so call it once its depth is known to be bounded.
    """
    if isinstance(text, bytes):
        # No backslash (a memchr), no escape: the usual line stops here.
        return _replaced(value) if text.find(b"\\") >= 0 and _ESCAPE_B.search(text) else value
    return _replaced(value) if _ESCAPE_S.search(text) else value


def loads(text: str | bytes) -> object:
    """Decode one JSON document; ``ValueError`` for anything but plain JSON.

    Lone surrogates are left in: see :func:`without_lone_surrogates`.
    """
    return DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
