"""Key links (cap ``keys``): several keys that are one identity.

A statement ``{"keys": [K1, K2, ...], "ts": T, "sigs": {K: SIG, ...}}`` says
"these keys are one identity", and counts only when every key it lists has
signed it: nobody can link a key they do not hold, to their own or to anyone
else's.  A daemon that holds one key per sandbox and a long-lived one links
them, carries the statements in its auth, and peers show the keys as one
identity.

Each signature covers ``CONTEXT 0x00 canonical({"keys", "ts"})`` with the
keys sorted, so the statement means the same whoever lists the keys first.
Pure: building, co-signing and checking (SPEC.md section 11, "Key links",
has the test vectors; ``tests/unit/test_keylink.py`` checks them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .canonical import canonical_bytes
from .keys import Identity, KeyError_, normalize_key, verify
from .timefmt import format_ts, parse_ts

CAP = "keys"  # hello.caps: we read ``auth.keys``
FIELD = "keys"  # the auth field: the statements a daemon carries
CONTEXT = b"awp-keylink-v1"
MAX_KEYS = 8  # keys one statement links
MAX_BYTES = 4096  # one statement's canonical JSON
MAX_CARRIED = 4  # statements one auth carries


class KeyLinkError(ValueError):
    """A statement refused; ``detail`` says why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True)
class KeyLink:
    """A statement every one of whose keys signed it."""

    keys: tuple[str, ...]
    ts_ms: int
    raw: dict

    @property
    def id(self) -> str:
        return hashlib.sha256(signed_bytes(self.raw)).hexdigest()[:32]


def signed_bytes(st: dict) -> bytes:
    return CONTEXT + b"\x00" + canonical_bytes({"keys": st["keys"], "ts": st["ts"]})


def make(identity: Identity, others: list[str], ts_ms: int) -> dict:
    """A statement linking our key and ``others``, signed by us only (the others
    co-sign it with :func:`cosign`)."""
    keys = sorted({identity.key, *(normalize_key(k) for k in others)})
    if len(keys) < 2:
        raise KeyLinkError("a key link needs another key than ours")
    if len(keys) > MAX_KEYS:
        raise KeyLinkError(f"a key link lists at most {MAX_KEYS} keys")
    st: dict = {"keys": keys, "ts": format_ts(ts_ms), "sigs": {}}
    return cosign(st, identity)


def cosign(st: dict, identity: Identity) -> dict:
    """``st`` with our signature added; our key must be one it lists."""
    _shape(st)
    if identity.key not in st["keys"]:
        raise KeyLinkError(f"the statement does not list our key {identity.key}")
    return {**st, "sigs": {**st["sigs"], identity.key: identity.sign(signed_bytes(st))}}


def missing(st: dict) -> list[str]:
    """The listed keys whose signature the statement still lacks (shape checked)."""
    _shape(st)
    return [k for k in st["keys"] if k not in st["sigs"]]


def check(st: object) -> KeyLink:
    """A whole statement: shape, then every listed key's signature."""
    _shape(st)
    assert isinstance(st, dict)
    data = signed_bytes(st)
    for k in st["keys"]:
        sig = st["sigs"].get(k)
        if not isinstance(sig, str) or not verify(k, data, sig):
            raise KeyLinkError(f"{k} has not signed it (or its signature does not verify)")
    return KeyLink(tuple(st["keys"]), parse_ts(st["ts"]), st)


def _shape(st: object) -> None:
    if not isinstance(st, dict) or set(st) != {"keys", "ts", "sigs"}:
        raise KeyLinkError("a key link is an object of keys, ts and sigs")
    try:
        size = len(canonical_bytes(st))
    except (TypeError, ValueError) as e:
        raise KeyLinkError(f"not canonical JSON: {e}") from None
    if size > MAX_BYTES:
        raise KeyLinkError(f"a key link over {MAX_BYTES} bytes")
    keys, sigs = st["keys"], st["sigs"]
    if not isinstance(keys, list) or not 2 <= len(keys) <= MAX_KEYS:
        raise KeyLinkError(f"keys must list 2 to {MAX_KEYS} keys")
    try:
        canon = [normalize_key(k) for k in keys]
    except (KeyError_, TypeError, AttributeError) as e:
        raise KeyLinkError(f"keys: {e}") from None
    if canon != keys or sorted(set(keys)) != keys:
        raise KeyLinkError("keys must be distinct canonical keys, sorted")
    if not isinstance(sigs, dict) or not set(sigs) <= set(keys):
        raise KeyLinkError("sigs must map listed keys to signatures")
    try:
        parse_ts(st["ts"])
    except (TypeError, ValueError):
        raise KeyLinkError("ts is not an RFC 3339 time") from None
