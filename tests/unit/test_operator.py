"""Operator certificates and revocations (awp/wire/operator.py), with fixed seeds.

The vectors here are the ones SPEC.md prints (section 11, "Operator keys"): a change to the
signed bytes breaks them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from awp.node.operators import Operators
from awp.wire import operator as O
from awp.wire.canonical import canonical_json
from awp.wire.keys import Identity
from awp.wire.timefmt import parse_ts

OP = Identity(bytes(range(32)))
DEV = Identity(bytes(range(32, 64)))
T0 = parse_ts("2026-12-01T00:00:00.000Z")
DAY = 86400 * 1000


def test_certificate_vector() -> None:
    cert = O.make_cert(OP, DEV.key, T0, T0 + 90 * DAY, "builder")
    assert canonical_json(cert) == VECTOR_CERT
    c = O.check_cert(cert)
    assert (c.op, c.device, c.name) == (OP.key, DEV.key, "builder")
    assert c.live(T0) and c.live(T0 + 90 * DAY - 1) and not c.live(T0 + 90 * DAY)
    assert not c.live(T0 - 1)


def test_revocation_vector() -> None:
    rev = O.make_revocation(OP, DEV.key, T0 + DAY)
    assert canonical_json(rev) == VECTOR_REVOKE
    r = O.check_revocation(rev)
    assert (r.op, r.device, r.ts_ms) == (OP.key, DEV.key, T0 + DAY)


def test_a_certificate_cannot_pass_as_a_revocation_or_be_altered() -> None:
    cert = O.make_cert(OP, DEV.key, T0, T0 + DAY)
    as_rev = {"op": cert["op"], "device": cert["device"], "ts": cert["nbf"], "sig": cert["sig"]}
    with pytest.raises(O.OperatorError) as e:
        O.check_revocation(as_rev)
    assert e.value.kind == "forged"
    for field, value in (("exp", "2027-12-01T00:00:00.000Z"), ("device", OP.key),
                         ("name", "x")):
        bad = dict(cert, **{field: value})
        with pytest.raises(O.OperatorError):
            O.check_cert(bad)


@pytest.mark.parametrize("change, why", [
    (lambda c: c.update(nbf=c["exp"]), "exp is not after nbf"),
    (lambda c: c.update(exp="2030-01-01T00:00:00.000Z"), "at most 400 days"),
    (lambda c: c.update(name="x" * 65), "name must be"),
    (lambda c: c.update(name="a\nb"), "name must be"),
    (lambda c: c.update(op="ed25519:short"), "op:"),
    (lambda c: c.update(pad="x" * 2000), "over 1024 bytes"),
    (lambda c: c.update(nbf=5), "nbf is not an RFC 3339 time"),
])
def test_malformed_certificates_say_why(change, why) -> None:
    cert = O.make_cert(OP, DEV.key, T0, T0 + DAY)
    change(cert)
    with pytest.raises(O.OperatorError) as e:
        O.check_cert(cert)
    assert why in e.value.detail
    assert e.value.kind == "bad"


def test_an_operator_cannot_certify_itself() -> None:
    with pytest.raises(O.OperatorError):
        O.check_cert(O.make_cert(OP, OP.key, T0, T0 + DAY))


def _ops() -> Operators:
    engine = SimpleNamespace(config=SimpleNamespace(accept="operator"),
                             identity=DEV)
    return Operators(engine)  # type: ignore[arg-type]


def test_the_verdict_follows_trust_time_and_revocation() -> None:
    o = _ops()
    cert = O.check_cert(O.make_cert(OP, DEV.key, T0, T0 + DAY))
    assert "no operator certificate" in o.verdict(DEV.key, T0)
    o.certs[DEV.key] = cert
    assert "not trusted here" in o.verdict(DEV.key, T0)
    o.trusted[OP.key] = "team"
    assert o.verdict(DEV.key, T0) == ""
    assert "expired" in o.verdict(DEV.key, T0 + DAY)
    assert "not valid yet" in o.verdict(DEV.key, T0 - 1)
    # A revocation before the certificate's start does not cancel it; one at or after does.
    o.revoked[(OP.key, DEV.key)] = T0 - 1
    assert o.verdict(DEV.key, T0) == ""
    o.revoked[(OP.key, DEV.key)] = T0
    assert "revoked it" in o.verdict(DEV.key, T0)


def test_the_auth_field_goes_only_to_peers_with_the_cap() -> None:
    o = _ops()
    o.cert = O.check_cert(O.make_cert(OP, DEV.key, T0, T0 + DAY))
    assert o.auth_field({"caps": ["chat", "rotate"]}) is None
    assert o.auth_field({"caps": "operator"}) is None
    assert o.auth_field({"caps": ["operator"]}) == {"cert": o.cert.raw}


VECTOR_CERT = (
    '{"device":"ed25519:Kay64UG8yvCyLhqU000LxzYeUm0L_hLIl5S8kyKWbdc",'
    '"exp":"2027-03-01T00:00:00.000Z","name":"builder","nbf":"2026-12-01T00:00:00.000Z",'
    '"op":"ed25519:A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg",'
    '"sig":"cwpWf8edq0WeOsXF26LZOoyAoBpfRpooQC2hWH1W7_ID_NzyNraHFHx382iErpQ5kTQA5Tcp6tujCiPgQJq6Ag"}')
VECTOR_REVOKE = (
    '{"device":"ed25519:Kay64UG8yvCyLhqU000LxzYeUm0L_hLIl5S8kyKWbdc",'
    '"op":"ed25519:A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg",'
    '"sig":"SoBdyMDrySQNKv6-jxRzMT9dSg6DxhcWD-UBmv0jo2iF_mTUJyxivz0CshdS8VuDMNV_N0FlLNmOJnFj55quDg",'
    '"ts":"2026-12-02T00:00:00.000Z"}')


def _store():
    import os
    import tempfile

    from awp.store.db import open_store
    return open_store(os.path.join(tempfile.mkdtemp(prefix="awpop"), "awp.db"))


def test_revocations_of_untrusted_operators_are_bounded_and_trusted_ones_always_kept() -> None:
    from awp.store import operators as S

    c = _store()
    strangers = [Identity(bytes([i]) * 32) for i in range(1, 6)]
    verdicts = [S.take_revocation(c, O.check_revocation(O.make_revocation(s, DEV.key, T0)),
                                  T0, 3) for s in strangers]
    assert verdicts == [S.NEW, S.NEW, S.NEW, S.FULL, S.FULL]
    S.trust(c, OP.key, "team", T0)
    rev = O.check_revocation(O.make_revocation(OP, DEV.key, T0))
    assert S.take_revocation(c, rev, T0, 3) == S.NEW  # over the bound, but trusted
    assert S.take_revocation(c, rev, T0, 3) == S.HELD
    older = O.check_revocation(O.make_revocation(OP, DEV.key, T0 - 1))
    assert S.take_revocation(c, older, T0, 3) == S.HELD
    newer = O.check_revocation(O.make_revocation(OP, DEV.key, T0 + 1))
    assert S.take_revocation(c, newer, T0, 3) == S.NEW
    assert S.revoked(c)[(OP.key, DEV.key)] == T0 + 1
    assert S.revocations(c, 1) == [newer.text]  # the trusted operator's first
