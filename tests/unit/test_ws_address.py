"""ws:// and wss:// addresses, and the ws:HOST:PORT[=PUBLIC_URL] listen form."""

import pytest

from awp.wire.address import AddressError, parse_address, parse_listen
from awp.wire.multiaddr import check_endpoint


@pytest.mark.parametrize(("text", "canonical", "tls", "port", "path"), [
    ("ws://127.0.0.1:8080", "ws://127.0.0.1:8080/", False, 8080, "/"),
    ("WSS://Box.example/awp?t=1", "wss://Box.example/awp?t=1", True, 443, "/awp?t=1"),
    ("wss://box.example:443/", "wss://box.example/", True, 443, "/"),
    ("ws://[::1]:80/", "ws://[::1]/", False, 80, "/"),
    ("ws://h?x", "ws://h/?x", False, 80, "/?x"),
])
def test_urls_parse_to_a_canonical_text_that_reads_back(text, canonical, tls, port, path):
    a = parse_address(text)
    assert (a.kind, str(a), a.tls, a.port, a.path) == ("ws", canonical, tls, port, path)
    assert parse_address(str(a)) == a
    assert a.endpoint() == canonical


@pytest.mark.parametrize(("text", "canonical", "endpoint"), [
    ("ws:127.0.0.1:0", "ws:127.0.0.1:0", "ws://127.0.0.1:0/"),
    ("ws:0.0.0.0:8080", "ws:0.0.0.0:8080", ""),
    ("ws:0.0.0.0:8080=https://x.fly.dev", "ws:0.0.0.0:8080=wss://x.fly.dev/", "wss://x.fly.dev/"),
    ("ws:[::]:80=ws://10.0.0.2:80/a", "ws:[::]:80=ws://10.0.0.2/a", "ws://10.0.0.2/a"),
])
def test_listen_form_keeps_the_public_url_as_its_endpoint(text, canonical, endpoint):
    a = parse_listen(text)
    assert a.is_ws_listen and str(a) == canonical and a.endpoint() == endpoint
    assert parse_listen(str(a)) == a


@pytest.mark.parametrize(("text", "why"), [
    ("ws://user:pw@h/", "user name or password"),
    ("ws://h/#frag", "fragment"),
    ("ws://", "missing host"),
    ("ws://h:99999/", "out of range"),
    ("ws://h:x/", "not a number"),
    ("ws://h/a b", "bad path"),
    ("wss:/h", "expected wss://"),
    ("ws:h", "missing port"),
    ("ws:h:1=ftp://x", "public URL"),
    ("ws:h:1=", "missing public URL"),
    ("https://h/", "write wss://h/"),
])
def test_malformed_ws_addresses_say_what_is_wrong(text, why):
    with pytest.raises(AddressError, match=why):
        parse_listen(text) if text.startswith("ws:") and "//" not in text[:5] else parse_address(text)


def test_a_url_is_no_listen_directive():
    with pytest.raises(AddressError, match="ws:HOST:PORT"):
        parse_listen("ws://0.0.0.0:8080/")


def test_ws_endpoints_in_an_awp_address_are_checked_like_the_other_known_kinds():
    assert check_endpoint("wss://box.example") == "wss://box.example/"
    with pytest.raises(AddressError):
        check_endpoint("wss://u@box.example")
