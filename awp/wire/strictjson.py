"""JSON as the wire carries it: numbers only, never NaN or an infinity.

Python's ``json`` reads ``NaN`` and ``Infinity`` and turns ``1e999`` into an
infinity, and writes them all back as ``NaN`` or ``Infinity``, which no
other JSON parser (the Go reference's included) takes.  A value like that
let into a line we send makes the peer refuse the line and close, and the
outbox replays it on every reconnect: one ``--data '{"a": NaN}'`` would cut
a link for good.  So everything read from a peer or a local caller is read
with :data:`DECODER`, and our encoders refuse such numbers too
(:mod:`awp.wire.canonical`).
"""

from __future__ import annotations

import json
import math


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def loads(text: str | bytes) -> object:
    """Decode one JSON document; ``ValueError`` for anything but plain JSON."""
    return DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
