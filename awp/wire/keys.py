"""Ed25519 identities and the ``ed25519:<base64url>`` key form."""

from __future__ import annotations

import os

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from .b64 import b64decode_any, b64url

KEY_PREFIX = "ed25519:"


class KeyError_(ValueError):
    """A key string that does not name an Ed25519 public key."""


def encode_key(raw: bytes) -> str:
    return KEY_PREFIX + b64url(raw)


def decode_key(text: object) -> bytes:
    """The 32 raw bytes of an ``ed25519:...`` key; ``KeyError_`` otherwise."""
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX):
        raise KeyError_("key must start with 'ed25519:'")
    try:
        raw = b64decode_any(text[len(KEY_PREFIX):])
    except ValueError as e:
        raise KeyError_(f"bad key encoding: {e}") from None
    if len(raw) != 32:
        raise KeyError_("an Ed25519 key has 32 bytes")
    return raw


def normalize_key(text: str) -> str:
    """Re-encode a key in the canonical unpadded base64url form."""
    return encode_key(decode_key(text))


def short_key(key: str) -> str:
    """The first 10 characters after the prefix: how tools show a peer."""
    return key[len(KEY_PREFIX):][:10] if key.startswith(KEY_PREFIX) else key[:10]


_VERIFIERS: dict[str, VerifyKey] = {}  # key text -> its decoded verifier
_MAX_VERIFIERS = 4096


def _verifier(key: str) -> VerifyKey:
    """``key``'s verifier, decoded once: a host verifies the same few keys (a topic's
    owner, its peers) over and over, and decoding was a third of each check."""
    found = _VERIFIERS.get(key)
    if found is None:
        found = VerifyKey(decode_key(key))
        if len(_VERIFIERS) >= _MAX_VERIFIERS:
            _VERIFIERS.clear()
        _VERIFIERS[key] = found
    return found


def verify(key: str, message: bytes, signature: str) -> bool:
    """True when ``signature`` (any base64) is ``key``'s over ``message``."""
    try:
        sig = b64decode_any(signature)
        if len(sig) != 64:
            return False
        _verifier(key).verify(message, sig)
        return True
    except (KeyError_, ValueError, BadSignatureError, TypeError):
        return False


class Identity:
    """Our own keypair."""

    __slots__ = ("_sk", "key", "raw_public")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed has 32 bytes")
        self._sk = SigningKey(seed)
        self.raw_public = bytes(self._sk.verify_key)
        self.key = encode_key(self.raw_public)

    @classmethod
    def generate(cls) -> Identity:
        return cls(os.urandom(32))

    @property
    def seed(self) -> bytes:
        return bytes(self._sk)

    def sign(self, message: bytes) -> str:
        """Unpadded base64url of the 64-byte signature."""
        return b64url(self._sk.sign(message).signature)


AUTH_CONTEXT = b"awp-auth-v0"


def auth_transcript(first_hello: bytes, second_hello: bytes) -> bytes:
    """What ``auth.sig`` covers: context, NUL, signer's hello, NUL, other hello.

    The signer passes its own hello first; the verifier passes the peer's hello
    first.  Both are the exact line bytes without the newline.
    """
    return AUTH_CONTEXT + b"\x00" + first_hello + b"\x00" + second_hello
