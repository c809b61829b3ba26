"""Protocol error codes and which of them end the connection."""

from __future__ import annotations

BAD_FRAME = "bad_frame"
VERSION = "version"
AUTH = "auth"
TOO_LARGE = "too_large"
FORBIDDEN = "forbidden"
UNSUPPORTED = "unsupported"
BLOB_REFUSED = "blob_refused"
INTERNAL = "internal"
QUOTA = "quota"  # a budget of the receiver is used up: the line is neither stored nor acked

CLOSING = frozenset({BAD_FRAME, VERSION, AUTH, TOO_LARGE})
NON_CLOSING = frozenset({FORBIDDEN, UNSUPPORTED, BLOB_REFUSED, INTERNAL, QUOTA})
KNOWN = CLOSING | NON_CLOSING


class ProtocolError(Exception):
    """A peer broke the protocol; ``code`` is what we answer with."""

    def __init__(self, code: str, detail: str = "", re: str | None = None) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.re = re

    @property
    def closes(self) -> bool:
        return self.code in CLOSING
