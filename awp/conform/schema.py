"""Schema checks for every line a peer under test sends.

Each check returns a list of human-readable problems (empty when the line is
fine).  The rules are those of wire-facts sections 1, 2 and 12: a line is at
most 1 MiB, a JSON object, carries a ULID ``id`` and an RFC 3339 ``ts``, and
the fields its type needs, with keys, nonces and signatures in their exact
encodings.  The board's lines (SPEC.md section 14) are checked by
:mod:`.boardschema`.  Unknown types and unknown fields are never a problem.
"""

from __future__ import annotations

import json
import re

from ..wire.errors import KNOWN as KNOWN_ERR_CODES
from ..wire.framing import MAX_LINE
from ..wire.ids import is_ulid
from ..wire.strictjson import loads as strict_loads
from ..wire.timefmt import parse_ts

KEY_RE = re.compile(r"ed25519:[A-Za-z0-9_-]{43}")
NONCE_RE = re.compile(r"[A-Za-z0-9_-]{43}")
SIG_RE = re.compile(r"[A-Za-z0-9_-]{86}")
GRANT_NONCE_RE = re.compile(r"[A-Za-z0-9_-]{16,}")
STD_B64_RE = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

def shown(obj: object, limit: int = 200) -> str:
    """A line or value as compact text, clipped for a report."""
    if isinstance(obj, bytes):
        text = obj.decode("utf-8", "replace")
    elif isinstance(obj, str):
        text = obj
    else:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + f"...({len(text)} chars)"
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)

def decode(raw: bytes) -> tuple[dict | None, list[str]]:
    """Parse one raw line (without ``\\n``): the object, or None and the problem."""
    if len(raw) > MAX_LINE:
        return None, [f"line of {len(raw)} bytes is over the 1 MiB limit"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, [f"line is not UTF-8: {shown(raw)}"]
    try:
        obj = strict_loads(text)
    except (ValueError, RecursionError):
        return None, [f"line is not JSON: {shown(text)}"]
    if not isinstance(obj, dict):
        return None, [f"line is not a JSON object: {shown(text)}"]
    problems = check(obj)
    if obj.get("t") == "board-posts":
        from .boardschema import check_board_size

        problems += check_board_size("board-posts", len(raw))
    if b"\r" in raw:
        problems.append("line contains a carriage return (lines end in \\n alone)")
    return obj, problems

def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

def _str(problems: list[str], t: str, line: dict, field: str, *, required: bool = True,
         nonempty: bool = False, pattern: re.Pattern | None = None, what: str = "") -> None:
    if field not in line:
        if required:
            problems.append(f"{t} without {field!r}")
        return
    v = line[field]
    if not isinstance(v, str):
        problems.append(f"{t}.{field} is not a string: {shown(v, 60)}")
    elif nonempty and not v:
        problems.append(f"{t}.{field} is empty")
    elif pattern is not None and not pattern.fullmatch(v):
        problems.append(f"{t}.{field} is not {what}: {shown(v, 100)}")

def _str_list(problems: list[str], t: str, line: dict, field: str, *,
              required: bool = False) -> None:
    if field not in line:
        if required:
            problems.append(f"{t} without {field!r}")
        return
    v = line[field]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        problems.append(f"{t}.{field} is not a list of strings: {shown(v, 100)}")

def _ts(problems: list[str], where: str, v: object) -> None:
    try:
        parse_ts(v)  # type: ignore[arg-type]
    except ValueError:
        problems.append(f"{where} is not an RFC 3339 timestamp: {shown(v, 60)}")

def check_grant(g: object, where: str = "grant") -> list[str]:
    """Problems of one grant object (not its signature: that needs the issuer's key)."""
    if not isinstance(g, dict):
        return [f"{where} is not an object: {shown(g, 100)}"]
    p: list[str] = []
    _str(p, where, g, "iss", pattern=KEY_RE, what="an ed25519: key")
    _str(p, where, g, "sub", pattern=KEY_RE, what="an ed25519: key")
    _str(p, where, g, "aud", required=False, pattern=KEY_RE, what="an ed25519: key")
    _str_list(p, where, g, "caps", required=True)
    if "exp" not in g:
        p.append(f"{where} without 'exp'")
    else:
        _ts(p, f"{where}.exp", g["exp"])
    _str(p, where, g, "nonce", pattern=GRANT_NONCE_RE, what="base64url")
    _str(p, where, g, "sig", pattern=SIG_RE, what="an 86-char base64url signature")
    return p

def _check_part(p: list[str], i: int, part: object) -> None:
    where = f"msg.parts[{i}]"
    if not isinstance(part, dict):
        p.append(f"{where} is not an object")
        return
    k = part.get("k")
    if not isinstance(k, str) or not k:
        p.append(f"{where} without a kind 'k'")
        return
    if k in ("text", "code"):
        _str(p, where, part, "text")
    elif k == "data":
        _str(p, where, part, "mime", required=False)
        if "data" not in part:
            p.append(f"{where} (data) without 'data'")
    elif k == "blob":
        _str(p, where, part, "ref", nonempty=True)
        _str(p, where, part, "name", required=False)
        _str(p, where, part, "mime", required=False)
        size = part.get("size")
        if not _is_int(size) or size < 0:
            p.append(f"{where} (blob) needs an integer 'size': {shown(size, 40)}")

def check(line: dict) -> list[str]:
    """Problems of one decoded line; the envelope, then its type's fields."""
    p: list[str] = []
    t = line.get("t")
    if not isinstance(t, str) or not t:
        return [f"line without a message type 't': {shown(line)}"]
    if "id" not in line:
        p.append(f"{t} without 'id'")
    elif not is_ulid(line["id"]):
        p.append(f"{t}.id is not a 26-char uppercase ULID: {shown(line['id'], 60)}")
    if "ts" not in line:
        p.append(f"{t} without 'ts'")
    else:
        _ts(p, f"{t}.ts", line["ts"])
    for f in ("th", "re"):
        if f in line and not isinstance(line[f], str):
            p.append(f"{t}.{f} is not a string: {shown(line[f], 60)}")

    if t == "hello":
        if "v" not in line:
            p.append("hello without 'v'")
        elif not _is_int(line["v"]):
            p.append(f"hello.v is not an integer: {shown(line['v'], 40)}")
        _str(p, t, line, "key", pattern=KEY_RE, what="ed25519: + 43 base64url chars")
        _str(p, t, line, "name", required=False)
        _str(p, t, line, "nonce", pattern=NONCE_RE, what="43 base64url chars (32 bytes)")
        _str_list(p, t, line, "caps")
        _str(p, t, line, "about", required=False)
        _str(p, t, line, "addr", required=False)
        _str_list(p, t, line, "shares")
    elif t == "auth":
        _str(p, t, line, "sig", pattern=SIG_RE, what="86 base64url chars (64 bytes)")
        grants = line.get("grants")
        if grants is not None:
            if not isinstance(grants, list):
                p.append("auth.grants is not a list")
            else:
                for i, g in enumerate(grants):
                    p += check_grant(g, f"auth.grants[{i}]")
    elif t == "resume":
        seen = line.get("seen")
        if seen is not None and (not isinstance(seen, dict) or not all(
                isinstance(v, str) for v in seen.values())):
            p.append(f"resume.seen is not an object of thread -> id: {shown(seen, 100)}")
    elif t == "ack":
        _str(p, t, line, "th")
        _str(p, t, line, "re", nonempty=True)
    elif t == "pong":
        _str(p, t, line, "re", nonempty=True)
    elif t == "msg":
        _str(p, t, line, "th", nonempty=True)
        _str(p, t, line, "subject", required=False)
        parts = line.get("parts")
        if "parts" not in line:
            p.append("msg without 'parts'")
        elif not isinstance(parts, list):
            p.append("msg.parts is not a list")
        else:
            for i, part in enumerate(parts):
                _check_part(p, i, part)
    elif t == "state":
        _str(p, t, line, "th", nonempty=True)
        _str(p, t, line, "state", nonempty=True)
        _str(p, t, line, "note", required=False)
    elif t == "chunk":
        _str(p, t, line, "ref", nonempty=True)
        _str(p, t, line, "th", required=False)
        n = line.get("n")
        if not _is_int(n) or n < 0:
            p.append(f"chunk.n is not a non-negative integer: {shown(n, 40)}")
        if not isinstance(line.get("last"), bool):
            p.append("chunk without a boolean 'last'")
        _str(p, t, line, "data", pattern=STD_B64_RE, what="padded standard base64")
    elif t == "err":
        code = line.get("code")
        if not isinstance(code, str):
            p.append("err without a 'code'")
        elif code not in KNOWN_ERR_CODES:
            p.append(f"err.code {code!r} is not a known code")
        _str(p, t, line, "detail", required=False)
        _str(p, t, line, "ref", required=False)
    elif t == "bye":
        _str(p, t, line, "reason", required=False)
    elif t == "grant":
        p += check_grant(line.get("grant"), "grant.grant")
    elif t == "introduce":
        peer = line.get("peer")
        if not isinstance(peer, dict):
            p.append("introduce without a 'peer' object (key, name, address)"
                     + (" (it has a top-level 'key': the peer's fields go inside 'peer')"
                        if "key" in line else ""))
        else:
            _str(p, "introduce.peer", peer, "key", pattern=KEY_RE, what="an ed25519: key")
            _str(p, "introduce.peer", peer, "name", required=False)
            _str(p, "introduce.peer", peer, "address", required=False)
        if "grant" in line:
            p += check_grant(line["grant"], "introduce.grant")
    elif t == "presence":
        if not _is_int(line.get("hops")):
            p.append("presence without an integer 'hops'")
        if not isinstance(line.get("doc"), dict):
            p.append("presence without a 'doc' object")
    elif t in ("mirror", "private"):
        _str(p, t, line, "th", nonempty=True)
    elif t.startswith("board-"):
        from .boardschema import check_board  # imports this module: loaded on first use

        p += check_board(t, line)
    return p
