"""What a wss:// dial trusts: the home's extra CAs (awp connect --ca), and where ws:// may go in plain text."""

from __future__ import annotations

import os
import stat

import pytest
from fixtures.derp import make_test_ca

from awp.daemon.ws_ca import MAX_CA_BYTES, CaError, add_ca
from awp.transport.streams import TransportError
from awp.transport.wsclient import tls_context
from awp.transport.wsconfig import MAX_CA_FILE_BYTES, ca_path, read_ca_file


@pytest.fixture
def pems(tmp_path) -> list[str]:
    out = []
    for i in range(2):
        paths = make_test_ca(str(tmp_path / f"ca{i}"))
        with open(paths["ca"]) as f:
            out.append(f.read())
    return out


def test_a_ca_is_kept_once_and_only_its_certificate_blocks(tmp_path, pems):
    home = str(tmp_path / "home")
    os.mkdir(home)
    noisy = "a comment before\n" + pems[0] + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    assert add_ca(home, noisy) == 1
    assert add_ca(home, pems[0]) == 0  # the same certificate again: nothing added
    assert add_ca(home, pems[0] + pems[1]) == 1
    kept = read_ca_file(ca_path(home))
    assert kept.count("BEGIN CERTIFICATE") == 2
    assert "PRIVATE KEY" not in kept and "comment" not in kept
    assert stat.S_IMODE(os.stat(ca_path(home)).st_mode) == 0o600
    tls_context(ca_path(home))  # loads


@pytest.mark.parametrize("text, why", [
    ("", "holds no PEM certificate"),
    ("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "holds no PEM certificate"),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "does not load as certificates"),
    ("x" * (MAX_CA_BYTES + 1), "over 256 KiB"),
])
def test_text_that_is_no_certificate_is_refused_in_words(tmp_path, text, why):
    with pytest.raises(CaError, match=why):
        add_ca(str(tmp_path), text)
    assert not os.path.exists(ca_path(str(tmp_path)))


def test_a_symlinked_ca_file_is_neither_written_through_nor_trusted(tmp_path, pems):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere.pem"
    home.mkdir()
    elsewhere.write_text("")
    os.symlink(elsewhere, ca_path(str(home)))
    with pytest.raises(CaError, match="symbolic link"):
        add_ca(str(home), pems[0])
    assert elsewhere.read_text() == ""
    with pytest.raises(TransportError, match="symbolic link"):
        tls_context(ca_path(str(home)))


def test_the_file_is_bounded_when_added_to_and_when_read(tmp_path, pems):
    home = str(tmp_path)
    with open(ca_path(home), "w") as f:
        f.write(pems[0] * (MAX_CA_FILE_BYTES // len(pems[0])))
    with pytest.raises(CaError, match="would grow over 1024 KiB"):
        add_ca(home, pems[1])
    with open(ca_path(home), "a") as f:
        f.write(pems[1])
    with pytest.raises(TransportError, match="over 1024 KiB"):
        tls_context(ca_path(home))


def test_no_file_is_no_extra_ca(tmp_path):
    assert read_ca_file(ca_path(str(tmp_path))) == ""
    tls_context(ca_path(str(tmp_path)))


def test_plain_ws_to_a_public_address_is_refused_before_any_byte_goes(monkeypatch):
    import trio

    from awp.transport.policy import PlaintextRefused
    from awp.transport.streams import dial
    from awp.wire.address import parse_address

    monkeypatch.delenv("AWP_ALLOW_PLAINTEXT", raising=False)

    async def main() -> None:
        with pytest.raises(PlaintextRefused, match="8.8.8.8"):
            await dial(parse_address("ws://8.8.8.8/awp"), timeout=5)

    trio.run(main)
