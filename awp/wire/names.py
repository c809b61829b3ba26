"""Peer names: one normal form where a name enters, and a fold to spot look-alikes.

A name is whatever a peer says it is called (hello, introduce, presence,
mirror ``of_name``) or what the local user passes as ``--name``. It is not
authenticated, so it is cleaned before it is stored or shown: Unicode NFC,
control and format characters (zero-width spaces, bidi overrides, BOMs)
dropped, every run of whitespace made one space, no surrounding spaces, at
most :data:`NAME_MAX` characters. That keeps "builder " and "builder\\u200b"
from passing for a different peer than "builder" on screen.

:func:`name_fold` goes further, for comparison only: compatibility forms,
case, accents and every look-alike the Unicode confusables table knows
(UTS #39 skeletons: Cyrillic, Greek, Armenian, Lisu letters drawn like Latin
ones, ``0``/``O``, ``1``/``I``/``l``) all fold together.
Two keys whose names fold equal are look-alikes: resolving that name refuses
to pick one, and labels add the key prefix.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

#: Longest name kept, in characters (a fixed bound: names are labels, not text).
NAME_MAX = 100

#: Combining marks kept after one base character (more only stack up on screen).
MAX_MARKS = 3

#: Letters that render as nothing at all although Unicode calls them letters.
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800")

def clean_name(text: object, limit: int = NAME_MAX) -> str:
    """The stored and shown form of a name; ``""`` for a non-string or nothing visible."""
    if not isinstance(text, str):
        return ""
    out: list[str] = []
    marks = 0
    for ch in unicodedata.normalize("NFC", text):
        cat = unicodedata.category(ch)
        if ch.isspace() or cat in ("Zs", "Zl", "Zp"):
            out.append(" ")
            marks = 0
        elif cat[0] == "C" or ch in _INVISIBLE:
            continue  # control, format (zero-width, bidi), surrogate, private, unassigned
        elif cat in ("Mn", "Me"):
            marks += 1
            if marks <= MAX_MARKS and out and out[-1] != " ":
                out.append(ch)
        else:
            out.append(ch)
            marks = 0
    return " ".join("".join(out).split())[:limit].rstrip()


@lru_cache(maxsize=4096)
def name_fold(name: str) -> str:
    """What a name looks like, for comparison: equal folds are look-alikes.

    The UTS #39 confusables skeleton (:mod:`awp.wire.confusables`) before and
    after case folding (so ``BUILDER``, ``buiIder`` and ``buildeг`` all meet
    ``builder``), then accents dropped, dashes made one, spaces made one.
    """
    from .confusables import skeleton

    s = skeleton(unicodedata.normalize("NFKC", clean_name(name))).casefold()
    s = skeleton(s).casefold()
    s = "".join(ch for ch in s if not unicodedata.combining(ch))
    s = "".join("-" if unicodedata.category(ch) == "Pd" else ch for ch in s)
    return " ".join(s.split())
