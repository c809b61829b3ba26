"""A ``board-posts`` or ``board-submit`` line decoded once, its records' exact text kept.

A board line carrying records was decoded twice on every host it reached:
whole by the session (:func:`~awp.wire.messages.parse_line`, which every line
goes through), then its ``recs`` again by the board, which needs each
record's exact text to store and relay it (:func:`~awp.wire.board.line_recs`).
:func:`parse_recs_line` does both in one pass: the envelope members before
``recs`` are decoded on their own and each record is cut and decoded once.

It takes only the line as we write it (``recs`` its last member, nothing
unusual) and answers None for anything else, which then goes the ordinary
way (:func:`parse_line`, then :func:`line_recs`): every error and every odd
case is decided there, so this adds a fast path and no new rule.
"""

from __future__ import annotations

from .board import _array_items, line_recs
from .messages import _brackets_over
from .strictjson import DECODER

_SCAN = DECODER.scan_once
_RECS = '"recs":['
_STR_FIELDS = ("t", "id", "ts", "th", "re")
# How lines with records begin (as every implementation we know writes them;
# another spelling goes the ordinary way).
PREFIXES = (b'{"t":"board-posts",', b'{"t":"board-submit",')


class RecsLine(dict):
    """A parsed line (the same dict :func:`parse_line` gives) that also holds each
    record's exact text beside its value, in :attr:`cut`."""

    __slots__ = ("cut",)

    cut: list[tuple[str, object]]


def parse_recs_line(raw: bytes, max_depth: int) -> RecsLine | None:
    """``raw`` decoded as :func:`parse_line` would, with each record's text in
    ``.cut``; None when the line is not a plain board line with ``recs`` last
    (it may still be a good line: the caller parses it the ordinary way)."""
    if not raw.startswith(PREFIXES) or not raw.endswith(b"]}"):
        return None
    if raw.find(b"\\") >= 0 or _brackets_over(raw, max_depth):
        return None  # escapes (maybe lone surrogates) or deep nesting: the full rules
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    i = text.find(_RECS)
    if i < 0 or text[i - 1] != ",":
        return None
    got = _array_items(text, i + len(_RECS), 1 << 30)
    if got is None or got[1] != len(text) - 1:  # the array must close the line
        return None
    cut = got[0]
    try:
        head, end = _SCAN(text[:i - 1] + "}", 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    if end != i or type(head) is not dict or "recs" in head:
        return None
    get = head.get
    if not all(type(get(f, "")) is str for f in _STR_FIELDS):
        return None
    line = RecsLine(head)
    line["recs"] = [v for _t, v in cut]
    line.cut = cut
    return line


def recs_of(line: dict, raw: bytes, limit: int) -> list[tuple[str, object]] | None:
    """Each record of a board line as (its exact text, its value); None when the
    line has no ``recs`` array or more than ``limit`` records."""
    if isinstance(line, RecsLine):
        return line.cut if len(line.cut) <= limit else None
    return line_recs(raw.decode("utf-8"), limit)


__all__ = ["PREFIXES", "RecsLine", "parse_recs_line", "recs_of"]
