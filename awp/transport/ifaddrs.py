"""The host's own IP addresses, for telling peers where a wildcard listener is.

A listener on ``tcp:0.0.0.0:7000`` is reachable at every interface's
address, but ``0.0.0.0`` itself is no address a peer can dial.  ``awp up``
and ``awp status`` print the concrete ones instead.  Linux only needs the
standard library here: IPv4 addresses come from the ``SIOCGIFADDR`` ioctl on
each interface, IPv6 ones from ``/proc/net/if_inet6``; elsewhere we fall back
to what the host name resolves to.  Link-local IPv6 addresses are left out:
they need a zone to be dialed.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

from ..wire.address import Address

_SIOCGIFADDR = 0x8915


def _ipv4_linux() -> list[str]:
    import fcntl

    out: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _idx, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                res = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)
            except OSError:
                continue  # no IPv4 address on this interface
            out.append(socket.inet_ntoa(res[20:24]))
    return out


def _ipv6_linux() -> list[str]:
    out: list[str] = []
    try:
        with open("/proc/net/if_inet6") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if not fields or len(fields[0]) != 32:
            continue
        ip = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
        if not ip.is_link_local:
            out.append(str(ip))
    return out


def _by_hostname(family: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, family, socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(i[4][0]) for i in infos]


def local_ips(family: int) -> list[str]:
    """This host's addresses of ``family`` (AF_INET or AF_INET6), non-loopback first."""
    try:
        found = _ipv4_linux() if family == socket.AF_INET else _ipv6_linux()
    except (OSError, ImportError, AttributeError):
        found = []
    if not found:
        found = _by_hostname(family)
    uniq = list(dict.fromkeys(found))
    return sorted(uniq, key=lambda a: ipaddress.ip_address(a).is_loopback)


def expand_wildcard(addr: Address) -> list[str]:
    """Addresses a peer can dial for a tcp or ws listener bound to a wildcard host."""
    host, port = addr.host, addr.port
    ips: list[str] = []
    if host in ("0.0.0.0", ""):
        ips = local_ips(socket.AF_INET)
    elif host == "::":
        ips = [f"[{ip}]" for ip in local_ips(socket.AF_INET6)] + local_ips(socket.AF_INET)
    if addr.kind == "ws":
        return [f"ws://{ip}:{port}/" for ip in ips]
    return [f"tcp:{ip}:{port}" for ip in ips]
