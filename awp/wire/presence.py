"""Presence documents: signed by their origin, relayed byte for byte.

A relay must forward the origin's exact bytes (only the envelope and ``hops``
change), so this module also finds the raw text of the ``doc`` member inside
a received line without re-serialising it.
"""

from __future__ import annotations

import json
from json.decoder import scanstring

from .canonical import canonical_bytes, compact_json
from .keys import Identity, KeyError_, decode_key, verify
from .numbers import is_count
from .timefmt import parse_ts

MAX_DOC = 64 * 1024
MAX_HOPS = 8
_WS = " \t\r\n"
_decoder = json.JSONDecoder()


def sign_doc(identity: Identity, doc: dict) -> str:
    """The signed document as the exact text we send (compact, not canonical)."""
    body = {k: v for k, v in doc.items() if k != "sig"}
    body["sig"] = identity.sign(canonical_bytes(body))
    return compact_json(body)


def check_doc(doc: object, raw_len: int) -> str:
    """Empty when the document is well formed, small enough and signed by its origin."""
    if raw_len > MAX_DOC:
        return "document over 64 KiB"
    if not isinstance(doc, dict):
        return "not an object"
    try:
        decode_key(doc.get("origin"))
    except KeyError_ as e:
        return f"origin: {e}"
    if not is_count(doc.get("seq")):
        return "bad seq"
    try:
        parse_ts(doc.get("ts"))
    except ValueError:
        return "bad ts"
    sig = doc.get("sig")
    if not isinstance(sig, str):
        return "no signature"
    body = {k: v for k, v in doc.items() if k != "sig"}
    try:
        signed = canonical_bytes(body)
    except (TypeError, ValueError, RecursionError):
        return "not canonicalisable"
    if not verify(doc["origin"], signed, sig):
        return "signature does not verify"
    return ""


def raw_member(line: str, name: str) -> str | None:
    """The exact source text of top-level member ``name`` of a JSON object line.

    When the name appears more than once, the last one counts, as it does in
    the parsed object: the bytes kept and relayed are then the bytes whose
    signature was checked.
    """
    i = 0
    n = len(line)
    while i < n and line[i] in _WS:
        i += 1
    if i >= n or line[i] != "{":
        return None
    i += 1
    found: str | None = None
    while True:
        while i < n and line[i] in _WS:
            i += 1
        if i >= n or line[i] == "}":
            return found if i < n else None
        if line[i] != '"':
            return None
        try:
            key, i = scanstring(line, i + 1)
        except ValueError:
            return None
        while i < n and line[i] in _WS:
            i += 1
        if i >= n or line[i] != ":":
            return None
        i += 1
        while i < n and line[i] in _WS:
            i += 1
        start = i
        try:
            _val, i = _decoder.raw_decode(line, i)
        except ValueError:
            return None
        if key == name:
            found = line[start:i]
        while i < n and line[i] in _WS:
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        return found if i < n and line[i] == "}" else None


def presence_line(ident: str, ts: str, hops: int, raw_doc: str,
                  more: list[tuple[int, str]] | None = None) -> bytes:
    """One presence line; ``more`` adds further documents (cap ``presence-batch``).

    Extra documents ride in ``"more":[{"hops":n,"doc":{...}},...]``, each
    still the origin's exact bytes.
    """
    tail = ""
    if more:
        tail = ',"more":[' + ",".join(f'{{"hops":{h},"doc":{r}}}' for h, r in more) + "]"
    return (f'{{"t":"presence","id":"{ident}","ts":"{ts}","hops":{hops},"doc":'
            + raw_doc + tail + "}\n").encode("utf-8")


def raw_elements(array_text: str, limit: int) -> list[str] | None:
    """The exact source text of each element of a JSON array (at most ``limit``)."""
    if not array_text.startswith("["):
        return None
    i, n = 1, len(array_text)
    out: list[str] = []
    while True:
        while i < n and array_text[i] in _WS:
            i += 1
        if i < n and array_text[i] == "]" and not out:
            return out
        start = i
        try:
            _val, i = _decoder.raw_decode(array_text, i)
        except ValueError:
            return None
        out.append(array_text[start:i])
        if len(out) > limit:
            return None
        while i < n and array_text[i] in _WS:
            i += 1
        if i < n and array_text[i] == ",":
            i += 1
            continue
        return out if i < n and array_text[i] == "]" else None


def line_entries(text: str, line: dict, limit: int) -> list[tuple[int, str, object]]:
    """Every (hops, raw doc, parsed doc) a presence line carries; malformed ones left out."""
    out: list[tuple[int, str, object]] = []
    raw = raw_member(text, "doc")
    if raw is not None and _hops_ok(line.get("hops")):
        out.append((line["hops"], raw, line.get("doc")))
    more = line.get("more")
    raw_more = raw_member(text, "more") if isinstance(more, list) else None
    elements = raw_elements(raw_more, limit) if raw_more is not None else None
    if elements is None or len(elements) != len(more):  # type: ignore[arg-type]
        return out
    for el_text, el in zip(elements, more, strict=True):  # type: ignore[arg-type]
        if not isinstance(el, dict) or not _hops_ok(el.get("hops")):
            continue
        doc_raw = raw_member(el_text, "doc")
        if doc_raw is not None:
            out.append((el["hops"], doc_raw, el.get("doc")))
    return out


def _hops_ok(hops: object) -> bool:
    return is_count(hops)
