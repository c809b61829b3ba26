"""Peer names: one normal form where a name enters, and a fold to spot look-alikes.

A name is whatever a peer says it is called (hello, introduce, presence,
mirror ``of_name``) or what the local user passes as ``--name``. It is not
authenticated, so it is cleaned before it is stored or shown: Unicode NFC,
control and format characters (zero-width spaces, bidi overrides, BOMs)
dropped, every run of whitespace made one space, no surrounding spaces, at
most :data:`NAME_MAX` characters. That keeps "builder " and "builder\\u200b"
from passing for a different peer than "builder" on screen.

:func:`name_fold` goes further, for comparison only: compatibility forms,
case, accents and a hand-picked set of Latin look-alikes (Cyrillic and Greek
letters drawn the same, ``0``/``o``, ``1``/``l``) all fold together.
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

# Characters drawn like a Latin letter or digit, mapped to the one they imitate.
# Applied before case folding, so upper and lower case forms are both listed.
_LOOKS_LIKE = str.maketrans({
    # Cyrillic
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S", "Ү": "Y",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i",
    "ј": "j", "ѕ": "s", "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ү": "y",
    # Greek
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    "α": "a", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "υ": "u",
    # digits and signs that pass for letters
    "0": "o", "1": "l", "|": "l",
})


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
    """What a name looks like, for comparison: equal folds are look-alikes."""
    s = unicodedata.normalize("NFKC", clean_name(name)).translate(_LOOKS_LIKE).casefold()
    s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    s = "".join("-" if unicodedata.category(ch) == "Pd" else ch for ch in s)
    return " ".join(s.translate(_LOOKS_LIKE).split())

