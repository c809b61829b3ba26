"""Plaintext policy: private IP classes are allowed, public ones refused exactly."""

from __future__ import annotations

import pytest
import trio

from awp.transport.policy import (
    PlaintextRefused,
    allow_plaintext_from_env,
    check_plaintext_ips,
    is_allowed_plaintext_ip,
    resolve_checked,
)


def refusal(ip: str) -> str:
    return (
        f"refusing plain TCP to public address {ip}: awp over TCP is unencrypted "
        "(use a tailcat address, or set AWP_ALLOW_PLAINTEXT=1)"
    )


ALLOWED = [
    # loopback
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    # RFC 1918
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "192.168.255.255",
    # IPv6 ULA, including Fly's 6PN
    "fc00::1",
    "fdaa::3",
    "fd12:3456:789a::1",
    # link-local
    "169.254.0.1",
    "169.254.255.254",
    "fe80::1",
    "fe80::1%eth0",
    "febf::1",
    # CGNAT
    "100.64.0.1",
    "100.127.255.255",
    # IPv4-mapped IPv6 forms
    "::ffff:127.0.0.1",
    "::ffff:10.1.2.3",
    "::ffff:172.16.5.5",
    "::ffff:192.168.1.1",
    "::ffff:169.254.1.1",
    "::ffff:100.64.0.1",
    # surrounding whitespace is tolerated
    " 10.0.0.1 ",
]

REFUSED = [
    "8.8.8.8",
    "1.1.1.1",
    "172.15.255.255",
    "172.32.0.1",
    "192.169.0.1",
    "100.63.255.255",
    "100.128.0.0",
    "169.253.255.255",
    "11.0.0.1",
    "2001:4860:4860::8888",
    "2606:4700:4700::1111",
    "fec0::1",  # old site-local, outside fe80::/10
    "fe00::1",  # just below fc00::/7
    "::ffff:8.8.8.8",
    "0.0.0.0",
    "::",
    "255.255.255.255",
    "224.0.0.1",
    "not-an-ip",
    "",
    "[::1]",
]


@pytest.mark.parametrize("ip", ALLOWED)
def test_private_classes_allowed(ip: str) -> None:
    assert is_allowed_plaintext_ip(ip)
    check_plaintext_ips([ip], allow=False)


@pytest.mark.parametrize("ip", REFUSED)
def test_other_addresses_not_allowed(ip: str) -> None:
    assert not is_allowed_plaintext_ip(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8"])
def test_public_ip_refused_with_exact_message(ip: str) -> None:
    with pytest.raises(PlaintextRefused) as info:
        check_plaintext_ips([ip], allow=False)
    assert str(info.value) == refusal(ip)
    assert info.value.ip == ip


def test_first_public_ip_is_reported() -> None:
    with pytest.raises(PlaintextRefused) as info:
        check_plaintext_ips(["10.0.0.1", "8.8.8.8", "1.1.1.1"], allow=False)
    assert str(info.value) == refusal("8.8.8.8")


def test_allow_overrides_policy() -> None:
    check_plaintext_ips(["8.8.8.8", "2001:4860:4860::8888"], allow=True)


def test_empty_list_is_fine() -> None:
    check_plaintext_ips([], allow=False)


def test_refusal_survives_pickling() -> None:
    import pickle

    exc = pickle.loads(pickle.dumps(PlaintextRefused("1.1.1.1")))
    assert str(exc) == refusal("1.1.1.1")
    assert exc.ip == "1.1.1.1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        (" Yes ", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("", False),
        ("2", False),
    ],
)
def test_allow_plaintext_from_env(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("AWP_ALLOW_PLAINTEXT", value)
    assert allow_plaintext_from_env() is expected
    assert allow_plaintext_from_env({"AWP_ALLOW_PLAINTEXT": value}) is expected


def test_allow_plaintext_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWP_ALLOW_PLAINTEXT", raising=False)
    assert allow_plaintext_from_env() is False
    assert allow_plaintext_from_env({}) is False


def test_resolve_checked_numeric_hosts() -> None:
    """Numeric hosts resolve locally, so this needs no network."""

    async def main() -> None:
        infos = await resolve_checked("127.0.0.1", 7000, allow=False)
        assert infos and all(info[4][:2] == ("127.0.0.1", 7000) for info in infos)
        with pytest.raises(PlaintextRefused) as info:
            await resolve_checked("8.8.8.8", 1, allow=False)
        assert str(info.value) == refusal("8.8.8.8")
        allowed = await resolve_checked("8.8.8.8", 1, allow=True)
        assert allowed[0][4][0] == "8.8.8.8"

    trio.run(main)


def test_resolve_checked_refuses_literal_before_resolving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_resolve(*args: object, **kwargs: object) -> list[tuple]:
        raise AssertionError("getaddrinfo must not be called for a refused literal")

    monkeypatch.setattr(trio.socket, "getaddrinfo", no_resolve)

    async def main() -> None:
        with pytest.raises(PlaintextRefused):
            await resolve_checked("2001:4860:4860::8888", 443, allow=False)

    trio.run(main)


def test_resolve_checked_requires_every_ip_private(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name resolving to a mix of private and public IPs is refused."""

    async def fake_getaddrinfo(host: str, port: int, **kwargs: object) -> list[tuple]:
        return [
            (trio.socket.AF_INET, trio.socket.SOCK_STREAM, 6, "", ("10.0.0.5", port)),
            (trio.socket.AF_INET, trio.socket.SOCK_STREAM, 6, "", ("203.0.113.9", port)),
        ]

    monkeypatch.setattr(trio.socket, "getaddrinfo", fake_getaddrinfo)

    async def main() -> None:
        with pytest.raises(PlaintextRefused) as info:
            await resolve_checked("mixed.example", 7000, allow=False)
        assert str(info.value) == refusal("203.0.113.9")
        assert len(await resolve_checked("mixed.example", 7000, allow=True)) == 2

    trio.run(main)
