"""Key links (SPEC.md section 11, "Key links"): the vectors, and what is refused."""

from __future__ import annotations

import hashlib

import pytest

from awp.wire import keylink as K
from awp.wire.keys import Identity

TS = 1796677000000
A, B = Identity(bytes([1]) * 32), Identity(bytes([2]) * 32)


def _whole() -> dict:
    return K.cosign(K.make(A, [B.key], TS), B)


def test_vectors():
    st = _whole()
    assert st["keys"] == [B.key, A.key]  # sorted, whoever starts
    body = (b'awp-keylink-v1\x00{"keys":["ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q",'
            b'"ed25519:iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"],'
            b'"ts":"2026-12-07T20:56:40.000Z"}')
    assert K.signed_bytes(st) == body
    assert st["sigs"][A.key] == ("TOiYBDmhNrlfYZWv9tosaCH-lKqEGgg5DA_8l4SHGJZciA9kmjwNMkyGJc"
                                 "PnDOiWHMbjaRbGrxG9PlIJXiwNBw")
    assert st["sigs"][B.key] == ("Ye5wa8A76OhkPMGlfCZa-J-XQRpJoqjFHP1YYuipzbSJLjpZ95Im8aeueM"
                                 "xJcTExvy58x_Wjj7XlbHA_0uXPAw")
    link = K.check(st)
    assert link.keys == (B.key, A.key) and link.id == hashlib.sha256(body).hexdigest()[:32]
    assert K.check(K.cosign(K.make(B, [A.key], TS), A)).id == link.id  # same statement


def test_refused():
    half = K.make(A, [B.key], TS)
    assert K.missing(half) == [B.key]
    with pytest.raises(K.KeyLinkError, match="has not signed"):
        K.check(half)
    with pytest.raises(K.KeyLinkError, match="does not list our key"):
        K.cosign(half, Identity(bytes([3]) * 32))
    st = _whole()
    swapped = dict(st, sigs={A.key: st["sigs"][B.key], B.key: st["sigs"][A.key]})
    with pytest.raises(K.KeyLinkError, match="has not signed"):
        K.check(swapped)
    for bad in ({**st, "keys": [A.key, B.key]}, {**st, "keys": [A.key]},
                {**st, "extra": 1}, {**st, "ts": "yesterday"}, {**st, "keys": [B.key, B.key]},
                {**st, "sigs": {**st["sigs"], "ed25519:x": "y"}}, "not an object",
                {**st, "keys": [f"ed25519:{'A' * 43}"] * 9}):
        with pytest.raises(K.KeyLinkError):
            K.check(bad)
    with pytest.raises(K.KeyLinkError, match="another key"):
        K.make(A, [A.key], TS)
