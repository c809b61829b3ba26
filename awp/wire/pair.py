"""Pair streams (cap ``pair``): the control lines of a live byte stream.

Pure: no I/O.  A pair stream runs on a side connection named ``pair``
(:mod:`awp.node.bulk_side` does the handshake): the dialer writes one
request line, the other side answers ``ok`` or ``err``, and from then on the
connection carries raw bytes both ways, ended by half-closes.  When it is
over the dialing side records it in a thread with a ``data`` part of the
mime :data:`RECORD_MIME`.  SPEC.md ("Pair streams") has the rules;
``tests/unit/test_pair_wire.py`` checks these helpers.
"""

from __future__ import annotations

import re
from typing import Any

CAP = "pair"
SIDE = "pair"  # ``hello.side`` of a pair side connection
RECORD_MIME = "application/vnd.awp.pair+json"
MAX_ID = 64  # characters of a request's ``id`` and ``th``

_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class PairError(ValueError):
    """A control line that breaks the rules; its text says which."""


def request(ident: str, th: str = "") -> dict:
    """The dialer's first line on a pair side connection."""
    line: dict[str, Any] = {"t": "pair", "id": ident}
    if th:
        line["th"] = th
    return line


def check_request(line: object) -> tuple[str, str]:
    """``(id, th)`` of a well-formed request line; :class:`PairError` otherwise."""
    if not isinstance(line, dict) or line.get("t") != "pair":
        raise PairError("the first line of a pair stream must be {\"t\":\"pair\",...}")
    ident, th = line.get("id"), line.get("th", "")
    if not isinstance(ident, str) or not _WORD.fullmatch(ident):
        raise PairError(f"pair id must be 1 to {MAX_ID} letters, digits or _.:-")
    if not isinstance(th, str) or (th and not _WORD.fullmatch(th)):
        raise PairError(f"pair th must be 1 to {MAX_ID} letters, digits or _.:-")
    return ident, th


def ok(ident: str) -> dict:
    return {"t": "ok", "id": ident}


def err(ident: str, code: str, detail: str) -> dict:
    return {"t": "err", "id": ident, "code": code, "detail": detail}


def answer(line: object, ident: str) -> str:
    """Empty for an ``ok`` to request ``ident``; otherwise why the stream was refused."""
    if not isinstance(line, dict):
        return "the peer's answer is not an object"
    if line.get("t") == "ok" and line.get("id") == ident:
        return ""
    if line.get("t") == "err":
        detail = line.get("detail")
        code = line.get("code")
        why = detail if isinstance(detail, str) and detail else "refused"
        return f"{why[:300]} ({code})" if isinstance(code, str) else why[:300]
    return f"unexpected answer to a pair request: {str(line)[:200]}"


def record_part(*, ident: str, sent: int, received: int, ms: int, error: str = "") -> dict:
    """The ``data`` part that records, in a thread, that a stream ran.

    ``sent`` and ``received`` are the bytes as the dialing side counted them
    (to the peer, from the peer); ``ms`` its duration; ``error`` why it broke.
    """
    data: dict[str, Any] = {"id": ident, "sent": sent, "received": received, "ms": ms}
    if error:
        data["error"] = error[:300]
    return {"k": "data", "mime": RECORD_MIME, "data": data}


def describe(data: object, peer_name: str = "") -> str:
    """One line of text for a record's ``data`` (what ``awp log`` shows beside it)."""
    if not isinstance(data, dict):
        return "a pair stream ran"
    with_ = f" with {peer_name}" if peer_name else ""
    sent, received, ms = (data.get(k) for k in ("sent", "received", "ms"))
    n = [v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0
         for v in (sent, received, ms)]
    text = (f"pair stream{with_}: {_size(n[0])} sent, {_size(n[1])} received,"
            f" {n[2] / 1000:.1f} s")
    error = data.get("error")
    if isinstance(error, str) and error:
        text += f"; it broke: {error[:200]}"
    return text


def _size(n: int) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} B"
