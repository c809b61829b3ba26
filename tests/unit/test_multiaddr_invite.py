"""The ``awp:`` address and ``awpinv:`` invite texts, and the invite MAC (awp/wire)."""

from __future__ import annotations

import base64
import json

import pytest

from awp.wire.address import AddressError
from awp.wire.b64 import b64url
from awp.wire.invite import (
    Invite,
    check_invite_field,
    format_invite,
    invite_mac,
    mac_matches,
    new_invite_id,
    parse_invite,
    verifier_of,
)
from awp.wire.keys import Identity
from awp.wire.multiaddr import MAX_ENDPOINTS, format_multi, parse_multi

KEY = Identity(b"\x01" * 32).key


def _wrap(prefix: str, obj: object) -> str:
    return prefix + b64url(json.dumps(obj, separators=(",", ":")).encode())


def test_multi_address_round_trips_in_order_and_keeps_unknown_kinds():
    text = format_multi(KEY, ["tcp:127.0.0.1:7000", "quic://box.example/awp", "unix:/tmp/a.sock",
                              "wss://box.example/awp"])
    assert text.startswith("awp:") and "=" not in text
    m = parse_multi(text)
    assert m.key == KEY
    assert m.endpoints == ("tcp:127.0.0.1:7000", "quic://box.example/awp", "unix:/tmp/a.sock",
                           "wss://box.example/awp")
    assert str(m) == text
    assert [e for e, _a in m.dialable()] == ["tcp:127.0.0.1:7000", "unix:/tmp/a.sock",
                                             "wss://box.example/awp"]
    assert m.unknown() == ["quic://box.example/awp"]
    # The JSON is exactly the documented compact form.
    body = base64.urlsafe_b64decode(text[4:] + "=" * (-len(text[4:]) % 4))
    assert body == ('{"k":"' + KEY + '","e":["tcp:127.0.0.1:7000","quic://box.example/awp",'
                    '"unix:/tmp/a.sock","wss://box.example/awp"]}').encode()


def test_multi_address_canonicalises_and_dedupes_endpoints():
    m = parse_multi(_wrap("awp:", {"k": KEY, "e": ["tcp://127.0.0.1:7", "tcp:127.0.0.1:7"],
                                   "x": "ignored"}))
    assert m.endpoints == ("tcp:127.0.0.1:7",)


@pytest.mark.parametrize("obj, says", [
    ({"e": ["tcp:127.0.0.1:1"]}, "key (k)"),
    ({"k": "ed25519:short", "e": ["tcp:127.0.0.1:1"]}, "key (k)"),
    ({"k": KEY}, "endpoints (e)"),
    ({"k": KEY, "e": []}, "names no endpoint"),
    ({"k": KEY, "e": ["tcp:127.0.0.1:1"] * (MAX_ENDPOINTS + 1)}, "at most 8"),
    ({"k": KEY, "e": [7]}, "must be a string"),
    ({"k": KEY, "e": ["tcp:127.0.0.1:99999"]}, "out of range"),
    ({"k": KEY, "e": ["tcp:nohost"]}, "missing port"),
    ({"k": KEY, "e": ["ws://" + "a" * 1100]}, "over 1024 bytes"),
    ({"k": KEY, "e": ["just words"]}, "not an address"),
    ({"k": KEY, "e": ["awp:abc"]}, "nests"),
    ([1, 2], "JSON object"),
])
def test_bad_multi_addresses_say_what_is_wrong(obj, says):
    with pytest.raises(AddressError, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse_multi(_wrap("awp:", obj))


@pytest.mark.parametrize("text, says", [
    ("awp:", "empty"), ("awp:!!!", "not base64url"), ("awp:a", "not base64url"),
    ("awp:" + b64url(b"not json"), "does not hold JSON"), ("awp:" + "A" * 6000, "too long"),
    ("tcp:1.2.3.4:5", "not a multi-endpoint address"),
])
def test_malformed_multi_texts_are_refused_before_decoding(text, says):
    with pytest.raises(AddressError, match=says):
        parse_multi(text)


def test_format_refuses_what_parse_would():
    with pytest.raises(AddressError, match="at most 8"):
        format_multi(KEY, [f"tcp:127.0.0.1:{p}" for p in range(1, 11)])
    with pytest.raises(AddressError, match="4096"):
        format_multi(KEY, ["ws://h/" + "a" * 1000 + f"/{i}" for i in range(5)])


def _invite() -> Invite:
    return Invite(KEY, ("tcp:127.0.0.1:7000", "ws://h/x"), "inv_abcdefghjk23", b"\x07" * 32,
                  "alice")


def test_invite_round_trips_and_hides_its_secret_in_repr():
    inv = _invite()
    text = format_invite(inv)
    assert text.startswith("awpinv:")
    back = parse_invite(text)
    assert back == inv and str(back) == text
    assert b64url(inv.secret) not in repr(back)
    body = json.loads(base64.urlsafe_b64decode(text[7:] + "=" * (-len(text[7:]) % 4)))
    assert set(body) == {"k", "e", "i", "s", "n"} and body["s"] == b64url(b"\x07" * 32)


@pytest.mark.parametrize("change, says", [
    ({"i": "inv_short"}, r"id \(i\)"), ({"i": 5}, r"id \(i\)"),
    ({"s": "abc"}, r"secret \(s\)"), ({"s": b64url(b"\x07" * 31) + "AAA"}, r"secret \(s\)"),
    ({"s": b64url(b"\x07" * 32)[:-1] + "B"}, "not canonical"),
    ({"n": 3}, r"name \(n\)"), ({"e": []}, "no endpoint"),
])
def test_bad_invites_say_what_is_wrong(change, says):
    body = {"k": KEY, "e": ["tcp:127.0.0.1:1"], "i": "inv_abcdefghjk23",
            "s": b64url(b"\x07" * 32), "n": "alice", **change}
    with pytest.raises(AddressError, match=says):
        parse_invite(_wrap("awpinv:", body))


def test_new_invite_ids_have_the_checked_shape():
    ids = {new_invite_id() for _ in range(50)}
    assert len(ids) == 50
    for i in ids:
        check_invite_field({"id": i, "mac": "A" * 43})


def test_the_mac_test_vector_in_spec():
    """SPEC.md section 11, "Invites": fixed secret, fixed hellos, fixed MAC."""
    secret = bytes(range(32))
    dialer, listener = b'{"t":"hello","n":1}', b'{"t":"hello","n":2}'
    v = verifier_of(secret)
    assert v.hex() == VECTOR_VERIFIER
    mac = invite_mac(v, dialer, listener)
    assert mac == VECTOR_MAC
    assert mac_matches(v, dialer, listener, mac)
    # Either hello changed, or the two swapped, and the MAC no longer matches.
    assert not mac_matches(v, listener, dialer, mac)
    assert not mac_matches(v, dialer, listener + b" ", mac)
    assert not mac_matches(verifier_of(b"\x00" * 32), dialer, listener, mac)


VECTOR_VERIFIER = "2ca99b3bf63bf889fe6216b8087fddf9a8b7b7ad6142915ef5a7f75842e188c6"
VECTOR_MAC = "Hmn_poTLIvsNB-mrIbQmHZeStLksX6yCvBebFlpjSI4"


@pytest.mark.parametrize("field, says", [
    (None, "object"), ({"id": "inv_abcdefghjk23"}, "mac"), ({"mac": "A" * 43}, "id"),
    ({"id": "inv_abcdefghjk23", "mac": "A" * 44}, "mac"),
    ({"id": "inv_abcdefghjk2l", "mac": "A" * 43}, "id"),  # l is not in the alphabet
    ({"id": "inv_abcdefghjk23", "mac": "A" * 42 + "="}, "mac"),
])
def test_the_auth_field_shape_is_checked_before_any_lookup(field, says):
    with pytest.raises(ValueError, match=says):
        check_invite_field(field)
