"""Peer addresses: parse and print the forms people paste between agents.

Pure on purpose (no sockets, no trio, no sqlite): the CLI, the config loader and
the handshake all need to validate an address without touching the network.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ..base.echo import echo

__all__ = [
    "Address",
    "AddressError",
    "address_hint",
    "looks_like_address",
    "parse_address",
    "parse_listen",
]

# A tailcat address is "tc" plus base64url text; anything shorter than 40 chars
# cannot hold the keys it has to carry.
_TAILCAT_RE = re.compile(r"tc[A-Za-z0-9_-]{38,}")
_TAILCAT_ALPHABET_RE = re.compile(r"[A-Za-z0-9_-]+")
# Host names and IPv4 literals. Must not start with "-" or "." so an address can
# never be mistaken for a CLI flag or a relative name.
_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_PORT_RE = re.compile(r"[0-9]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

_EXPECTED = "expected tcp:HOST:PORT, unix:/ABSOLUTE/PATH, ws(s)://HOST/PATH or tc... (tailcat)"
_TCP_FORM = "tcp:HOST:PORT (IPv6 hosts in brackets, e.g. tcp:[::1]:7000)"
_UNIX_FORM = "unix:/ABSOLUTE/PATH or unix:///ABSOLUTE/PATH"
_TAILCAT_FORM = "tc followed by at least 38 characters of A-Z a-z 0-9 _ -"
_WS_FORM = "ws://HOST[:PORT][/PATH] or wss://HOST[:PORT][/PATH]"
_WS_LISTEN_FORM = "ws:HOST:PORT or ws:HOST:PORT=PUBLIC_URL (e.g. ws:0.0.0.0:8080=wss://box.example/)"
# What a URL path (and query) may hold: printable ASCII without spaces, and no
# fragment (a fragment never reaches the server).
_WS_PATH_RE = re.compile(r"/[\x21-\x7e]*")
_WS_DEFAULT_PORT = {False: 80, True: 443}
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class AddressError(ValueError):
    """An address string that awp cannot use; the message says what form is expected."""


@dataclass(frozen=True)
class Address:
    """A parsed peer or listen address; frozen so it can key dicts and sets."""

    kind: str  # "tcp" | "unix" | "tailcat" | "ws"
    host: str = ""
    port: int = 0
    path: str = ""  # unix: the socket; ws: the URL's path and query ("" in the listen form)
    tailcat: str = ""
    tls: bool = False  # ws: a wss:// URL
    url: str = ""  # ws listen form: the public URL peers dial ("" when none was given)

    @property
    def is_ws_listen(self) -> bool:
        """A ``ws:HOST:PORT[=URL]`` listen directive rather than a URL to dial."""
        return self.kind == "ws" and not self.path

    @property
    def http_host(self) -> str:
        """A ws URL's ``Host`` header: the host, with the port unless it is the default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _WS_DEFAULT_PORT[self.tls] else f"{host}:{self.port}"

    def endpoint(self) -> str:
        """The text a peer dials to reach this listener, "" when the bound host is a
        wildcard (0.0.0.0, ::) that names no address of its own."""
        if self.is_ws_listen:
            if self.url:
                return self.url
            if self.host in _WILDCARD_HOSTS:
                return ""
            return str(Address(kind="ws", host=self.host, port=self.port, path="/"))
        if self.kind == "tcp" and self.host in _WILDCARD_HOSTS:
            return ""
        return str(self)

    def __str__(self) -> str:
        """Canonical text, which parse_address/parse_listen read back unchanged."""
        if self.kind == "tcp":
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"tcp:{host}:{self.port}"
        if self.kind == "unix":
            # "unix://x" would read back as a relative path, so keep the slashes.
            return f"unix://{self.path}" if self.path.startswith("//") else f"unix:{self.path}"
        if self.kind == "tailcat":
            # An empty tailcat address is the listen directive "tailcat".
            return self.tailcat or "tailcat"
        if self.kind == "ws":
            if self.is_ws_listen:
                host = f"[{self.host}]" if ":" in self.host else self.host
                return f"ws:{host}:{self.port}" + (f"={self.url}" if self.url else "")
            return f"{'wss' if self.tls else 'ws'}://{self.http_host}{self.path}"
        return self.kind


def _show(text: str) -> str:
    """Quote user input for an error message without echoing a huge string."""
    return echo(text)


def _parse_port(shown: str, text: str, allow_port_zero: bool) -> int:
    low = 0 if allow_port_zero else 1
    if not text:
        raise AddressError(f"missing port in {shown}: expected {_TCP_FORM}")
    if not _PORT_RE.fullmatch(text):
        raise AddressError(f"port {text!r} in {shown} is not a number: expected {_TCP_FORM}")
    port = int(text)
    if not low <= port <= 65535:
        raise AddressError(f"port {port} in {shown} is out of range: ports are {low}..65535")
    return port


def _parse_tcp(shown: str, rest: str, allow_port_zero: bool) -> Address:
    if rest.startswith("//"):
        rest = rest[2:]
    if not rest:
        raise AddressError(f"missing host and port in {shown}: expected {_TCP_FORM}")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise AddressError(f"unclosed '[' in {shown}: expected {_TCP_FORM}")
        host, after = rest[1:end], rest[end + 1 :]
        if not host:
            raise AddressError(f"missing host in {shown}: expected {_TCP_FORM}")
        try:
            # Normalise so equal addresses compare equal (e.g. FDAA:0::3 == fdaa::3).
            v6 = ipaddress.IPv6Address(host)
        except ValueError:
            raise AddressError(
                f"{host!r} in {shown} is not an IPv6 address; brackets are only for IPv6"
            ) from None
        # Keep IPv4-mapped hosts readable (Python 3.11 would print ::ffff:a00:1).
        mapped = v6.ipv4_mapped
        host = f"::ffff:{mapped}" if mapped is not None else str(v6)
        if not after:
            raise AddressError(f"missing port in {shown}: expected {_TCP_FORM}")
        if not after.startswith(":"):
            raise AddressError(f"expected ':PORT' after ']' in {shown}: expected {_TCP_FORM}")
        port_text = after[1:]
    else:
        host, sep, port_text = rest.rpartition(":")
        if not sep:
            raise AddressError(f"missing port in {shown}: expected {_TCP_FORM}")
        if ":" in host:
            raise AddressError(f"IPv6 hosts must be in brackets in {shown}: expected {_TCP_FORM}")
        if not host:
            raise AddressError(f"missing host in {shown}: expected {_TCP_FORM}")
        if len(host) > 253 or not _HOST_RE.fullmatch(host):
            raise AddressError(f"bad host {host!r} in {shown}: expected {_TCP_FORM}")
    port = _parse_port(shown, port_text, allow_port_zero)
    return Address(kind="tcp", host=host, port=port)


def _parse_unix(shown: str, rest: str) -> Address:
    path = rest[2:] if rest.startswith("//") else rest
    if not path:
        raise AddressError(f"missing path in {shown}: expected {_UNIX_FORM}")
    if not path.startswith("/"):
        raise AddressError(f"unix socket path in {shown} must be absolute: expected {_UNIX_FORM}")
    if path.endswith("/"):
        raise AddressError(f"unix socket path in {shown} names a directory: expected {_UNIX_FORM}")
    return Address(kind="unix", path=path)


def _parse_ws_url(shown: str, scheme: str, rest: str) -> Address:
    """``ws://`` and ``wss://`` (and, for a listener's public URL, ``http(s)://``
    read as their WebSocket twins, so a platform's URL can be pasted as given)."""
    tls = scheme in ("wss", "https")
    if not rest.startswith("//"):
        raise AddressError(f"expected {scheme}:// in {shown}: expected {_WS_FORM}")
    rest = rest[2:]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if path.startswith("?"):
        path = "/" + path
    path = path or "/"
    if "@" in authority:
        raise AddressError(f"{shown} carries a user name or password: expected {_WS_FORM}")
    if "#" in path:
        raise AddressError(f"{shown} has a #fragment, which never reaches the server")
    if not _WS_PATH_RE.fullmatch(path):
        raise AddressError(f"bad path {path!r} in {shown}: expected {_WS_FORM}")
    if not authority:
        raise AddressError(f"missing host in {shown}: expected {_WS_FORM}")
    default = _WS_DEFAULT_PORT[tls]
    has_port = authority.rsplit("]", 1)[-1].count(":") == 1 if authority.startswith("[") \
        else ":" in authority
    try:
        hp = _parse_tcp(shown, authority if has_port else f"{authority}:{default}", False)
    except AddressError as e:
        raise AddressError(str(e).replace(f"expected {_TCP_FORM}", f"expected {_WS_FORM}")) from None
    return Address(kind="ws", host=hp.host, port=hp.port, path=path, tls=tls)


def _parse_ws_listen(shown: str, rest: str, allow_port_zero: bool) -> Address:
    """``ws:HOST:PORT`` with an optional ``=PUBLIC_URL`` peers are told to dial."""
    bind, eq, public = rest.partition("=")
    try:
        hp = _parse_tcp(shown, bind, allow_port_zero)
    except AddressError as e:
        raise AddressError(
            str(e).replace(f"expected {_TCP_FORM}", f"expected {_WS_LISTEN_FORM}")) from None
    url = ""
    if eq:
        if not public:
            raise AddressError(f"missing public URL after '=' in {shown}: expected {_WS_LISTEN_FORM}")
        pscheme, psep, prest = public.partition(":")
        if not psep or pscheme.lower() not in ("ws", "wss", "http", "https"):
            raise AddressError(f"the public URL in {shown} must be {_WS_FORM}")
        url = str(_parse_ws_url(shown, pscheme.lower(), prest))
    return Address(kind="ws", host=hp.host, port=hp.port, url=url)


def parse_address(text: str, *, allow_port_zero: bool = False) -> Address:
    """Parse a peer address; raise AddressError naming the expected form.

    Port 0 only makes sense when listening (let the OS pick), hence the keyword.
    """
    if not isinstance(text, str):
        raise AddressError(f"an address must be a string, not {type(text).__name__}")
    s = text.strip()
    if not s:
        raise AddressError(f"empty address: {_EXPECTED}")
    if "\x00" in s:
        raise AddressError(f"address {_show(s)} contains a NUL byte")
    if _CONTROL_RE.search(s):
        raise AddressError(f"address {_show(s)} contains control characters")
    # Checked before the scheme split: a bare tailcat address may start with "tcp".
    if _TAILCAT_RE.fullmatch(s):
        return Address(kind="tailcat", tailcat=s)
    shown = _show(s)
    scheme, sep, rest = s.partition(":")
    if not sep:
        if s.startswith("tc") and _TAILCAT_ALPHABET_RE.fullmatch(s):
            raise AddressError(
                f"{shown} is too short for a tailcat address: expected {_TAILCAT_FORM}"
            )
        raise AddressError(f"not an address: {shown}; {_EXPECTED}")
    scheme = scheme.lower()
    if scheme == "tcp":
        return _parse_tcp(shown, rest, allow_port_zero)
    if scheme == "unix":
        return _parse_unix(shown, rest)
    if scheme in ("ws", "wss") and rest.startswith("//"):
        return _parse_ws_url(shown, scheme, rest)
    if scheme in ("http", "https"):
        raise AddressError(f"{shown} is a web URL: for awp over a WebSocket at that URL,"
                           f" write {'wss' if scheme == 'https' else 'ws'}:{rest}")
    if scheme == "ws":
        return _parse_ws_listen(shown, rest, allow_port_zero)
    if scheme == "wss":
        raise AddressError(f"expected {scheme}:// in {shown}: expected {_WS_FORM}")
    if scheme == "tailcat":
        if _TAILCAT_RE.fullmatch(rest):
            return Address(kind="tailcat", tailcat=rest)
        raise AddressError(
            f"bad tailcat address {shown}: expected tailcat:tc... with {_TAILCAT_FORM}"
        )
    raise AddressError(f"unknown address scheme {scheme!r} in {shown}; {_EXPECTED}")


def looks_like_address(text: str) -> bool:
    """Tell a CLI argument that is an address apart from a peer name or key."""
    try:
        parse_address(text)
    except AddressError:
        return False
    return True


_HOSTPORT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_][A-Za-z0-9_.-]*):[0-9]{1,5}")


def address_hint(text: str) -> str:
    """For a reference that names no known peer: how to write it if it was meant
    as an address (``host:port`` without ``tcp:``, a tailcat address cut short).
    Empty when it does not look like one."""
    s = text.strip()
    if _HOSTPORT_RE.fullmatch(s):
        return f"; to reach an address, write tcp:{s}"
    if (len(s) >= 12 and s.startswith("tc") and _TAILCAT_ALPHABET_RE.fullmatch(s)
            and not _TAILCAT_RE.fullmatch(s)):
        return (f"; if it is a tailcat address, it is cut short ({len(s)} characters):"
                f" expected {_TAILCAT_FORM}")
    return ""


def parse_listen(text: str) -> Address:
    """Parse a listen address: any address form, port 0, or the bare word "tailcat"
    (a ws listener is ``ws:HOST:PORT[=PUBLIC_URL]``, not a URL)."""
    if isinstance(text, str) and text.strip().lower() == "tailcat":
        return Address(kind="tailcat", tailcat="")
    addr = parse_address(text, allow_port_zero=True)
    if addr.kind == "ws" and not addr.is_ws_listen:
        raise AddressError(f"{_show(text.strip())} is a URL to dial; a ws listener is"
                           f" {_WS_LISTEN_FORM}")
    return addr
