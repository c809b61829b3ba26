"""Envelope parsing and the shapes of the lines we send.

Lines are kept as plain dicts: unknown fields must survive untouched (grants
and mirrored lines travel verbatim), and the hot path should not pay for model
objects.  :func:`parse_line` enforces exactly the checks that make a line a
``bad_frame``; everything else about a line is the engine's business.
"""

from __future__ import annotations

import re
from json.encoder import encode_basestring as _json_str

from .canonical import compact_json
from .errors import BAD_FRAME, ProtocolError
from .strictjson import DECODER, without_lone_surrogates

# Types whose receipt is acknowledged with an ack once stored.
ACKED_TYPES = frozenset({"msg", "state", "mirror", "private"})
# Types that count towards ``resume.seen`` (acks never do).
CONTENT_TYPES = frozenset({"msg", "state", "chunk", "introduce", "mirror", "private"})

_STR_FIELDS = ("t", "id", "ts", "th", "re")
# Deepest nesting of containers a line may have (``Limits.json_depth``).  Every
# later step that walks a value recursively (canonical JSON of a grant or a
# presence document, the local API's encoder) then stays far from Python's
# recursion limit, whatever the stack depth it runs at.
MAX_DEPTH = 64
_REQUIRED = {
    "msg": ("id", "th"),
    "state": ("id", "th", "state"),
    "chunk": ("id", "ref"),
    # acked like a msg, and an ack names the id
    "mirror": ("id",),
    "private": ("id",),
}

# An escape of a high surrogate not followed by a low one, or of a low one
# not preceded by a high one: text that decodes to a lone surrogate.
_LONE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def depth_over(value: object, limit: int) -> bool:
    """True when ``value`` nests containers more than ``limit`` deep.

    Iterative, so it is safe on values of any depth; the top-level object
    counts as depth 1.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d > limit:
            return True
        stack.extend((x, d + 1) for x in v if isinstance(x, dict | list))
    return False


def _too_deep(limit: int) -> ProtocolError:
    return ProtocolError(BAD_FRAME, f"JSON nested deeper than {limit} levels")


_SCAN = DECODER.scan_once  # the C scanner, with DECODER's number rules
# An ack exactly as we write them (``ack_line``) with plain ids: a backlog's
# acks come by the thousand, and this match gives the dict ``json`` would
# (same keys, same order, ASCII strings that need no unescaping).
_PLAIN_ACK = re.compile(
    rb'\{"t":"ack","id":"([0-9A-Za-z_-]{1,64})","ts":"([0-9T:.Z-]{1,40})",'
    rb'"th":"([0-9A-Za-z_-]{0,64})","re":"([0-9A-Za-z_-]{1,64})"\}\Z')


def _brackets_over(line: bytes, limit: int) -> bool:
    """Whether ``line`` opens more than ``limit`` containers.

    A long line is searched (``find`` is a memchr) only until the count
    passes the limit: counting every byte of a 1 MB line took 0.8 ms, the
    searches take 0.06.
    """
    if len(line) < 4096:
        return line.count(b"{") + line.count(b"[") > limit
    n = 0
    for ch in (b"{", b"["):
        i = line.find(ch)
        while i >= 0:
            n += 1
            if n > limit:
                return True
            i = line.find(ch, i + 1)
    return False


def _object_at_once(line: bytes) -> dict | None:
    """The usual line, an object from its first byte to its last, decoded with
    the scanner alone (:meth:`json.JSONDecoder.decode` adds two regex matches
    and a wrapper); None for anything else, which :func:`_object` decides."""
    if not line.startswith(b"{") or not line.endswith(b"}"):
        return None
    try:
        text = line.decode("utf-8")
        obj, end = _SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return obj if end == len(text) else None


def _object(line: bytes, max_depth: int) -> dict:
    """Decode a line that must hold one JSON object, or raise its ``bad_frame``."""
    if not line.lstrip(b" \t\r").startswith(b"{"):
        raise ProtocolError(BAD_FRAME, "line is not a JSON object")
    try:
        obj = DECODER.decode(line.decode("utf-8"))
    except RecursionError:  # the decoder's own bound, far above ours
        raise _too_deep(max_depth) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(BAD_FRAME, f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(BAD_FRAME, "line is not a JSON object")
    return obj


def parse_line(line: bytes, max_depth: int = MAX_DEPTH) -> dict:
    """Decode one wire line into its envelope dict.

    Raises ``ProtocolError(bad_frame)`` when the line is not a JSON object,
    nests deeper than ``max_depth`` (a ``mirror`` may go one level deeper: it
    wraps a line that had that much), misses ``t``, has wrongly-typed envelope
    fields, or is a ``msg``/``state``/``chunk``/``grant`` without the fields
    the type cannot do without.
    """
    if line.startswith(b'{"t":"ack",'):
        m = _PLAIN_ACK.match(line)
        if m is not None:
            ident, ts, th, re_ = m.groups()
            return {"t": "ack", "id": ident.decode(), "ts": ts.decode(), "th": th.decode(),
                    "re": re_.decode()}
    obj = _object_at_once(line)
    if obj is None:
        obj = _object(line, max_depth)
    # Counting brackets is cheap and bounds the depth from above: most lines
    # never need the walk.
    if (_brackets_over(line, max_depth)
            and depth_over(obj, max_depth + (obj.get("t") == "mirror"))):
        raise _too_deep(max_depth)
    obj = without_lone_surrogates(line, obj)  # type: ignore[assignment]
    t = obj.get("t")
    if not isinstance(t, str) or not t:
        raise ProtocolError(BAD_FRAME, "missing message type 't'")
    get = obj.get
    if not all(type(get(f, "")) is str for f in _STR_FIELDS):
        for f in _STR_FIELDS:  # which one, for the err's detail
            v = get(f)
            if v is not None and not isinstance(v, str):
                raise ProtocolError(BAD_FRAME, f"field {f!r} must be a string")
    for f in _REQUIRED.get(t, ()):
        v = obj.get(f)
        if not isinstance(v, str) or not v:
            raise ProtocolError(BAD_FRAME, f"{t} without {f!r}")
    if t == "msg":
        parts = obj.get("parts")
        if parts is not None and (
            not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts)
        ):
            raise ProtocolError(BAD_FRAME, "msg parts must be a list of objects")
    elif t == "grant" and not isinstance(obj.get("grant"), dict):
        raise ProtocolError(BAD_FRAME, "grant message without 'grant'")
    return obj


def storable(raw: bytes, line: dict) -> bytes:
    """The bytes to keep (store, journal, relay) for a line ``parse_line`` accepted.

    ``raw`` itself, unless it escapes a lone surrogate: then ``line`` written
    out again, where :func:`parse_line` has made each one U+FFFD.  Kept as
    received, the escape would decode to a string that nothing can encode
    as UTF-8 again, so every later reader of the stored line (the inbox, the
    dashboard) would fail on it.
    """
    # No backslash (a memchr), no escape: most lines stop at the first test.
    if raw.find(b"\\") < 0 or not _LONE_ESCAPE.search(raw):
        return raw
    return dump(line)[:-1]


def dump(obj: dict) -> bytes:
    """Serialise an envelope as one framed line."""
    return (compact_json(obj) + "\n").encode("utf-8")


# --- constructors for what we send --------------------------------------------------


def hello(
    *,
    id: str,
    ts: str,
    key: str,
    name: str,
    nonce: str,
    caps: list[str],
    about: str = "",
    addr: str | None = None,
    shares: list[str] | None = None,
    v: int = 0,
    seal: str | None = None,
) -> dict:
    line: dict = {
        "t": "hello", "id": id, "ts": ts, "v": v, "key": key, "name": name,
        "nonce": nonce, "caps": caps, "about": about,
    }
    if addr:
        line["addr"] = addr
    if shares:
        line["shares"] = shares
    if seal:
        line["seal"] = seal
    return line


def ack(th: str, re: str, *, id: str, ts: str) -> dict:
    return {"t": "ack", "id": id, "ts": ts, "th": th, "re": re}


def ack_line(th: str, re: str, *, id: str, ts: str) -> bytes:
    """:func:`dump` of :func:`ack`, written straight: one for every line stored.

    ``th`` and ``re`` are the peer's strings, escaped as :func:`dump` escapes
    them; ``id`` and ``ts`` are ours (a ULID, a stamp) and need no escaping.
    """
    return (f'{{"t":"ack","id":"{id}","ts":"{ts}","th":{_json_str(th)},'
            f'"re":{_json_str(re)}}}\n').encode()


def ack_lines(acks: list[tuple[str, str]], ids: list[str], ts: str) -> bytes:
    """:func:`ack_line` of each ``(th, re)`` with the id beside it, all with stamp
    ``ts``, in one piece: a stored run's acks, each thread escaped once."""
    mid = f'","ts":"{ts}","th":'
    ths: dict[str, str] = {}
    out = []
    for (th, named), ident in zip(acks, ids, strict=True):
        tj = ths.get(th)
        if tj is None:
            tj = ths[th] = _json_str(th)
        out.append(f'{{"t":"ack","id":"{ident}{mid}{tj},"re":{_json_str(named)}}}\n')
    return "".join(out).encode()


def err(code: str, *, id: str, ts: str, re: str | None = None, detail: str = "",
        ref: str | None = None) -> dict:
    line: dict = {"t": "err", "id": id, "ts": ts, "code": code}
    if re:
        line["re"] = re
    if detail:
        line["detail"] = detail
    if ref:
        line["ref"] = ref
    return line


_NOT_SPACE = re.compile(r"\S")
_HEAD = 4096  # characters of a text looked at for its first line


def _first_line(text: str) -> str:
    """The first line of ``text`` with more than whitespace in it, stripped.

    Reads only the start of a long text: splitting all of a 1 MB text into
    lines to keep the first took most of a millisecond, on the writer
    thread, for every msg stored.  Every line break ``splitlines`` knows is
    whitespace, so that line begins at the first character that is not.
    """
    m = _NOT_SPACE.search(text)
    if m is None:
        return ""
    head = text[m.start():m.start() + _HEAD]
    lines = head.splitlines(keepends=True)
    first = lines[0]
    if len(lines) > 1 or first != first.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029") \
            or m.start() + _HEAD >= len(text) or len(first.rstrip()) > 80:
        return first.strip()  # the whole line, or more than a subject shows of it
    for ln in text.splitlines():  # a long run of blanks within the line: the slow way
        ln = ln.strip()
        if ln:
            return ln
    return ""


def text_part(text: str) -> dict:
    return {"k": "text", "text": text}


def default_subject(parts: list[dict]) -> str:
    """First non-empty text line, trimmed, at most 80 chars; else a file name."""
    for p in parts:
        if p.get("k") == "text" and isinstance(p.get("text"), str):
            ln = _first_line(p["text"])
            if ln:
                return ln if len(ln) <= 80 else ln[:77] + "..."
    for p in parts:
        if p.get("k") == "blob" and isinstance(p.get("name"), str):
            return p["name"]
    return ""
