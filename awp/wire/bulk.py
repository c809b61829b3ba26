"""Bulk transfer (cap ``bulk``): how a big file is named, cut and checked.

Pure: no I/O.  A file sent the bulk way is cut into pieces of one fixed size
(the last may be shorter); each piece is named by its SHA-256 and the file by
a root hash over its size, its piece size and the list of piece hashes, so a
receiver can check every piece on its own, as it arrives, and fetch again
exactly the pieces that fail.  SPEC.md ("Bulk transfer") has the rules and
test vectors; ``tests/unit/test_bulk_wire.py`` checks them.

The piece size is the smallest power of two of at least 4 MiB that keeps the
file to 4,096 pieces or fewer: the hash list of the largest file we accept is
then at most 128 KiB (175 KiB of base64), so it always travels inside the msg
line and never needs a channel of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

from .b64 import b64decode_any, b64url
from .numbers import is_count

CAP = "bulk"
SIDE = "bulk"  # ``hello.side`` of a side connection
PUSH_SIDE = "bulk-push"  # ``hello.side`` of one the sender dialed, asked to by the receiver
DIAL_LINE = "bulk-dial"  # receiver -> sender on the link: I cannot dial you, dial me
DIAL_FAILED_LINE = "bulk-dial-failed"  # sender -> receiver: nor can I dial you
PIECE_MIN = 4 * 1024 * 1024
MAX_PIECES = 4096
HASH = 32
_DOMAIN = b"awp-bulk-v1\x00"
MAX_CONTROL = 4096  # a control line on a side connection (want, piece, done, err)


def control_line(obj: dict) -> bytes:
    """A side-connection control line as it goes on the wire (compact JSON, newline)."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class BulkError(ValueError):
    """A bulk description or side-connection line we cannot take."""


def piece_size(size: int) -> int:
    """The piece size for a file of ``size`` bytes."""
    p = PIECE_MIN
    while -(-size // p) > MAX_PIECES:
        p *= 2
    return p


def piece_count(size: int, piece: int) -> int:
    return -(-size // piece)


def piece_span(size: int, piece: int, i: int) -> tuple[int, int]:
    """(offset, length) of piece ``i``."""
    off = i * piece
    return off, min(piece, size - off)


def piece_hash(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def root_hash(size: int, piece: int, hashes: bytes) -> str:
    """The file's name: SHA-256 of the domain, be64(size), be32(piece) and the hashes."""
    h = hashlib.sha256(_DOMAIN)
    h.update(struct.pack(">QI", size, piece))
    h.update(hashes)
    return h.hexdigest()


def hash_file(fd: int, size: int, piece: int, chunk: int = 1 << 20) -> bytes:
    """The concatenated piece hashes of the first ``size`` bytes of ``fd``."""
    out = bytearray()
    for i in range(piece_count(size, piece)):
        off, n = piece_span(size, piece, i)
        h = hashlib.sha256()
        while n:
            buf = os.pread(fd, min(chunk, n), off)
            if not buf:
                raise OSError("file shorter than its size")
            h.update(buf)
            off += len(buf)
            n -= len(buf)
        out += h.digest()
    return bytes(out)


def describe(size: int, piece: int, hashes: bytes) -> dict:
    """The ``bulk`` field of a blob part."""
    return {"root": root_hash(size, piece, hashes), "piece": piece, "hashes": b64url(hashes)}


class Description:
    """A checked ``bulk`` field: what the receiver verifies against."""

    __slots__ = ("size", "piece", "count", "hashes", "root")

    def __init__(self, size: int, piece: int, hashes: bytes, root: str) -> None:
        self.size, self.piece, self.hashes, self.root = size, piece, hashes, root
        self.count = piece_count(size, piece)

    def hash_of(self, i: int) -> bytes:
        return self.hashes[i * HASH:(i + 1) * HASH]


def parse(size: object, field: object) -> Description:
    """Check a blob part's ``size`` and ``bulk`` field; raises :class:`BulkError`."""
    if not is_count(size) or size == 0:
        raise BulkError("a bulk blob needs a size of at least one byte")
    if not isinstance(field, dict):
        raise BulkError("bulk is not an object")
    piece, root, text = field.get("piece"), field.get("root"), field.get("hashes")
    if piece != piece_size(size):
        raise BulkError(f"piece size {piece!r} is not the one for {size} bytes")
    if not isinstance(root, str) or len(root) != 64:
        raise BulkError("root is not 64 hex digits")
    if not isinstance(text, str) or len(text) > 4 * MAX_PIECES * HASH // 3 + 4:
        raise BulkError("hashes is not a string of the right length")
    try:
        hashes = b64decode_any(text)
    except ValueError as e:
        raise BulkError(f"hashes: {e}") from None
    if len(hashes) != piece_count(size, piece) * HASH:
        raise BulkError(f"{len(hashes) // HASH} piece hashes for"
                        f" {piece_count(size, piece)} pieces")
    if root_hash(size, piece, hashes) != root.lower():
        raise BulkError("the piece hashes do not match the root")
    return Description(size, piece, hashes, root.lower())


def check_index(v: object, count: int) -> int:
    """A piece index from a side-connection line."""
    if type(v) is not int or not 0 <= v < count:
        raise BulkError(f"piece index {v!r} is not in 0..{count - 1}")
    return v


def parse_range(text: str | None, size: int) -> tuple[int, int]:
    """``A-B`` (inclusive, as HTTP ranges are), ``A-`` (to the end) or ``-N`` (the
    last N bytes) of a file of ``size`` bytes, as ``(start, end)`` with ``end``
    exclusive; no text means the whole file.  Raises :class:`BulkError`."""
    if not text:
        return 0, size
    first, dash, last = text.strip().partition("-")
    if not dash or not (first or last) or not all(x.isdigit() for x in (first, last) if x):
        raise BulkError(f"range {text!r} is not A-B, A- or -N (byte offsets)")
    if not first:
        n = int(last)
        if n == 0:
            raise BulkError("range -0 selects no bytes")
        return max(0, size - n), size
    start = int(first)
    end = int(last) + 1 if last else size
    if start >= size:
        raise BulkError(f"range starts at {start}, past the end of a {size}-byte file")
    if end <= start:
        raise BulkError(f"range {text!r} ends before it starts")
    return start, min(end, size)


def pieces_of(start: int, end: int, piece: int) -> range:
    """The pieces holding bytes ``start`` up to (not including) ``end``."""
    return range(start // piece, (end - 1) // piece + 1)
