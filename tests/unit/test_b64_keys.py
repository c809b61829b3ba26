"""Base64 variants on receipt, the ed25519:<b64url> key form, signatures."""

from __future__ import annotations

import base64
import re

import pytest

from awp.wire.b64 import b64decode_any, b64std, b64url
from awp.wire.keys import (
    KEY_PREFIX,
    Identity,
    KeyError_,
    auth_transcript,
    decode_key,
    encode_key,
    normalize_key,
    short_key,
    verify,
)

B64URL_RE = re.compile(r"^[A-Za-z0-9_-]+$")
# bytes chosen so that the encodings contain both '+'/'/' (standard) and '-'/'_' (url-safe)
TRICKY = bytes([0xFB, 0xFF, 0xBF, 0xFE, 0x00, 0x3E, 0x3F])


# --- b64 ---------------------------------------------------------------------------


def test_b64url_is_unpadded_urlsafe():
    assert b64url(TRICKY) == base64.urlsafe_b64encode(TRICKY).decode().rstrip("=")
    assert "=" not in b64url(TRICKY)
    assert B64URL_RE.match(b64url(TRICKY))
    assert len(b64url(bytes(32))) == 43
    assert len(b64url(bytes(64))) == 86
    assert len(b64url(bytes(16))) == 22


def test_b64std_is_padded_standard():
    assert b64std(TRICKY) == base64.b64encode(TRICKY).decode()
    assert b64std(b"a") == "YQ=="


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 31, 32, 33, 64])
def test_b64decode_any_accepts_all_four_variants(n):
    data = (TRICKY * 20)[:n]
    std = base64.b64encode(data).decode()
    url = base64.urlsafe_b64encode(data).decode()
    for text in (std, std.rstrip("="), url, url.rstrip("=")):
        assert b64decode_any(text) == data, text


def test_b64decode_any_tricky_chars():
    std = base64.b64encode(TRICKY).decode()
    url = base64.urlsafe_b64encode(TRICKY).decode()
    assert "+" in std and "/" in std
    assert "-" in url and "_" in url
    assert b64decode_any(std) == TRICKY
    assert b64decode_any(url) == TRICKY
    assert b64decode_any(url.rstrip("=")) == TRICKY


def test_b64decode_any_known_values():
    assert b64decode_any("YQ==") == b"a"
    assert b64decode_any("YQ") == b"a"
    assert b64decode_any("YWI") == b"ab"
    assert b64decode_any("") == b""


@pytest.mark.parametrize(
    "bad",
    [
        "!!!!",
        "abc$",
        "Y",  # one leftover char can never be base64
        "YQ=x",  # padding inside
        "Y=Q=",
        "+-__",  # mixed alphabets: '+' selects standard, where '-' is invalid
        "ab/_",
        "YQ ==",
        "YQ\n",
        "é" * 4,
    ],
)
def test_b64decode_any_rejects_garbage(bad):
    with pytest.raises(ValueError):
        b64decode_any(bad)


@pytest.mark.parametrize("bad", [None, 42, b"YQ=="])
def test_b64decode_any_rejects_non_strings(bad):
    with pytest.raises(ValueError):
        b64decode_any(bad)


# --- keys --------------------------------------------------------------------------


def test_key_form():
    ident = Identity.generate()
    assert ident.key.startswith("ed25519:")
    body = ident.key[len("ed25519:"):]
    assert len(body) == 43
    assert B64URL_RE.match(body)
    assert len(ident.key) == 51
    assert decode_key(ident.key) == ident.raw_public
    assert encode_key(ident.raw_public) == ident.key
    assert KEY_PREFIX == "ed25519:"


def test_identity_from_seed_is_deterministic():
    seed = bytes(range(32))
    a, b = Identity(seed), Identity(seed)
    assert a.key == b.key
    assert a.seed == seed
    assert a.sign(b"x") == b.sign(b"x")  # Ed25519 is deterministic
    with pytest.raises(ValueError):
        Identity(bytes(31))


def test_decode_key_rejects_wrong_prefix():
    body = b64url(bytes(range(32)))
    for bad in ("ED25519:" + body, "x25519:" + body, "ed25519" + body, body, " ed25519:" + body):
        with pytest.raises(KeyError_):
            decode_key(bad)


def test_decode_key_rejects_wrong_length():
    for n in (0, 16, 31, 33, 64):
        with pytest.raises(KeyError_):
            decode_key("ed25519:" + b64url(bytes(n)))


def test_decode_key_rejects_bad_chars():
    body = b64url(bytes(range(32)))
    for bad in (body[:-1] + "!", body[:10] + " " + body[11:], body[:-1] + "é", body + "$"):
        with pytest.raises(KeyError_):
            decode_key("ed25519:" + bad)


@pytest.mark.parametrize("bad", [None, 42, b"ed25519:AAAA", ["ed25519:"]])
def test_decode_key_rejects_non_strings(bad):
    with pytest.raises(KeyError_):
        decode_key(bad)


def test_key_error_is_a_value_error():
    assert issubclass(KeyError_, ValueError)


def test_decode_key_accepts_other_base64_variants():
    raw = bytes([0xFB, 0xFF, 0xBF] * 10 + [1, 2])
    assert decode_key("ed25519:" + base64.b64encode(raw).decode()) == raw
    assert decode_key("ed25519:" + base64.urlsafe_b64encode(raw).decode()) == raw


def test_normalize_key():
    raw = bytes([0xFB, 0xFF, 0xBF] * 10 + [1, 2])
    canonical = "ed25519:" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    std_padded = "ed25519:" + base64.b64encode(raw).decode()
    assert std_padded != canonical
    assert std_padded.endswith("=")
    assert "+" in std_padded or "/" in std_padded
    assert normalize_key(std_padded) == canonical
    assert normalize_key(canonical + "=") == canonical
    assert normalize_key(canonical) == canonical
    with pytest.raises(KeyError_):
        normalize_key("ed25519:short")


def test_short_key():
    ident = Identity.generate()
    assert short_key(ident.key) == ident.key[8:18]
    assert len(short_key(ident.key)) == 10
    assert short_key("ed25519:ABCDEFGHIJKLMNOP") == "ABCDEFGHIJ"
    assert short_key("ABCDEFGHIJKLMNOP") == "ABCDEFGHIJ"


# --- signatures --------------------------------------------------------------------


def test_sign_and_verify():
    ident = Identity.generate()
    msg = b"hello \x00 world"
    sig = ident.sign(msg)
    assert len(sig) == 86
    assert B64URL_RE.match(sig)
    assert verify(ident.key, msg, sig)


def test_verify_accepts_other_signature_encodings():
    ident = Identity.generate()
    sig = ident.sign(b"m")
    raw = b64decode_any(sig)
    assert verify(ident.key, b"m", base64.b64encode(raw).decode())
    assert verify(ident.key, b"m", base64.urlsafe_b64encode(raw).decode())


def test_verify_false_on_tampered_message():
    ident = Identity.generate()
    sig = ident.sign(b"message")
    assert not verify(ident.key, b"messagE", sig)
    assert not verify(ident.key, b"message\n", sig)
    assert not verify(ident.key, b"", sig)


def test_verify_false_on_wrong_key():
    a, b = Identity.generate(), Identity.generate()
    sig = a.sign(b"message")
    assert not verify(b.key, b"message", sig)


def test_verify_false_on_tampered_signature():
    ident = Identity.generate()
    sig = ident.sign(b"message")
    raw = bytearray(b64decode_any(sig))
    raw[10] ^= 1
    assert not verify(ident.key, b"message", b64url(bytes(raw)))


@pytest.mark.parametrize(
    "sig",
    ["", "garbage!", "A" * 86, "A" * 85, b64url(bytes(63)), b64url(bytes(65)), None, 42, b"x"],
)
def test_verify_false_on_garbage_signature_never_raises(sig):
    ident = Identity.generate()
    assert verify(ident.key, b"message", sig) is False


@pytest.mark.parametrize(
    "key",
    ["", "ed25519:", "ed25519:!!", "ed25519:" + b64url(b"\xff" * 32), "nokey", None, 7],
)
def test_verify_false_on_garbage_key_never_raises(key):
    sig = Identity.generate().sign(b"message")
    assert verify(key, b"message", sig) is False


def test_auth_transcript_layout():
    assert auth_transcript(b'{"a":1}', b'{"b":2}') == b'awp-auth-v0\x00{"a":1}\x00{"b":2}'
