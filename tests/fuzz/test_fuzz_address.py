"""Fuzz address parsing: an Address or an AddressError, and printing round-trips."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.address import AddressError, looks_like_address, parse_address, parse_listen
from awp.wire.b64 import b64url
from awp.wire.invite import format_invite, parse_invite
from awp.wire.keys import Identity
from awp.wire.multiaddr import format_multi, parse_multi

pieces = st.sampled_from(["tcp:", "unix:", "tailcat:", "tc", "//", "/", "[", "]", ":", "::1",
                          "127.0.0.1", "host", "-", ".", "0", "65535", "65536", "\x00", " ",
                          "ffff:", "a" * 40, "é", "\n"])
addresses = st.one_of(st.text(max_size=60), st.lists(pieces, max_size=8).map("".join))


@given(addresses)
@example("tcp:[::ffff:10.0.0.1]:7000")
@example("unix:///a//b")
def test_parse_gives_an_address_or_a_clear_error(text):
    for parse in (parse_address, parse_listen):
        try:
            a = parse(text)
        except AddressError as e:
            assert str(e)
            continue
        again = parse(str(a))
        assert again == a and str(again) == str(a)
    assert isinstance(looks_like_address(text), bool)


# -- awp: multi-endpoint addresses and awpinv: invites ------------------------------

_KEY = Identity(b"\x02" * 32).key
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=4),
    max_leaves=12)
endpoint_texts = st.one_of(addresses, st.sampled_from(
    ["ws://h:1/x", "wss://[::1]/", "tcp:127.0.0.1:7", "tc" + "A" * 40, "x:", "awp:y"]))


def _wrapped(prefix: str, obj: object) -> str:
    return prefix + b64url(json.dumps(obj, separators=(",", ":")).encode())


@given(st.one_of(
    st.text(max_size=80).map(lambda s: "awp:" + s),
    st.builds(lambda e, extra: {"k": _KEY, "e": e, **extra},
              st.lists(endpoint_texts, max_size=10),
              st.dictionaries(st.sampled_from(["k", "e", "x"]), json_values, max_size=2)
              ).map(lambda o: _wrapped("awp:", o)),
    json_values.map(lambda o: _wrapped("awp:", o)),
))
def test_multi_address_parse_gives_an_address_or_a_clear_error(text):
    try:
        m = parse_multi(text)
    except AddressError as e:
        assert str(e)
        return
    assert 1 <= len(m.endpoints) <= 8
    again = parse_multi(format_multi(m.key, m.endpoints))
    assert again == m and str(again) == str(m)


@given(st.one_of(
    st.text(max_size=80).map(lambda s: "awpinv:" + s),
    st.builds(lambda e, extra: {"k": _KEY, "e": e, "i": "inv_abcdefghjk23",
                                "s": b64url(b"\x05" * 32), "n": "x", **extra},
              st.lists(endpoint_texts, max_size=3),
              st.dictionaries(st.sampled_from(["i", "s", "n", "k"]), json_values, max_size=2)
              ).map(lambda o: _wrapped("awpinv:", o)),
))
def test_invite_parse_gives_an_invite_or_a_clear_error_without_the_secret(text):
    try:
        inv = parse_invite(text)
    except AddressError as e:
        assert str(e) and b64url(b"\x05" * 32) not in str(e)
        return
    assert parse_invite(format_invite(inv)) == inv
