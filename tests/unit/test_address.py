"""Address parsing: every accepted form, every rejection, canonical round trips."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import awp.wire.address as address_module
from awp.wire.address import (
    Address,
    AddressError,
    looks_like_address,
    parse_address,
    parse_listen,
)

# A realistic-looking tailcat address that starts with "tcp", like the docs' example.
TC_TCP = "tcpGFwWCC4NZzx45Vm3" + "a1_B-" * 5  # 44 chars
TC_MIN = "tc" + "A" * 38  # exactly 40 chars, the shortest accepted
TC_LONG = "tc" + "Zz09_-" * 20


ACCEPTED = [
    # text, expected address, canonical string
    ("tcp:127.0.0.1:7000", Address("tcp", host="127.0.0.1", port=7000), "tcp:127.0.0.1:7000"),
    ("tcp://10.0.0.5:7000", Address("tcp", host="10.0.0.5", port=7000), "tcp:10.0.0.5:7000"),
    ("tcp:localhost:1", Address("tcp", host="localhost", port=1), "tcp:localhost:1"),
    (
        "tcp:my-host.internal:65535",
        Address("tcp", host="my-host.internal", port=65535),
        "tcp:my-host.internal:65535",
    ),
    ("tcp:[::1]:7000", Address("tcp", host="::1", port=7000), "tcp:[::1]:7000"),
    ("tcp://[fdaa::3]:7000", Address("tcp", host="fdaa::3", port=7000), "tcp:[fdaa::3]:7000"),
    ("tcp:[FDAA:0:0::3]:7000", Address("tcp", host="fdaa::3", port=7000), "tcp:[fdaa::3]:7000"),
    (
        "tcp:[fe80::1%eth0]:7000",
        Address("tcp", host="fe80::1%eth0", port=7000),
        "tcp:[fe80::1%eth0]:7000",
    ),
    (
        "tcp:[::ffff:10.0.0.1]:9",
        Address("tcp", host="::ffff:10.0.0.1", port=9),
        "tcp:[::ffff:10.0.0.1]:9",
    ),
    ("TCP:host:7", Address("tcp", host="host", port=7), "tcp:host:7"),
    ("tcp:host:007", Address("tcp", host="host", port=7), "tcp:host:7"),
    ("  tcp:h:1\n", Address("tcp", host="h", port=1), "tcp:h:1"),
    ("unix:/tmp/x.sock", Address("unix", path="/tmp/x.sock"), "unix:/tmp/x.sock"),
    ("unix:///tmp/x.sock", Address("unix", path="/tmp/x.sock"), "unix:/tmp/x.sock"),
    ("unix:/run/awp/b.sock", Address("unix", path="/run/awp/b.sock"), "unix:/run/awp/b.sock"),
    ("UNIX:/a b/c.sock", Address("unix", path="/a b/c.sock"), "unix:/a b/c.sock"),
    ("unix:////x.sock", Address("unix", path="//x.sock"), "unix:////x.sock"),
    (TC_MIN, Address("tailcat", tailcat=TC_MIN), TC_MIN),
    (TC_TCP, Address("tailcat", tailcat=TC_TCP), TC_TCP),
    (TC_LONG, Address("tailcat", tailcat=TC_LONG), TC_LONG),
    (f"tailcat:{TC_TCP}", Address("tailcat", tailcat=TC_TCP), TC_TCP),
    (f" {TC_MIN} ", Address("tailcat", tailcat=TC_MIN), TC_MIN),
]


@pytest.mark.parametrize(("text", "expected", "canonical"), ACCEPTED)
def test_accepted_forms(text: str, expected: Address, canonical: str) -> None:
    addr = parse_address(text)
    assert addr == expected
    assert str(addr) == canonical
    assert looks_like_address(text)


@pytest.mark.parametrize(("text", "expected", "canonical"), ACCEPTED)
def test_canonical_round_trip(text: str, expected: Address, canonical: str) -> None:
    addr = parse_address(text)
    assert parse_address(str(addr)) == addr
    assert parse_listen(str(addr)) == addr


REJECTED = [
    # text, fragment of the error message
    ("", "empty address"),
    ("   \t", "empty address"),
    ("http://host:80", "is a web URL"),
    ("ed25519:AAAA", "unknown address scheme 'ed25519'"),
    ("builder", "not an address"),
    ("a@box", "not an address"),
    ("-Abc12", "not an address"),
    ("tcp:", "missing host and port"),
    ("tcp://", "missing host and port"),
    ("tcp:host", "missing port"),
    ("tcp:host:", "missing port"),
    ("tcp://host", "missing port"),
    ("tcp:host:abc", "is not a number"),
    ("tcp:host:-1", "is not a number"),
    ("tcp:host:7000/", "is not a number"),
    ("tcp:host:0", "out of range: ports are 1..65535"),
    ("tcp:host:65536", "out of range"),
    ("tcp:host:99999999", "out of range"),
    ("tcp::7000", "missing host"),
    ("tcp:::1:7000", "must be in brackets"),
    ("tcp:[::1", "unclosed '['"),
    ("tcp:[::1]", "missing port"),
    ("tcp:[::1]7000", "expected ':PORT' after ']'"),
    ("tcp:[]:7000", "missing host"),
    ("tcp:[nothost]:7000", "is not an IPv6 address"),
    ("tcp:[10.0.0.1]:7000", "is not an IPv6 address"),
    ("tcp:ho st:1", "bad host"),
    ("tcp:-host:1", "bad host"),
    ("tcp:user@host:1", "bad host"),
    ("unix:", "missing path"),
    ("unix://", "missing path"),
    ("unix:relative/x.sock", "must be absolute"),
    ("unix://tmp/x.sock", "must be absolute"),
    ("unix:/tmp/dir/", "names a directory"),
    ("unix:/tmp/x\x00y", "NUL byte"),
    ("tcp:host\x00:1", "NUL byte"),
    ("tcp:ho\nst:1", "control characters"),
    ("tc" + "A" * 37, "too short for a tailcat address"),
    ("tc" + "A" * 37 + "!", "not an address"),
    ("tailcat:", "bad tailcat address"),
    ("tailcat:tcshort", "bad tailcat address"),
    (f"tailcat:{TC_MIN}!", "bad tailcat address"),
    (f"tailcat://{TC_MIN}", "bad tailcat address"),
    ("tailcat", "not an address"),
]


@pytest.mark.parametrize(("text", "fragment"), REJECTED)
def test_rejected_forms(text: str, fragment: str) -> None:
    with pytest.raises(AddressError) as info:
        parse_address(text)
    assert fragment in str(info.value)
    assert not looks_like_address(text)


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("", "tcp:HOST:PORT"),
        ("gopher://host:80", "unix:/ABSOLUTE/PATH"),
        ("tcp:host", "tcp:HOST:PORT"),
        ("tcp:host:x", "tcp:[::1]:7000"),
        ("unix:rel", "unix:/ABSOLUTE/PATH"),
        ("tcshort" + "x" * 20, "at least 38 characters"),
    ],
)
def test_errors_say_what_form_is_expected(text: str, form: str) -> None:
    with pytest.raises(AddressError, match=None) as info:
        parse_address(text)
    assert form in str(info.value)


def test_address_error_is_value_error() -> None:
    assert issubclass(AddressError, ValueError)
    with pytest.raises(ValueError):
        parse_address("nope")


def test_non_string_rejected() -> None:
    with pytest.raises(AddressError, match="must be a string"):
        parse_address(7000)  # type: ignore[arg-type]
    assert not looks_like_address(None)  # type: ignore[arg-type]


def test_long_input_is_truncated_in_message() -> None:
    with pytest.raises(AddressError) as info:
        parse_address("x" * 500)
    assert len(str(info.value)) < 200


def test_port_zero_only_when_allowed() -> None:
    with pytest.raises(AddressError, match="1..65535"):
        parse_address("tcp:127.0.0.1:0")
    assert parse_address("tcp:127.0.0.1:0", allow_port_zero=True) == Address(
        "tcp", host="127.0.0.1", port=0
    )
    with pytest.raises(AddressError, match="0..65535"):
        parse_address("tcp:127.0.0.1:65536", allow_port_zero=True)
    assert not looks_like_address("tcp:127.0.0.1:0")


def test_address_is_frozen_and_hashable() -> None:
    addr = parse_address("tcp:127.0.0.1:7000")
    with pytest.raises(dataclasses.FrozenInstanceError):
        addr.port = 1  # type: ignore[misc]
    assert {addr, parse_address("tcp://127.0.0.1:7000")} == {addr}


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        ("tailcat", Address("tailcat", tailcat=""), "tailcat"),
        (" TailCat ", Address("tailcat", tailcat=""), "tailcat"),
        ("tcp:0.0.0.0:0", Address("tcp", host="0.0.0.0", port=0), "tcp:0.0.0.0:0"),
        ("tcp:0.0.0.0:7000", Address("tcp", host="0.0.0.0", port=7000), "tcp:0.0.0.0:7000"),
        ("tcp:[::]:7000", Address("tcp", host="::", port=7000), "tcp:[::]:7000"),
        ("tcp://[fdaa::3]:0", Address("tcp", host="fdaa::3", port=0), "tcp:[fdaa::3]:0"),
        ("unix:/tmp/b.sock", Address("unix", path="/tmp/b.sock"), "unix:/tmp/b.sock"),
        ("unix:///tmp/b.sock", Address("unix", path="/tmp/b.sock"), "unix:/tmp/b.sock"),
        (TC_TCP, Address("tailcat", tailcat=TC_TCP), TC_TCP),
        (f"tailcat:{TC_MIN}", Address("tailcat", tailcat=TC_MIN), TC_MIN),
    ],
)
def test_parse_listen_accepts(text: str, expected: Address, canonical: str) -> None:
    addr = parse_listen(text)
    assert addr == expected
    assert str(addr) == canonical
    assert parse_listen(str(addr)) == addr


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty address"),
        ("tailcats", "not an address"),
        ("tailcat:", "bad tailcat address"),
        ("tcp:0.0.0.0:65536", "0..65535"),
        ("tcp:0.0.0.0", "missing port"),
        ("unix:rel.sock", "must be absolute"),
        ("nonsense", "not an address"),
    ],
)
def test_parse_listen_rejects(text: str, fragment: str) -> None:
    with pytest.raises(AddressError) as info:
        parse_listen(text)
    assert fragment in str(info.value)


def test_looks_like_address_for_cli_arguments() -> None:
    assert looks_like_address("tcp:10.0.0.5:7000")
    assert looks_like_address("unix:/run/awp/b.sock")
    assert looks_like_address(TC_TCP)
    for name in ["builder", "a@box", "ed25519:AAAAbbbbCCCC", "-Abc12", "Abc12", "", "tailcat"]:
        assert not looks_like_address(name), name


def test_address_module_is_pure() -> None:
    """The address module must stay importable without trio or sqlite."""
    tree = ast.parse(Path(address_module.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"trio", "sqlite3", "sqlite_utils", "socket", "os", "anyio"}
