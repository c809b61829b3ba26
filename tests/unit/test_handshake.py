"""The sans-I/O handshake: two peers in memory, and every way it must fail."""

from __future__ import annotations

import json

import pytest

from awp.node.handshake import Handshake, LocalHello
from awp.wire.b64 import b64url
from awp.wire.errors import ProtocolError
from awp.wire.ids import IdGenerator, is_ulid
from awp.wire.keys import Identity, auth_transcript, verify
from awp.wire.timefmt import parse_ts

REF_CAPS = ["chat", "blob", "grant", "introduce", "presence", "mirror"]
PEER_ID = "01K5ZQ0Y6S7C8D9E0F1G2H3J4K"
TS = "2026-09-25T17:03:11.123Z"


def make(name: str = "alice", caps: list[str] | None = None, identity: Identity | None = None,
         **kw) -> Handshake:
    return Handshake(
        identity=identity or Identity.generate(),
        local=LocalHello(name=name, caps=list(REF_CAPS if caps is None else caps), **kw),
        ids=IdGenerator(),
    )


def strip(line: bytes) -> bytes:
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return line[:-1]


def expect(code: str, hs: Handshake, line: bytes):
    with pytest.raises(ProtocolError) as info:
        hs.receive(line)
    e = info.value
    assert e.code == code, (e.code, e.detail)
    return e


def peer_hello(ident: Identity, **overrides) -> bytes:
    obj = {"t": "hello", "id": PEER_ID, "ts": TS, "v": 0, "key": ident.key, "name": "mallory",
           "nonce": b64url(bytes(32)), "caps": ["blob"], "about": ""}
    obj.update(overrides)
    obj = {k: v for k, v in obj.items() if v is not ...}
    return json.dumps(obj, separators=(",", ":")).encode()


def auth_line(sig: object, **extra) -> bytes:
    return json.dumps({"t": "auth", "id": PEER_ID[:-1] + "Z", "ts": TS, "sig": sig, **extra},
                      separators=(",", ":")).encode()


def exchange_hellos(a: Handshake, b: Handshake):
    ha, hb = a.start(), b.start()
    auth_a = a.receive(strip(hb))
    auth_b = b.receive(strip(ha))
    return ha, hb, auth_a, auth_b


# --- the happy path -----------------------------------------------------------------


def test_two_peers_complete_the_handshake():
    a, b = make("alice"), make("bob")
    ha, hb = a.start(), b.start()
    assert a.stage == b.stage == "hello"
    assert not a.done and not b.done

    auth_a = a.receive(strip(hb))
    auth_b = b.receive(strip(ha))
    assert auth_a is not None and auth_b is not None
    assert a.stage == b.stage == "auth"
    assert a.peer_key == b.identity.key
    assert b.peer_key == a.identity.key

    assert a.receive(strip(auth_b)) is None
    assert b.receive(strip(auth_a)) is None
    assert a.done and b.done
    assert a.peer_key == b.identity.key
    assert b.peer_key == a.identity.key
    assert a.peer["name"] == "bob" and b.peer["name"] == "alice"
    assert a.peer_hello == strip(hb) and a.my_hello == strip(ha)
    assert b.peer_hello == strip(ha) and b.my_hello == strip(hb)
    assert a.peer_grants == [] and b.peer_grants == []


def test_auth_order_does_not_matter():
    a, b = make("alice"), make("bob")
    ha, hb = a.start(), b.start()
    auth_b = b.receive(strip(ha))
    # a has not seen b's hello yet when b already authenticated; a gets both in order
    auth_a = a.receive(strip(hb))
    assert a.receive(strip(auth_b)) is None
    assert b.receive(strip(auth_a)) is None
    assert a.done and b.done


def test_auth_signature_covers_exact_transcript():
    a, b = make("alice"), make("bob")
    ha, hb, auth_a, auth_b = exchange_hellos(a, b)
    sig_a = json.loads(auth_a)["sig"]
    sig_b = json.loads(auth_b)["sig"]
    assert len(sig_a) == 86 and len(sig_b) == 86
    ta = b"awp-auth-v0\x00" + strip(ha) + b"\x00" + strip(hb)
    tb = b"awp-auth-v0\x00" + strip(hb) + b"\x00" + strip(ha)
    assert ta == auth_transcript(strip(ha), strip(hb))
    assert verify(a.identity.key, ta, sig_a)
    assert verify(b.identity.key, tb, sig_b)
    # not the mirror image, not with the newlines, not by the other key
    assert not verify(a.identity.key, tb, sig_a)
    assert not verify(a.identity.key, b"awp-auth-v0\x00" + ha + b"\x00" + hb, sig_a)
    assert not verify(b.identity.key, ta, sig_a)


def test_auth_line_shape():
    a, b = make(), make("bob")
    _, _, auth_a, _ = exchange_hellos(a, b)
    obj = json.loads(strip(auth_a))
    assert obj["t"] == "auth"
    assert is_ulid(obj["id"])
    parse_ts(obj["ts"])


def test_hello_line_shape():
    a = make("alice", caps=["blob", "grant"], about="builds things")
    line = a.start()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b'"v":0' in line
    obj = json.loads(line)
    assert obj["t"] == "hello"
    assert obj["v"] == 0 and type(obj["v"]) is int
    assert obj["key"] == a.identity.key
    assert obj["name"] == "alice"
    assert obj["caps"] == ["blob", "grant", "seal"]  # offered unless the policy is off
    assert isinstance(obj["caps"], list)
    assert len(obj["seal"]) == 43
    assert len(obj["nonce"]) == 43
    assert "=" not in obj["nonce"]
    assert obj["about"] == "builds things"
    assert is_ulid(obj["id"])
    assert parse_ts(obj["ts"]) > 0
    assert "addr" not in obj and "shares" not in obj


def test_hello_with_empty_caps_still_lists_caps_and_v():
    hs = make(caps=[])
    hs.seal = "off"
    obj = json.loads(hs.start())
    assert obj["caps"] == [] and "seal" not in obj
    assert obj["v"] == 0
    assert len(obj["nonce"]) == 43


def test_hello_carries_addr_and_shares_when_set():
    obj = json.loads(make(addr="tcp:127.0.0.1:7000", shares=["ed25519:x"]).start())
    assert obj["addr"] == "tcp:127.0.0.1:7000"
    assert obj["shares"] == ["ed25519:x"]


def test_each_hello_has_a_fresh_nonce():
    ident = Identity.generate()
    n1 = json.loads(make(identity=ident).start())["nonce"]
    n2 = json.loads(make(identity=ident).start())["nonce"]
    assert n1 != n2


def test_exact_received_bytes_are_signed_and_verified():
    # A peer whose hello has unusual spacing and field order: the transcript must use
    # the bytes as received, not a re-serialisation.
    a = make("alice")
    ha = strip(a.start())
    peer = Identity.generate()
    nonce = b64url(bytes(32))
    hp = (
        f'{{ "caps": ["blob"], "nonce": "{nonce}", "key": "{peer.key}", "v": 0, "t": "hello", '
        f'"name": "pé<&>", "id": "{PEER_ID}", "ts": "{TS}", "x-future": {{"a": 1}} }}'
    ).encode()
    auth_a = a.receive(hp)
    sig_a = json.loads(auth_a)["sig"]
    assert verify(a.identity.key, b"awp-auth-v0\x00" + ha + b"\x00" + hp, sig_a)
    sig_p = peer.sign(b"awp-auth-v0\x00" + hp + b"\x00" + ha)
    assert a.receive(auth_line(sig_p)) is None
    assert a.done and a.peer_key == peer.key


def test_padded_standard_peer_key_is_normalized():
    import base64

    a = make()
    ha = strip(a.start())
    peer = Identity.generate()
    std_key = "ed25519:" + base64.b64encode(peer.raw_public).decode()
    hp = peer_hello(peer, key=std_key)
    a.receive(hp)
    assert a.peer_key == peer.key
    a.receive(auth_line(peer.sign(auth_transcript(hp, ha))))
    assert a.done


def test_auth_may_carry_grants():
    a = make()
    ha = strip(a.start())
    peer = Identity.generate()
    hp = peer_hello(peer)
    a.receive(hp)
    g = {"iss": peer.key, "sub": a.identity.key, "caps": ["exec"], "exp": "2030-01-01T00:00:00Z",
         "nonce": "n", "sig": "s"}
    a.receive(auth_line(peer.sign(auth_transcript(hp, ha)), grants=[g, "junk", 3]))
    assert a.done
    assert a.peer_grants == [g]


# --- failures -----------------------------------------------------------------------


def test_unsupported_version_is_version_error_with_re():
    a = make()
    a.start()
    b = make("bob", version=99)
    hb = strip(b.start())
    assert json.loads(hb)["v"] == 99
    e = expect("version", a, hb)
    assert e.re == json.loads(hb)["id"]
    assert e.closes
    assert a.stage == "hello" and a.peer_key == ""


@pytest.mark.parametrize("v", [99, 1, -1, "0", None, True, 0.5, [0]])
def test_other_bad_versions(v):
    a = make()
    a.start()
    e = expect("version", a, peer_hello(Identity.generate(), v=v))
    assert e.re == PEER_ID


def test_reflected_hello_with_our_own_key_is_auth_error():
    ident = Identity.generate()
    a = make(identity=ident)
    mirror = make("evil", identity=ident)
    a.start()
    expect("auth", a, strip(mirror.start()))
    assert not a.done and a.peer_key == ""


def test_reflected_hello_our_key_in_another_encoding_is_auth_error():
    import base64

    a = make()
    a.start()
    padded = "ed25519:" + base64.b64encode(a.identity.raw_public).decode()
    expect("auth", a, peer_hello(a.identity, key=padded))


def test_our_own_hello_echoed_back_is_auth_error():
    a = make()
    ha = strip(a.start())
    expect("auth", a, ha)


@pytest.mark.parametrize(
    "key",
    [
        "ed25519:abc",
        "ed25519:" + b64url(bytes(31)),
        "ed25519:" + "!" * 43,
        "x25519:" + b64url(bytes(32)),
        b64url(bytes(32)),
        "",
        None,
        42,
        ["ed25519:"],
        ...,  # missing altogether
    ],
)
def test_malformed_key_is_auth_error(key):
    a = make()
    a.start()
    expect("auth", a, peer_hello(Identity.generate(), key=key))


@pytest.mark.parametrize("nonce", ["", None, 5, ...])
def test_hello_without_nonce_is_auth_error(nonce):
    a = make()
    a.start()
    expect("auth", a, peer_hello(Identity.generate(), nonce=nonce))


@pytest.mark.parametrize(
    "line",
    [
        b'{"t":"msg","id":"' + PEER_ID.encode() + b'","th":"thr_abcdefgh","parts":[]}',
        b'{"t":"auth","sig":"x"}',
        b'{"t":"ping"}',
        b'{"t":"resume","seen":{}}',
        b'{"t":"conformance-future"}',
    ],
)
def test_non_hello_first_is_bad_frame(line):
    a = make()
    a.start()
    expect("bad_frame", a, line)


def test_garbage_first_is_bad_frame():
    a = make()
    a.start()
    expect("bad_frame", a, b"this is not json")
    expect("bad_frame", a, b"[]")


@pytest.mark.parametrize(
    "line",
    [
        b'{"t":"msg","id":"' + PEER_ID.encode() + b'","th":"thr_abcdefgh","parts":[]}',
        b'{"t":"ping"}',
        b'{"t":"resume","seen":{}}',
        b'{"t":"conformance-future"}',
    ],
)
def test_non_auth_when_auth_expected_is_auth_error(line):
    a, b = make(), make("bob")
    exchange_hellos(a, b)
    expect("auth", a, line)
    assert not a.done


def test_second_hello_when_auth_expected_is_auth_error():
    a, b = make(), make("bob")
    _, hb, _, _ = exchange_hellos(a, b)
    expect("auth", a, strip(hb))


def test_auth_over_swapped_hellos_is_auth_error():
    a, b = make(), make("bob")
    ha, hb, _, _ = exchange_hellos(a, b)
    # valid-looking: b's key, 86 chars, but over a's side of the transcript
    sig = b.identity.sign(auth_transcript(strip(ha), strip(hb)))
    assert len(sig) == 86
    expect("auth", a, auth_line(sig))
    assert not a.done


def test_auth_over_other_hellos_is_auth_error():
    # a signature from an earlier connection (other nonce) cannot be replayed
    a, b = make(), make("bob")
    ha, hb, _, _ = exchange_hellos(a, b)
    old_a = make(identity=a.identity)
    old_ha = strip(old_a.start())
    sig = b.identity.sign(auth_transcript(strip(hb), old_ha))
    expect("auth", a, auth_line(sig))


def test_auth_with_newlines_in_transcript_is_auth_error():
    a, b = make(), make("bob")
    ha, hb, _, _ = exchange_hellos(a, b)
    sig = b.identity.sign(b"awp-auth-v0\x00" + hb + b"\x00" + ha)
    expect("auth", a, auth_line(sig))


def test_auth_signed_by_another_key_is_auth_error():
    a, b = make(), make("bob")
    ha, hb, _, _ = exchange_hellos(a, b)
    sig = Identity.generate().sign(auth_transcript(strip(hb), strip(ha)))
    expect("auth", a, auth_line(sig))


@pytest.mark.parametrize("sig", ["", "garbage", "A" * 86, 5, None, ["x"]])
def test_auth_with_garbage_signature_is_auth_error(sig):
    a, b = make(), make("bob")
    exchange_hellos(a, b)
    expect("auth", a, auth_line(sig))


def test_auth_without_sig_is_auth_error():
    a, b = make(), make("bob")
    exchange_hellos(a, b)
    expect("auth", a, b'{"t":"auth","id":"' + PEER_ID.encode() + b'"}')


def test_peer_err_during_hello_closes_without_reply():
    a = make()
    a.start()
    e = expect("", a, b'{"t":"err","code":"version","detail":"we speak 1"}')
    assert "version" in e.detail
    assert not e.closes  # "" is not a code we would send


def test_peer_err_during_auth_closes_without_reply():
    a, b = make(), make("bob")
    exchange_hellos(a, b)
    expect("", a, b'{"t":"err","code":"auth"}')


def test_peer_err_with_odd_code_still_empty_code():
    a = make()
    a.start()
    expect("", a, b'{"t":"err","code":7}')
    expect("", a, b'{"t":"err"}')


def test_line_after_done_is_bad_frame():
    a, b = make(), make("bob")
    _, _, auth_a, auth_b = exchange_hellos(a, b)
    a.receive(strip(auth_b))
    assert a.done
    expect("bad_frame", a, strip(auth_b))


def test_bad_frame_in_auth_stage_is_bad_frame():
    a, b = make(), make("bob")
    exchange_hellos(a, b)
    expect("bad_frame", a, b"this is not json")


def test_auth_never_exceeds_the_line_limit_whatever_we_are_given_to_present():
    """Grants to present that would make our auth line too long are left out,
    so no stored grant can cost us the handshake."""
    a, b = make("alice"), make("bob")
    big = [{"iss": "x", "pad": "y" * 600_000} for _ in range(2)]
    a.present = lambda key: big
    b.present = lambda key: [{"iss": "small"}]
    _, _, auth_a, auth_b = exchange_hellos(a, b)
    assert len(auth_a) < 1024 and "grants" not in json.loads(auth_a)
    assert json.loads(auth_b)["grants"] == [{"iss": "small"}]


def test_check_peer_refuses_before_any_auth_is_built():
    a, b = make("alice"), make("bob")
    seen = []
    a.check_peer = lambda key: seen.append(key) or f"key mismatch: answered as {key}"
    b.start()
    a.start()
    e = expect("", a, strip(b.start()))  # "": close without sending anything
    assert e.detail.startswith("key mismatch") and seen == [b.identity.key]
    assert a.stage == "hello" and not a.peer_key


def test_auth_extra_goes_into_our_auth_and_the_peer_reads_it():
    a, b = make("alice"), make("bob")
    a.auth_extra = lambda mine, theirs: {"invite": {"id": "x", "mine": len(mine),
                                                    "theirs": len(theirs)}}
    ha, hb, auth_a, _auth_b = exchange_hellos(a, b)
    assert json.loads(auth_a)["invite"] == {"id": "x", "mine": len(strip(ha)),
                                            "theirs": len(strip(hb))}
    b.receive(strip(auth_a))
    assert b.done and b.peer_auth["invite"]["id"] == "x"


def test_addrs_ride_in_the_hello_beside_addr():
    a = make("alice", addr="tcp:10.0.0.1:7", addrs=["tcp:10.0.0.1:7", "ws://h/x"])
    hello = json.loads(a.start())
    assert hello["addr"] == "tcp:10.0.0.1:7" and hello["addrs"] == ["tcp:10.0.0.1:7", "ws://h/x"]
    assert "addrs" not in json.loads(make("bob", addr="tcp:10.0.0.2:7").start())
