"""Fuzz address parsing: an Address or an AddressError, and printing round-trips."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from awp.wire.address import AddressError, looks_like_address, parse_address, parse_listen

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
