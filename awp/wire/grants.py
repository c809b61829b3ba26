"""Grant objects: signed statements that a key may do something until a time.

A grant is signed over the canonical JSON of the object without ``sig``;
unknown fields are part of what is signed, so grants travel verbatim and are
never rebuilt from parsed fields.
"""

from __future__ import annotations

import hashlib
import os

from .b64 import b64url
from .canonical import canonical_bytes
from .keys import Identity, KeyError_, decode_key, verify
from .timefmt import format_ts_seconds, parse_ts

CAPABILITIES = ("exec", "fs:read", "fs:write", "introduce", "admin", "pair")


def make_grant(identity: Identity, sub: str, caps: list[str], exp_ms: int,
               aud: str | None = None) -> dict:
    g: dict = {"iss": identity.key, "sub": sub, "caps": list(caps),
               "exp": format_ts_seconds(exp_ms), "nonce": b64url(os.urandom(16))}
    if aud:
        g["aud"] = aud
    g["sig"] = identity.sign(canonical_bytes(g))
    return g


def grant_hash(g: dict) -> str:
    """Hex of the first 16 bytes of SHA-256 of the canonical form, signature included."""
    return hashlib.sha256(canonical_bytes(g)).digest()[:16].hex()


def check_grant(g: object) -> str:
    """Empty when ``g`` is a well-formed grant signed by its issuer; else why not."""
    if not isinstance(g, dict):
        return "not an object"
    for f in ("iss", "sub"):
        try:
            decode_key(g.get(f))
        except KeyError_ as e:
            return f"{f}: {e}"
    caps = g.get("caps")
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        return "caps must be a list of strings"
    try:
        parse_ts(g.get("exp"))
    except ValueError:
        return "bad exp"
    if "aud" in g:
        try:
            decode_key(g.get("aud"))
        except KeyError_:
            return "bad aud"
    sig = g.get("sig")
    if not isinstance(sig, str):
        return "no signature"
    body = {k: v for k, v in g.items() if k != "sig"}
    try:
        signed = canonical_bytes(body)
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
        return "not canonicalisable"
    if not verify(g["iss"], signed, sig):
        return "signature does not verify"
    return ""


def expires_ms(g: dict) -> int:
    return parse_ts(g["exp"])
