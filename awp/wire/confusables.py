"""The Unicode confusables skeleton (UTS #39), for telling look-alike names apart.

UTS #39 defines ``skeleton(s)``: decompose (NFD), replace each character by
its prototype from the published confusables table, decompose again. Two
strings with the same skeleton are confusable: ``buiIder`` (capital I),
``bսilder`` (Armenian seh), ``buildeг`` (Cyrillic ghe) and ``builꓒer`` (Lisu
pha) all have the skeleton of ``builder``.

No maintained PyPI package gives the skeleton itself (``confusable-homoglyphs``
keeps the table without its direction, ``confusables`` has not been released
since 2021 and matches differently), so the table ships with awp as data:
``confusables.txt`` beside this module holds fields 1 and 2 of every data
line of Unicode's ``confusables.txt`` (its header says which version), read
once, on first use: the hook and the CLI fast path never load it.

One addition to the standard's table: a character with no entry takes the
entry of its upper case, so ``ƅ`` (tone six, absent) goes where ``Ƅ`` goes
(``b``). Names are compared case-insensitively (:func:`awp.wire.names.name_fold`),
and a letter whose capital passes for another letter passes for it too.
"""

from __future__ import annotations

import os
import unicodedata

_TABLE: dict[str, str] | None = None
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "confusables.txt")


def table() -> dict[str, str]:
    """Source character to prototype string, loaded on first use."""
    global _TABLE
    if _TABLE is None:
        out: dict[str, str] = {}
        with open(DATA, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#") or ";" not in line:
                    continue
                src, dst = line.strip().split(";", 1)
                out[chr(int(src, 16))] = "".join(chr(int(h, 16)) for h in dst.split())
        _TABLE = out
    return _TABLE


def prototype(ch: str) -> str:
    """What ``ch`` is drawn like: its table entry, else its capital's, else itself."""
    t = table()
    got = t.get(ch)
    if got is not None:
        return got
    up = ch.upper()
    if up != ch and len(up) == 1:
        return t.get(up, ch)
    return ch


def skeleton(text: str) -> str:
    """UTS #39's skeleton of ``text`` (with the capital-letter addition above)."""
    s = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFD", "".join(prototype(ch) for ch in s))
