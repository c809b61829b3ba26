"""The bulk piece scheme (awp/wire/bulk.py) against the vectors in SPEC.md, rebuilt
from the words of the spec with hashlib, and the checks a receiver makes."""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile

import pytest

from awp.wire import bulk as w
from awp.wire.b64 import b64url

MiB = 1024 * 1024
HELLO_ROOT = "6a115d8035524a333f459cb0a2b957a362f5728bc668f19c56f76bc630dcc1fd"
TEN_ROOT = "0b67f83e4808017f8981954391b88eba787badc115c1ae1b06d4edca2d91a3d5"
TEN_PIECES = ["a117210941a0b00dcb2d8577e680d84b6fa0eaf760d2afc654c953b9859d54fa",
              "9889e2ef8bd7d8fea5ef99243b7784ecd8deaf613bdb7a6c0b3ac56f23078303",
              "b249e6e10bdafb74eb144908fe3f2b605628c2f5c94add2e253c28927b61ee13"]


def _spec_root(size: int, piece: int, hashes: bytes) -> str:
    return hashlib.sha256(b"awp-bulk-v1\x00" + struct.pack(">QI", size, piece)
                          + hashes).hexdigest()


def test_piece_size_keeps_files_to_4096_pieces():
    assert w.piece_size(1) == 4 * MiB
    assert w.piece_size(16 * 1024 * MiB) == 4 * MiB  # exactly 4,096 pieces
    assert w.piece_size(16 * 1024 * MiB + 1) == 8 * MiB
    assert w.piece_size(64 * 1024 * MiB) == 16 * MiB
    for size in (1, 5 * MiB, 16 * 1024 * MiB + 1, 10 ** 12):
        assert w.piece_count(size, w.piece_size(size)) <= w.MAX_PIECES


def test_vector_hello():
    h = hashlib.sha256(b"hello").digest()
    assert w.root_hash(5, 4 * MiB, h) == HELLO_ROOT == _spec_root(5, 4 * MiB, h)
    d = w.describe(5, 4 * MiB, h)
    assert d == {"root": HELLO_ROOT, "piece": 4 * MiB,
                 "hashes": "LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"}
    assert w.parse(5, d).hash_of(0) == h


def test_vector_ten_mib_from_a_file():
    size = 10 * MiB
    data = bytes(i % 251 for i in range(size))
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        hashes = w.hash_file(f.fileno(), size, 4 * MiB, chunk=300_000)
    assert [hashes[i * 32:(i + 1) * 32].hex() for i in range(3)] == TEN_PIECES
    assert w.root_hash(size, 4 * MiB, hashes) == TEN_ROOT == _spec_root(size, 4 * MiB, hashes)
    assert w.piece_span(size, 4 * MiB, 2) == (8 * MiB, 2 * MiB)


def _desc(size: int = 10 * MiB) -> dict:
    p = w.piece_size(size)
    return w.describe(size, p, os.urandom(32 * w.piece_count(size, p)))


@pytest.mark.parametrize("size, field, why", [
    (0, None, "at least one byte"),
    (-1, None, "at least one byte"),
    (2 ** 63, None, "at least one byte"),
    (True, None, "at least one byte"),
    (10 * MiB, "x", "not an object"),
    (10 * MiB, {**_desc(), "piece": 1024}, "piece size"),
    (10 * MiB, {**_desc(), "root": "00"}, "64 hex"),
    (10 * MiB, {**_desc(), "hashes": "!!"}, "hashes"),
    (10 * MiB, {**_desc(), "hashes": "A" * 10 ** 6}, "right length"),
    (10 * MiB, {**_desc(), "hashes": b64url(bytes(64))}, "2 piece hashes for 3"),
    (10 * MiB, {**_desc(), "root": "0" * 64}, "do not match the root"),
    (11 * MiB, _desc(), "do not match the root"),
])
def test_parse_refuses(size, field, why):
    with pytest.raises(w.BulkError, match=why):
        w.parse(size, field)


def test_check_index():
    assert w.check_index(2, 3) == 2
    for bad in (-1, 3, True, 1.0, "1", None):
        with pytest.raises(w.BulkError):
            w.check_index(bad, 3)


def test_ranges_are_http_style_and_checked() -> None:
    from awp.wire.bulk import BulkError, parse_range, pieces_of

    assert parse_range(None, 100) == (0, 100)
    assert parse_range("0-9", 100) == (0, 10)  # inclusive, as HTTP
    assert parse_range("90-", 100) == (90, 100)
    assert parse_range("-10", 100) == (90, 100) and parse_range("-500", 100) == (0, 100)
    assert parse_range("50-1000", 100) == (50, 100)  # held to the end of the file
    for bad in ("100-", "9-3", "a-b", "5", "-", "-0", "1-2-3", " -x"):
        with pytest.raises(BulkError):
            parse_range(bad, 100)
    assert list(pieces_of(0, 10, 4)) == [0, 1, 2]
    assert list(pieces_of(4, 8, 4)) == [1] and list(pieces_of(3, 5, 4)) == [0, 1]
