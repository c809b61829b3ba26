"""The multi-endpoint address: one key and every way in, as one pasteable text.

``awp:`` + unpadded base64url of the compact JSON
``{"k":"ed25519:…","e":["tcp:…","ws://…","tc…"]}``.  A bare ``tcp:`` or
``tc…`` address says where to knock but not who should answer; this one
names the key, so a dialer can try every endpoint at once and refuse any
that answers as someone else.

Endpoints are single-address texts.  One this build cannot parse (a kind
added later, such as a WebSocket URL before its binding) is kept as written
rather than failing the whole address: the dialer reaches what it can and
reports the rest.  Pure: no sockets, no trio, no sqlite.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass

from ..base.echo import echo
from .address import Address, AddressError, parse_address
from .b64 import b64url
from .canonical import compact_json
from .keys import KeyError_, decode_key, normalize_key

__all__ = [
    "MAX_ENDPOINT",
    "MAX_ENDPOINTS",
    "MAX_JSON",
    "MultiAddress",
    "check_endpoint",
    "decode_json_text",
    "endpoints_of",
    "format_multi",
    "key_of",
    "looks_like_multi",
    "parse_multi",
]

PREFIX = "awp:"
MAX_ENDPOINTS = 8  # endpoints in one address
MAX_ENDPOINT = 1024  # bytes of one endpoint's text
MAX_JSON = 4096  # bytes of the whole decoded JSON
# Schemes this build parses itself: a malformed one of these is an error, not
# an unknown kind to keep.
_KNOWN = ("tcp:", "unix:", "tailcat:", "ws:", "wss:")
# What an endpoint of a kind we do not know must still look like: a scheme,
# then printable text without spaces.
_OTHER_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:[\x21-\x7e]+")
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
_FORM = 'awp: followed by base64url of {"k":"ed25519:...","e":["tcp:HOST:PORT",...]}'


@dataclass(frozen=True)
class MultiAddress:
    """A key and its endpoints in the order given (canonical texts, unknown kinds as written)."""

    key: str
    endpoints: tuple[str, ...]

    def __str__(self) -> str:
        return format_multi(self.key, self.endpoints)

    def dialable(self) -> list[tuple[str, Address]]:
        """The endpoints this build can dial, parsed."""
        out = []
        for e in self.endpoints:
            try:
                out.append((e, parse_address(e)))
            except AddressError:
                pass
        return out

    def unknown(self) -> list[str]:
        """The endpoints of a kind this build cannot dial (kept, reported)."""
        known = {e for e, _a in self.dialable()}
        return [e for e in self.endpoints if e not in known]


def check_endpoint(text: object, where: str = "endpoint") -> str:
    """One endpoint's canonical text; an unknown kind is returned as given.

    Raises :class:`AddressError` for what is no endpoint at all: not a
    string, over :data:`MAX_ENDPOINT` bytes, control characters, or a known
    kind (tcp, unix, tailcat) written wrong.
    """
    if not isinstance(text, str):
        raise AddressError(f"{where} must be a string, not {type(text).__name__}")
    if len(text.encode("utf-8")) > MAX_ENDPOINT:
        raise AddressError(f"{where} {echo(text)} is over {MAX_ENDPOINT} bytes")
    try:
        return str(parse_address(text))
    except AddressError as e:
        s = text.strip()
        if s.lower().startswith(_KNOWN) or s.startswith("tc") and ":" not in s:
            raise AddressError(f"{where}: {e}") from None
        if not _OTHER_RE.fullmatch(s):
            raise AddressError(f"{where} {echo(text)} is not an address: {e}") from None
        if s.lower().startswith((PREFIX, "awpinv:")):
            raise AddressError(f"{where} {echo(text)} nests an awp: text in another") from None
        return s


def looks_like_multi(text: object) -> bool:
    """Whether ``text`` is written as a multi-endpoint address (it may still be malformed)."""
    return isinstance(text, str) and text.strip().lower().startswith(PREFIX)


def decode_json_text(text: object, prefix: str, what: str, form: str) -> dict:
    """The JSON object inside ``prefix`` + base64url text, bounded before decoding."""
    if not isinstance(text, str):
        raise AddressError(f"{what} must be a string, not {type(text).__name__}")
    s = text.strip()
    if not s.lower().startswith(prefix):
        raise AddressError(f"not {what}: expected {form}")
    body = s[len(prefix):]
    if len(body) > (MAX_JSON * 4 + 2) // 3:
        raise AddressError(f"{what} is too long ({len(s)} characters; its JSON is at most"
                           f" {MAX_JSON} bytes)")
    if not body:
        raise AddressError(f"empty {what}: expected {form}")
    if not _B64URL_RE.fullmatch(body) or len(body) % 4 == 1:
        raise AddressError(f"{what} is not base64url after {prefix!r} (cut short or mangled"
                           " in copying?)")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        obj = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise AddressError(f"{what} does not hold JSON (cut short or mangled in copying?)"
                           ) from None
    if not isinstance(obj, dict):
        raise AddressError(f"{what} does not hold a JSON object")
    return obj


def key_of(v: object, what: str) -> str:
    """The normalized ed25519 key ``k`` of an address or invite."""
    try:
        decode_key(v)
        return normalize_key(v)  # type: ignore[arg-type]
    except KeyError_ as e:
        raise AddressError(f"{what}: its key (k) is not an ed25519 key: {e}") from None


def endpoints_of(v: object, what: str) -> tuple[str, ...]:
    """The checked, de-duplicated endpoint list ``e`` of an address or invite."""
    if not isinstance(v, list):
        raise AddressError(f"{what}: its endpoints (e) must be a list of addresses")
    if not v:
        raise AddressError(f"{what} names no endpoint")
    if len(v) > MAX_ENDPOINTS:
        raise AddressError(f"{what} names {len(v)} endpoints; at most {MAX_ENDPOINTS}")
    out = [check_endpoint(e, f"{what}, endpoint {i + 1}") for i, e in enumerate(v)]
    return tuple(dict.fromkeys(out))


def parse_multi(text: object) -> MultiAddress:
    """Parse an ``awp:`` address; :class:`AddressError` says what is wrong."""
    obj = decode_json_text(text, PREFIX, "a multi-endpoint address", _FORM)
    what = "the multi-endpoint address"
    return MultiAddress(key_of(obj.get("k"), what), endpoints_of(obj.get("e"), what))


def format_multi(key: str, endpoints: list[str] | tuple[str, ...]) -> str:
    """The ``awp:`` text for ``key`` and ``endpoints`` (checked as :func:`parse_multi` does)."""
    what = "the multi-endpoint address"
    k = key_of(key, what)
    es = list(endpoints_of(list(endpoints), what))
    data = compact_json({"k": k, "e": es}).encode("utf-8")
    if len(data) > MAX_JSON:
        raise AddressError(f"{what} would be {len(data)} bytes of JSON; at most {MAX_JSON}")
    return PREFIX + b64url(data)
