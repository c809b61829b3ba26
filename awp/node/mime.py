"""The media type a file goes out with.

``mimetypes`` knows nothing of ``.log``, ``.jsonl``, ``Makefile`` and many
other text files agents pass around; as ``application/octet-stream`` the
receiving agent is told it is binary and not to read it.  A name the table
does not know is sniffed instead: text that decodes as UTF-8 without NUL
bytes in its first 8 KiB goes out as ``text/plain; charset=utf-8``.
"""

from __future__ import annotations

import mimetypes

SNIFF_BYTES = 8192


def looks_like_text(head: bytes) -> bool:
    """UTF-8 without NUL bytes; a multi-byte character cut at the end still counts."""
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        # Only a sequence cut off by the sniff window is forgiven.
        return e.start >= len(head) - 3 and e.reason == "unexpected end of data"
    return True


def guess_mime(name: str, head: bytes) -> str:
    """The type for a file called ``name`` whose first bytes are ``head``."""
    known = mimetypes.guess_type(name)[0]
    if known:
        return known
    return "text/plain; charset=utf-8" if looks_like_text(head) else "application/octet-stream"


def sniff_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(SNIFF_BYTES)
