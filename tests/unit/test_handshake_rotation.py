"""The handshake and rotation: a dialer answered by the successor of the key it dialed."""

from __future__ import annotations

import pytest

from awp.node.dialer import key_check
from awp.node.handshake import Handshake, LocalHello
from awp.wire import rotation as R
from awp.wire.errors import ProtocolError
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity

K1, K2, K3 = (Identity(bytes([i]) * 32) for i in (1, 2, 3))


def _pair(listener_chain: list[dict]) -> tuple[Handshake, Handshake]:
    dialer = Handshake(Identity.generate(), LocalHello("d", ["chat", R.CAP]), IdGenerator(),
                       outbound=True, seal="off")
    dialer.check_peer, dialer.expect = key_check("tcp:x", K1.key), K1.key
    listener = Handshake(K2, LocalHello("l", ["chat", R.CAP]), IdGenerator(), seal="off")
    listener.rotation = lambda hello: {"chain": listener_chain} if listener_chain else None
    return dialer, listener


def _run(dialer: Handshake, listener: Handshake) -> None:
    hd, hl = dialer.start(), listener.start()
    assert dialer.receive(hl[:-1]) is None  # another key: our auth is held
    auth_l = listener.receive(hd[:-1])
    auth_d = dialer.receive(auth_l[:-1])  # its records lead from K1: now ours
    assert auth_d is not None and dialer.done
    assert listener.receive(auth_d[:-1]) is None and listener.done


def test_dialer_follows_a_rotation_it_can_check() -> None:
    dialer, listener = _pair([R.make(K1, K2, 1, K3.key, 1796212800000)])
    _run(dialer, listener)
    assert dialer.peer_key == K2.key


@pytest.mark.parametrize("chain", [
    [],  # no records: an ordinary key mismatch
    [R.make(K3, K2, 1, K1.key, 1796212800000)],  # records from another key
])
def test_dialer_refuses_without_records_from_the_dialed_key(chain: list[dict]) -> None:
    dialer, listener = _pair(chain)
    hd, hl = dialer.start(), listener.start()
    assert dialer.receive(hl[:-1]) is None
    auth_l = listener.receive(hd[:-1])
    with pytest.raises(ProtocolError) as e:
        dialer.receive(auth_l[:-1])
    assert e.value.code == "" and "key mismatch" in e.value.detail


def test_forged_record_refused_and_no_auth_sent() -> None:
    rec = R.make(K1, K2, 1, K3.key, 1796212800000)
    rec["sig_old"] = K3.sign(R.signed_bytes(rec))
    dialer, listener = _pair([rec])
    hd, hl = dialer.start(), listener.start()
    dialer.receive(hl[:-1])
    with pytest.raises(ProtocolError) as e:
        dialer.receive(listener.receive(hd[:-1])[:-1])
    assert "sig_old does not verify" in e.value.detail


def test_without_the_cap_a_mismatch_ends_at_once() -> None:
    dialer, _ = _pair([])
    other = Handshake(K2, LocalHello("l", ["chat"]), IdGenerator(), seal="off")
    dialer.start()
    with pytest.raises(ProtocolError) as e:
        dialer.receive(other.start()[:-1])
    assert "key mismatch" in e.value.detail


def test_retired_key_refused_at_hello() -> None:
    hs = Handshake(Identity.generate(), LocalHello("x", ["chat"]), IdGenerator(), seal="off")
    hs.refuse_key = lambda key: f"{key} rotated to {K2.key}" if key == K1.key else ""
    hs.start()
    old = Handshake(K1, LocalHello("o", ["chat"]), IdGenerator(), seal="off")
    with pytest.raises(ProtocolError) as e:
        hs.receive(old.start()[:-1])
    assert e.value.code == "auth" and f"rotated to {K2.key}" in e.value.detail


def test_a_long_chain_is_refused_before_any_signature_check() -> None:
    rec = R.make(K1, K2, 1, K3.key, 1796212800000)
    dialer, listener = _pair([rec] * 9)
    hd, hl = dialer.start(), listener.start()
    dialer.receive(hl[:-1])
    with pytest.raises(ProtocolError) as e:
        dialer.receive(listener.receive(hd[:-1])[:-1])
    assert "over 8 records" in e.value.detail
