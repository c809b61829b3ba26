"""Plaintext policy: plain TCP carries no transport encryption, so keep it private.

Only addresses that cannot be routed across the public internet are allowed
unless the user explicitly opts out (AWP_ALLOW_PLAINTEXT=1).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping

import trio

__all__ = [
    "PlaintextRefused",
    "allow_plaintext_from_env",
    "check_plaintext_ips",
    "is_allowed_plaintext_ip",
    "resolve_checked",
]

_REFUSAL = (
    "refusing plain TCP to public address {ip}: awp over TCP is unencrypted "
    "(use a tailcat address, or set AWP_ALLOW_PLAINTEXT=1)"
)

_PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in (
        "127.0.0.0/8",  # loopback
        "10.0.0.0/8",  # RFC 1918
        "172.16.0.0/12",  # RFC 1918
        "192.168.0.0/16",  # RFC 1918
        "169.254.0.0/16",  # link-local
        "100.64.0.0/10",  # CGNAT (also where Tailscale-style overlays live)
        "::1/128",  # loopback
        "fc00::/7",  # unique local, e.g. Fly's 6PN fdaa::/16
        "fe80::/10",  # link-local
    )
)

_TRUTHY = {"1", "true", "yes"}


class PlaintextRefused(Exception):
    """Plain TCP to a public IP was refused; carries the offending IP as .ip."""

    def __init__(self, ip: str) -> None:
        super().__init__(_REFUSAL.format(ip=ip))
        self.ip = ip

    def __reduce__(self) -> tuple[type[PlaintextRefused], tuple[str]]:
        return (type(self), (self.ip,))


def is_allowed_plaintext_ip(ip: str) -> bool:
    """True if unencrypted traffic to this IP stays on a private network.

    Anything that does not parse as an IP is treated as not allowed.
    """
    try:
        addr = ipaddress.ip_address(ip.strip())
    except (ValueError, AttributeError):
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr.version == net.version and addr in net for net in _PRIVATE_NETWORKS)


def check_plaintext_ips(ips: Iterable[str], allow: bool) -> None:
    """Raise PlaintextRefused for the first public IP, unless the user allowed it."""
    if allow:
        return
    for ip in ips:
        if not is_allowed_plaintext_ip(ip):
            raise PlaintextRefused(ip)


async def resolve_checked(host: str, port: int, allow: bool) -> list[tuple]:
    """Resolve host for a TCP stream and refuse unless every result is private.

    A literal IP is checked before resolving so a refused dial sends nothing.
    Resolution failures propagate as OSError (socket.gaierror).
    """
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        check_plaintext_ips([host], allow)
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    check_plaintext_ips([str(info[4][0]) for info in infos], allow)
    return list(infos)


def allow_plaintext_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Read the user's AWP_ALLOW_PLAINTEXT override ("1", "true", "yes")."""
    env = os.environ if environ is None else environ
    return env.get("AWP_ALLOW_PLAINTEXT", "").strip().lower() in _TRUTHY
