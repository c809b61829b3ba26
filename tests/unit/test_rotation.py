"""Rotation records (awp/wire/rotation.py): SPEC.md's test vectors and every refusal rule."""

from __future__ import annotations

import hashlib

import pytest
from nacl.signing import SigningKey

from awp.wire import rotation as R
from awp.wire.b64 import b64url
from awp.wire.keys import Identity

K1 = Identity(bytes(range(32)))
K2 = Identity(bytes(range(32, 64)))
K3 = Identity(bytes(range(64, 96)))
TS = 1796212800000  # 2026-12-02T12:00:00.000Z

VECTOR = {
    "k1": "ed25519:A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg",
    "k2": "ed25519:Kay64UG8yvCyLhqU000LxzYeUm0L_hLIl5S8kyKWbdc",
    "k3": "ed25519:JUO5L_EJVRFHatyDadtt3JM2ZaEZeN2hQE7hBmypVZ0",
    "signed": 'awp-rotate-v1\x00{"new":"ed25519:Kay64UG8yvCyLhqU000LxzYeUm0L_hLIl5S8kyKWbdc",'
              '"next":"g341URG4smurTMDtDU0c2RwjfasKRMoJOP7Xz3-kUrE",'
              '"old":"ed25519:A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg",'
              '"seq":1,"ts":"2026-12-02T12:00:00.000Z"}',
    "next": "g341URG4smurTMDtDU0c2RwjfasKRMoJOP7Xz3-kUrE",
    "sig_old": "tujk_qCKRPn9DBLCox6R6sYaIFdDWpBq1ZIDeJrmiFc5o0U9X24K-7jgTrXRcHbC7S7x4RM6UGKGhkTmNv3YAQ",
    "sig_new": "uz6JDm_cWD0VOcy0zCKs0noHXWXpuCH3o9qtOTWwtBWlw8fpa1ORRi10cJ3W1MqLLOthMxShJ9e9hN_r9gP5CQ",
    "id": "50f4370f07f45069c4bf55ea6190c311",
    "safety": "89943 32099 34744 09511 93297 86271 17515 16779 79412 27252 35340 76330",
}


def test_vectors_match_spec() -> None:
    rec = R.make(K1, K2, 1, K3.key, TS)
    assert (K1.key, K2.key, K3.key) == (VECTOR["k1"], VECTOR["k2"], VECTOR["k3"])
    assert R.signed_bytes(rec) == VECTOR["signed"].encode()
    assert rec["next"] == VECTOR["next"]
    assert rec["sig_old"] == VECTOR["sig_old"] and rec["sig_new"] == VECTOR["sig_new"]
    assert R.record_id(rec) == VECTOR["id"]
    assert R.safety_number(K1.key, K2.key) == VECTOR["safety"]


def test_vectors_rebuilt_from_the_words() -> None:
    """The SPEC's description, rebuilt with hashlib and PyNaCl directly (not our helpers)."""
    raw3 = bytes(SigningKey(bytes(range(64, 96))).verify_key)
    nxt = b64url(hashlib.sha256(b"awp-rotate-next-v1\x00" + raw3).digest())
    assert nxt == VECTOR["next"]
    msg = VECTOR["signed"].encode()
    assert b64url(SigningKey(bytes(range(32))).sign(msg).signature) == VECTOR["sig_old"]
    assert b64url(SigningKey(bytes(range(32, 64))).sign(msg).signature) == VECTOR["sig_new"]
    raws = sorted(bytes(SigningKey(bytes(range(a, a + 32))).verify_key) for a in (0, 32))
    d = hashlib.sha512(b"awp-safety-v1\x00" + raws[0] + raws[1]).digest()
    assert " ".join(f"{int.from_bytes(d[i:i + 5], 'big') % 100000:05d}"
                    for i in range(0, 60, 5)) == VECTOR["safety"]


def test_safety_number_is_symmetric_and_short_form() -> None:
    assert R.safety_number(K2.key, K1.key) == R.safety_number(K1.key, K2.key)
    assert R.safety_short(VECTOR["safety"]) == "89943 32099 34744 09511"
    assert R.safety_number(K1.key, K3.key) != R.safety_number(K1.key, K2.key)


def test_check_accepts_and_keeps_the_record_verbatim() -> None:
    rec = R.make(K1, K2, 1, K3.key, TS)
    rec["future"] = "kept"  # unknown fields are signed too: re-sign with them
    data = R.signed_bytes(rec)
    rec["sig_old"], rec["sig_new"] = K1.sign(data), K2.sign(data)
    rot = R.check(rec)
    assert (rot.old, rot.new, rot.seq, rot.ts_ms) == (K1.key, K2.key, 1, TS)
    assert rot.raw["future"] == "kept"


@pytest.mark.parametrize("field", ["sig_old", "sig_new"])
def test_forged_signature_refused(field: str) -> None:
    rec = R.make(K1, K2, 1, K3.key, TS)
    rec[field] = K3.sign(R.signed_bytes(rec))  # a third key's signature
    with pytest.raises(R.RotationError) as e:
        R.check(rec)
    assert e.value.kind == "forged"


def test_changed_field_after_signing_is_forged() -> None:
    rec = R.make(K1, K2, 1, K3.key, TS)
    rec["seq"] = 2
    with pytest.raises(R.RotationError) as e:
        R.check(rec)
    assert e.value.kind == "forged"


@pytest.mark.parametrize("bad", [
    {"seq": 0}, {"seq": True}, {"seq": "1"}, {"next": "short"}, {"ts": "yesterday"},
    {"old": "ed25519:nope"}, {"new": None}, {"pad": "x" * 3000},
])
def test_bad_shapes_refused(bad: dict) -> None:
    rec = R.make(K1, K2, 1, K3.key, TS)
    rec.update(bad)
    with pytest.raises(R.RotationError) as e:
        R.check(rec)
    assert e.value.kind == "bad"


def test_rotating_to_itself_refused() -> None:
    rec = R.make(K1, K1, 1, K3.key, TS)
    with pytest.raises(R.RotationError) as e:
        R.check(rec)
    assert e.value.kind == "bad"


def _chain() -> tuple[R.Rotation, R.Rotation]:
    first = R.check(R.make(K1, K2, 1, K3.key, TS))
    second = R.check(R.make(K2, K3, 2, Identity(bytes(range(96, 128))).key, TS + 1))
    return first, second


def test_judge_new_duplicate_and_conflict() -> None:
    first, second = _chain()
    assert R.judge(first, R.Known()) == R.NEW
    assert R.judge(second, R.Known(before=first)) == R.NEW
    assert R.judge(first, R.Known(same_old=first)) == R.DUPLICATE
    other = R.check(R.make(K1, K3, 1, K2.key, TS))  # K1 rotated a second time, elsewhere
    with pytest.raises(R.RotationError) as e:
        R.judge(other, R.Known(same_old=first))
    assert e.value.kind == "conflict"


def test_replayed_older_seq_and_gap_refused() -> None:
    first, _ = _chain()
    older = R.check(R.make(K2, K3, 1, K1.key, TS))  # seq not after the record it follows
    with pytest.raises(R.RotationError) as e:
        R.judge(older, R.Known(before=first))
    assert e.value.kind == "old_seq"
    jump = R.check(R.make(K2, K3, 5, K1.key, TS))
    with pytest.raises(R.RotationError) as e:
        R.judge(jump, R.Known(before=first))
    assert e.value.kind == "gap"


def test_uncommitted_new_key_refused() -> None:
    """A thief holding only K2 makes its own key: not the one K2's record committed to."""
    first, _ = _chain()
    thief = Identity(bytes(range(200, 232)))
    stolen = R.check(R.make(K2, thief, 2, K1.key, TS))
    with pytest.raises(R.RotationError) as e:
        R.judge(stolen, R.Known(before=first))
    assert e.value.kind == "uncommitted"
    # The first rotation checks the commitment announced in an auth line.
    fresh = R.check(R.make(K1, thief, 1, K2.key, TS))
    with pytest.raises(R.RotationError) as e:
        R.judge(fresh, R.Known(committed=R.commitment(K2.key)))
    assert e.value.kind == "uncommitted"
    assert R.judge(R.check(R.make(K1, K2, 1, K3.key, TS)),
                   R.Known(committed=R.commitment(K2.key))) == R.NEW


def test_rotating_to_a_retired_key_refused() -> None:
    back = R.check(R.make(K2, K1, 2, K3.key, TS))
    with pytest.raises(R.RotationError) as e:
        R.judge(back, R.Known(retired=True))
    assert e.value.kind == "retired"
