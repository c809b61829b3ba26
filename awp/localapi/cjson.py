"""JSON through the interpreter's C accelerator alone, without the ``json`` package.

``json/__init__`` imports ``json.decoder`` and ``json.encoder``, and both
import ``re`` (which imports ``enum``): about as much import time as the
rest of ``awp hook`` when there is nothing new.  The ``_json`` extension
that the ``json`` package drives does the actual work, and it only needs a
few attributes from its caller, so this module gives it those directly.

Behaviour matches ``json.loads`` and ``json.dumps`` (``ensure_ascii`` on,
``(", ", ": ")`` separators unless given, NaN and infinities allowed) for
the documents the local API exchanges; anything the C encoder would hand
back to Python-level code (an unsupported type) raises ``TypeError`` as
``json.dumps`` does.
"""

from __future__ import annotations

import _json

__all__ = ["dumps", "indented", "loads"]

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_WS = " \t\n\r"


class _DecoderContext:
    """The attributes ``_json.make_scanner`` reads off a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)
    memo: dict = {}


_scan = _json.make_scanner(_DecoderContext())


def loads(data: str | bytes | bytearray) -> object:
    """Decode one JSON document; ``ValueError`` (as ``json.loads``) when it is not."""
    s = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    if s.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    i, n = 0, len(s)
    while i < n and s[i] in _WS:
        i += 1
    try:
        obj, end = _scan(s, i)
    except StopIteration as e:
        raise ValueError(f"Expecting value: char {e.value}") from None
    except SystemError:
        # A syntax error past the first value: _json describes it with
        # json.decoder's exception class and fails oddly when that is not
        # loaded.  Only broken input pays for the import.
        import json

        return json.loads(s)
    while end < n and s[end] in _WS:
        end += 1
    if end != n:
        raise ValueError(f"Extra data: char {end}")
    return obj


def _unsupported(o: object) -> object:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _float_repr(o: float) -> str:
    if o != o:
        return "NaN"
    if o == float("inf"):
        return "Infinity"
    if o == -float("inf"):
        return "-Infinity"
    return float.__repr__(o)


def _scalar(o: object) -> str | None:
    """A JSON scalar other than a string as ``json.dumps`` writes it; None for anything else."""
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float_repr(o)
    return None


def dumps(obj: object, *, ensure_ascii: bool = True,
          separators: tuple[str, str] = (", ", ": ")) -> str:
    """Encode ``obj`` as ``json.dumps(obj, ensure_ascii=..., separators=...)`` does."""
    if isinstance(obj, str):
        enc = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        return enc(obj)
    if not isinstance(obj, dict | list | tuple):
        text = _scalar(obj)
        if text is None:
            _unsupported(obj)
        return text  # type: ignore[return-value]
    encode = _json.make_encoder(
        {}, _unsupported,
        _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring,
        None, separators[1], separators[0], False, False, True)
    return "".join(encode(obj, 0))


def _key(k: object) -> str:
    """A dict key as ``json.dumps`` writes it (keys become strings)."""
    text = k if isinstance(k, str) else _scalar(k)
    if text is None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")
    return text


def indented(obj: object, *, indent: int = 2, ensure_ascii: bool = False) -> str:
    """``json.dumps(obj, indent=indent, ensure_ascii=...)``, the text ``--json`` prints.

    The json package writes indented text with its Python encoder, whose
    import brings ``re`` and ``enum`` (several ms of every ``awp ... --json``);
    here the containers are laid out in Python and every scalar goes through
    :func:`dumps`, so the text is the same byte for byte.
    """
    enc = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    seen: set[int] = set()

    def walk(o: object, depth: int) -> str:
        if isinstance(o, str):
            return enc(o)
        if isinstance(o, dict | list | tuple):
            if not o:
                return "{}" if isinstance(o, dict) else "[]"
            if id(o) in seen:
                raise ValueError("Circular reference detected")
            seen.add(id(o))
            pad = "\n" + " " * (indent * (depth + 1))
            if isinstance(o, dict):
                items = [enc(_key(k)) + ": " + walk(v, depth + 1) for k, v in o.items()]
                open_, close = "{", "}"
            else:
                items = [walk(v, depth + 1) for v in o]
                open_, close = "[", "]"
            seen.discard(id(o))
            return open_ + pad + ("," + pad).join(items) + "\n" + " " * (indent * depth) + close
        return dumps(o, ensure_ascii=ensure_ascii)

    return walk(obj, 0)
