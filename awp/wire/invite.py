"""Invites: the text handed over, and the proof a redeemer puts in its auth line.

An invite is ``awpinv:`` + unpadded base64url of the compact JSON
``{"k":KEY,"e":[endpoints],"i":INVITE_ID,"s":SECRET,"n":NAME}``: the
inviter's key and endpoints (as in an ``awp:`` address), the invite's id, a
fresh 32-byte secret (base64url) and the inviter's name, for showing.

The secret never crosses the wire.  The redeemer's ``auth`` line carries
``"invite": {"id": INVITE_ID, "mac": MAC}`` where::

    verifier = BLAKE2b-256(secret, person="awp-invite-v0")
    MAC      = base64url(HMAC-SHA256(verifier,
                 "awp-invite-v0" 0x00 auth_transcript(dialer hello, listener hello)))

The transcript holds both hello lines, so both nonces and both keys: a
recorded handshake proves nothing on another connection, and a middlebox that
reads the line learns nothing it can reuse.  The inviter stores only the
verifier (never the secret), which is all it needs to check a MAC.  Pure:
hashlib and hmac from the standard library, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from .address import AddressError
from .b64 import b64url
from .canonical import compact_json
from .keys import auth_transcript
from .multiaddr import MAX_JSON, decode_json_text, endpoints_of, key_of
from .names import clean_name

__all__ = [
    "INVITE_CONTEXT",
    "Invite",
    "check_invite_field",
    "format_invite",
    "invite_mac",
    "looks_like_invite",
    "mac_matches",
    "new_invite_id",
    "parse_invite",
    "verifier_of",
]

PREFIX = "awpinv:"
INVITE_CONTEXT = b"awp-invite-v0"
SECRET_BYTES = 32
SECRET_CHARS = 43  # unpadded base64url of 32 bytes
MAC_CHARS = 43  # unpadded base64url of an HMAC-SHA256
NAME_CHARS = 100
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
ID_RE = re.compile(r"inv_[a-km-np-z2-9]{12}")
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]+")
_FORM = ('awpinv: followed by base64url of {"k":KEY,"e":[...],"i":ID,"s":SECRET,"n":NAME}'
         " (what awp invite printed)")


@dataclass(frozen=True)
class Invite:
    """A parsed invite text; ``secret`` is the 32 raw bytes."""

    key: str
    endpoints: tuple[str, ...]
    id: str
    secret: bytes
    name: str = ""

    def __str__(self) -> str:
        return format_invite(self)

    def __repr__(self) -> str:  # never the secret, not even in a traceback
        return f"Invite(key={self.key!r}, endpoints={self.endpoints!r}, id={self.id!r})"

    @property
    def verifier(self) -> bytes:
        return verifier_of(self.secret)


def new_invite_id() -> str:
    """``inv_`` and 12 random characters (about 60 bits; ids are looked up, not secret)."""
    return "inv_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def verifier_of(secret: bytes) -> bytes:
    """What the inviter keeps of the secret, and the MAC's key."""
    return hashlib.blake2b(secret, digest_size=32, person=INVITE_CONTEXT).digest()


def invite_mac(verifier: bytes, dialer_hello: bytes, listener_hello: bytes) -> str:
    """The redeemer's proof over this connection's two hello lines (bytes without ``\\n``)."""
    msg = INVITE_CONTEXT + b"\x00" + auth_transcript(dialer_hello, listener_hello)
    return b64url(hmac.new(verifier, msg, hashlib.sha256).digest())


def mac_matches(verifier: bytes, dialer_hello: bytes, listener_hello: bytes, mac: str) -> bool:
    """Constant-time check of a redeemer's MAC."""
    want = invite_mac(verifier, dialer_hello, listener_hello)
    return hmac.compare_digest(want.encode("ascii"), mac.encode("ascii"))


def check_invite_field(v: object) -> tuple[str, str]:
    """``(id, mac)`` of an ``auth.invite`` field; ``ValueError`` for a bad shape.

    Checked before any lookup, so a hostile auth line costs a regex or two.
    """
    if not isinstance(v, dict):
        raise ValueError("auth.invite must be an object with id and mac")
    ident, mac = v.get("id"), v.get("mac")
    if not isinstance(ident, str) or not ID_RE.fullmatch(ident):
        raise ValueError("auth.invite.id is not an invite id (inv_ and 12 characters)")
    if (not isinstance(mac, str) or len(mac) != MAC_CHARS
            or not _B64URL_RE.fullmatch(mac)):
        raise ValueError(f"auth.invite.mac is not {MAC_CHARS} characters of base64url")
    return ident, mac


def looks_like_invite(text: object) -> bool:
    """Whether ``text`` is written as an invite (it may still be malformed)."""
    return isinstance(text, str) and text.strip().lower().startswith(PREFIX)


def parse_invite(text: object) -> Invite:
    """Parse an invite text; :class:`AddressError` says what is wrong (never the secret)."""
    obj = decode_json_text(text, PREFIX, "an invite", _FORM)
    what = "the invite"
    key = key_of(obj.get("k"), what)
    endpoints = endpoints_of(obj.get("e"), what)
    ident = obj.get("i")
    if not isinstance(ident, str) or not ID_RE.fullmatch(ident):
        raise AddressError(f"{what}: its id (i) is not inv_ and 12 characters")
    s = obj.get("s")
    if not isinstance(s, str) or len(s) != SECRET_CHARS or not _B64URL_RE.fullmatch(s):
        raise AddressError(f"{what}: its secret (s) is not {SECRET_CHARS} characters of"
                           " base64url")
    secret = base64.urlsafe_b64decode(s + "=")
    if b64url(secret) != s:  # stray bits in the last character: not what we print
        raise AddressError(f"{what}: its secret (s) is not canonical base64url")
    name = obj.get("n", "")
    if not isinstance(name, str):
        raise AddressError(f"{what}: its name (n) must be a string")
    return Invite(key, endpoints, ident, secret, clean_name(name, NAME_CHARS))


def format_invite(inv: Invite) -> str:
    """The ``awpinv:`` text of ``inv``."""
    if len(inv.secret) != SECRET_BYTES:
        raise AddressError(f"an invite secret is {SECRET_BYTES} bytes")
    if not ID_RE.fullmatch(inv.id):
        raise AddressError("an invite id is inv_ and 12 characters")
    what = "the invite"
    endpoints = list(endpoints_of(list(inv.endpoints), what))
    data = compact_json({"k": key_of(inv.key, what), "e": endpoints, "i": inv.id,
                         "s": b64url(inv.secret), "n": clean_name(inv.name, NAME_CHARS)}
                        ).encode("utf-8")
    if len(data) > MAX_JSON:
        raise AddressError(f"{what} would be {len(data)} bytes of JSON; at most {MAX_JSON}")
    return PREFIX + b64url(data)
