"""Echoing a value back in an error message, cut to a few dozen characters,
and one line of text cut to a width (:func:`clip`) for tables and short answers.

Errors reach a model's context (MCP results, hook output) and a person's
terminal. A bad argument may be megabytes long; repeating it whole would put
megabytes into that context. Every error that quotes what it was given does
it through :func:`echo`, and every error text that leaves awp (the local
API's answer, an MCP result, a CLI failure line) passes :func:`cut_message`
as a backstop. Stdlib only, importing nothing of awp's: every layer uses it.
"""

from __future__ import annotations

#: Most characters of a value quoted in an error.
ECHO_CHARS = 80
#: Most characters of a whole error message.
MESSAGE_CHARS = 2000


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """``value`` quoted for an error: its ``repr``, or its head and its length when long.

    ``'abc'`` stays ``'abc'``; a 5 MiB string becomes
    ``'aaaa…' (5242880 characters)``. The head is cut before quoting, so a
    huge value costs nothing to show.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def cut_message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """An error message cut to ``limit`` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters not shown)"


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters (``…`` marks a cut)."""
    line = text if type(text) is str else str(text or "")
    # Whitespace runs fold to one space.  A printable line holds no whitespace but
    # the ASCII space (isprintable is false for every other separator and control),
    # so one without doubled or outer spaces is already folded: the common case,
    # checked in C, for tables of thousands of rows.
    if not (line.isprintable() and "  " not in line and line[:1] != " " and line[-1:] != " "):
        line = " ".join(line.split())
    if width > 0 and len(line) > width:
        return line[: max(1, width - 1)] + "…"
    return line
