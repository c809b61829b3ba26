"""Base64 forms: unpadded base64url out, any variant in."""

from __future__ import annotations

import base64
import binascii


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64std(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode_any(text: str) -> bytes:
    """Decode standard or url-safe base64, padded or not.

    Raises ``ValueError`` on anything that is not base64.  The alphabet is
    chosen by content: ``+`` or ``/`` means standard, otherwise url-safe (the
    two agree on every other character).
    """
    if not isinstance(text, str):
        raise ValueError("base64 value is not a string")
    stripped = text.rstrip("=")
    if "=" in stripped:
        raise ValueError("padding inside base64 text")
    padded = stripped + "=" * (-len(stripped) % 4)
    try:
        if "+" in stripped or "/" in stripped:
            return base64.b64decode(padded, validate=True)
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"bad base64: {e}") from None
