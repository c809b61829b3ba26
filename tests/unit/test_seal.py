"""Sealed links: the key schedule, the record stream, and the handshake's agreement."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest

from awp.node.handshake import Handshake, LocalHello
from awp.wire.errors import ProtocolError
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity
from awp.wire.seal import (
    MAX_RECORD,
    Ephemeral,
    Opener,
    Sealer,
    SealError,
    parse_seal_key,
    transcript_hash,
)

# The vectors SPEC.md gives for the extension (section "Sealed links").
D_SECRET = bytes(range(32))
L_SECRET = bytes(range(32, 64))
D_HELLO = b'{"t":"hello","name":"d"}'
L_HELLO = b'{"t":"hello","name":"l"}'
VECTORS = {
    "d_public": "8f40c5adb68f25624ae5b214ea767a6ec94d829d3d7b5e1ad1ba6f3e2138285f",
    "l_public": "358072d6365880d1aeea329adf9121383851ed21a28e3b75e965d0d2cd166254",
    "transcript": "51753b44f85e0b43f85eaef42bf2e9c4f0e5ae1827e579547abac0efa4d4e1c7",
    "d2l": "a1542aacf4ad3154f3e01a6e1aaac76e54bda4fcd6e6e7963a3005accdb4ab60",
    "l2d": "45e0a8e6d27c0512f2170384f6a6719bcbe2fe48abbc387fa92252f3707d7e36",
}


def test_vectors_match_the_spec():
    d, lst = Ephemeral(D_SECRET), Ephemeral(L_SECRET)
    assert d.public.hex() == VECTORS["d_public"] and lst.public.hex() == VECTORS["l_public"]
    th = transcript_hash(D_HELLO, L_HELLO)
    assert th.hex() == VECTORS["transcript"]
    d_tx, d_rx = d.keys(lst.public, dialer=True, transcript=th)
    l_tx, l_rx = lst.keys(d.public, dialer=False, transcript=th)
    assert d_tx.hex() == l_rx.hex() == VECTORS["d2l"]
    assert d_rx.hex() == l_tx.hex() == VECTORS["l2d"]


def test_vectors_recomputed_with_another_library():
    """The schedule as SPEC.md words it, from `cryptography` and hashlib, not libsodium."""
    x25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.x25519")
    d = x25519.X25519PrivateKey.from_private_bytes(D_SECRET)
    lpub = bytes.fromhex(VECTORS["l_public"])
    dpub = bytes.fromhex(VECTORS["d_public"])
    q = d.exchange(x25519.X25519PublicKey.from_public_bytes(lpub))
    kx = hashlib.blake2b(q + dpub + lpub, digest_size=64).digest()
    d_rx_kx, d_tx_kx = kx[:32], kx[32:]  # crypto_kx: the client's rx, then its tx
    be32 = struct.Struct(">I").pack
    th = hashlib.blake2b(b"awp-seal-v1" + be32(len(D_HELLO)) + D_HELLO + be32(len(L_HELLO))
                         + L_HELLO, digest_size=32).digest()
    assert th.hex() == VECTORS["transcript"]
    d2l = hashlib.blake2b(th, digest_size=32, key=d_tx_kx, person=b"awp-seal-v1-d2l\0").digest()
    l2d = hashlib.blake2b(th, digest_size=32, key=d_rx_kx, person=b"awp-seal-v1-l2d\0").digest()
    assert d2l.hex() == VECTORS["d2l"] and l2d.hex() == VECTORS["l2d"]


def pair() -> tuple[Sealer, Opener]:
    key = bytes(range(100, 132))
    return Sealer(key), Opener(key)


def test_round_trip_in_any_pieces():
    s, o = pair()
    data = b"line\n" * 50_000  # several records
    wire = s.seal(data) + s.seal(b"") + s.seal(b"tail\n") + s.final()
    got = b"".join(o.feed(wire[i:i + 333]) for i in range(0, len(wire), 333))
    o.eof()
    assert got == data + b"tail\n" and o.finished


def records(wire: bytes) -> tuple[bytes, list[bytes]]:
    header, rest, out = wire[:24], wire[24:], []
    while rest:
        (n,) = struct.unpack(">I", rest[:4])
        out.append(rest[:4 + n])
        rest = rest[4 + n:]
    return header, out


@pytest.mark.parametrize("attack", ["flip", "drop", "replay", "inject", "reorder", "swap_header"])
def test_tampering_fails_authentication(attack):
    s, o = pair()
    header, recs = records(s.seal(b"a" * 10) + s.seal(b"b" * 10) + s.seal(b"c" * 10))
    if attack == "flip":
        r = bytearray(recs[1])
        r[10] ^= 1
        recs[1] = bytes(r)
    elif attack == "drop":
        del recs[1]
    elif attack == "replay":
        recs.insert(2, recs[1])
    elif attack == "inject":
        other, _ = pair()
        recs.insert(1, records(other.seal(b"x" * 10))[1][0])
    elif attack == "reorder":
        recs[1], recs[2] = recs[2], recs[1]
    elif attack == "swap_header":
        header = bytes(24)
    got = b""
    with pytest.raises(SealError, match="authentication"):
        got += o.feed(header)
        for r in recs:
            got += o.feed(r)
    full = b"a" * 10 + b"b" * 10 + b"c" * 10
    assert full.startswith(got) and got != full  # only what came before the damage


def test_cut_stream_is_not_a_clean_end():
    s, o = pair()
    assert o.feed(s.seal(b"half")) == b"half"
    with pytest.raises(SealError, match="cut short"):
        o.eof()


def test_bytes_after_final_are_refused():
    s, o = pair()
    wire = s.final()
    o.feed(wire)
    with pytest.raises(SealError, match="after"):
        o.feed(struct.pack(">I", 40) + bytes(40))


def test_record_length_bound_checked_before_buffering():
    _, o = pair()
    o.feed(bytes(24))
    with pytest.raises(SealError, match="out of bounds"):
        o.feed(struct.pack(">I", MAX_RECORD + 18))


def test_parse_seal_key_shapes():
    assert parse_seal_key(Ephemeral().text) is not None
    for bad in (None, 5, "", "!" * 43, "A" * 44, "A" * 42):
        assert parse_seal_key(bad) is None


def hs(name: str, *, outbound: bool, seal: str = "prefer") -> Handshake:
    return Handshake(Identity.generate(), LocalHello(name=name, caps=["chat"]), IdGenerator(),
                     outbound=outbound, seal=seal)


def exchange(a: Handshake, b: Handshake) -> None:
    ha, hb = a.start(), b.start()
    auth_a, auth_b = a.receive(hb[:-1]), b.receive(ha[:-1])
    a.receive(auth_b[:-1])
    b.receive(auth_a[:-1])


def test_both_offering_agree_on_crossed_keys():
    a, b = hs("a", outbound=True), hs("b", outbound=False)
    exchange(a, b)
    assert a.done and b.done and a.seal_keys and b.seal_keys
    assert a.seal_keys[0] == b.seal_keys[1] and a.seal_keys[1] == b.seal_keys[0]


def test_one_side_off_leaves_the_link_plain():
    a, b = hs("a", outbound=True), hs("b", outbound=False, seal="off")
    exchange(a, b)
    assert a.seal_keys is None and b.seal_keys is None


def test_require_refuses_a_peer_without_the_extension():
    a, b = hs("a", outbound=True, seal="require"), hs("b", outbound=False, seal="off")
    a.start()
    with pytest.raises(ProtocolError, match="requires sealed links") as info:
        a.receive(b.start()[:-1])
    assert info.value.code == "auth"


def test_bad_seal_key_is_refused_not_ignored():
    a, b = hs("a", outbound=True), hs("b", outbound=False)
    a.start()
    obj = json.loads(b.start())
    obj["seal"] = "A" * 43  # decodes to 32 bytes: the all-zero point, low order
    with pytest.raises(ProtocolError) as info:
        a.receive(json.dumps(obj).encode())
    assert info.value.code == "auth"
    obj["seal"] = "short"
    a2 = hs("a", outbound=True)
    a2.start()
    with pytest.raises(ProtocolError, match="X25519"):
        a2.receive(json.dumps(obj).encode())


def test_swapped_seal_key_breaks_the_auth_signature():
    """A middlebox that puts its own seal key in a hello cannot make auth verify."""
    a, b = hs("a", outbound=True), hs("b", outbound=False)
    ha, hb = a.start(), b.start()
    forged = json.loads(hb)
    forged["seal"] = Ephemeral().text
    a.receive(json.dumps(forged, separators=(",", ":")).encode())
    auth_b = b.receive(ha[:-1])
    with pytest.raises(ProtocolError, match="does not verify"):
        a.receive(auth_b[:-1])
