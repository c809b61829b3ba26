"""Operator keys: one key, kept away from every device, that vouches for devices.

An operator (a person or a team) holds an Ed25519 key outside any awp home.
It signs a **device certificate** ``{op, device, nbf, exp, name?}`` for each
daemon key it vouches for, and a **revocation** ``{op, device, ts}`` when a
device must stop counting before its certificate expires.  A host that
trusts the operator admits the devices it certified without a per-device
step (``accept: operator``), and refuses a device whose certificate expired
or was revoked.  Matrix's cross-signing is the model: peers verify the
operator once, not every device.

Each statement is signed over a context string, a zero byte and the
canonical JSON of the statement without ``sig``, so a certificate can never
pass as a revocation, a rotation record or a grant.

This module is pure: it builds, signs and checks statements, so every rule
is unit-tested with fixed seeds (SPEC.md section 11, "Operator keys", has the vectors).
What a host does with them is awp/node/operators.py's and the store's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .canonical import canonical_bytes, canonical_json
from .keys import Identity, KeyError_, normalize_key, verify
from .timefmt import format_ts, parse_ts

CAP = "operator"  # hello.caps: we read ``auth.operator`` and ``op-revoke`` lines
CERT_CONTEXT = b"awp-opcert-v1"
REVOKE_CONTEXT = b"awp-oprevoke-v1"
MAX_STATEMENT_BYTES = 1024  # one statement's canonical JSON (ours are about 300 bytes)
MAX_NAME = 64  # a certificate's device name
MAX_TTL_S = 400 * 86400  # the longest certificate we sign or take: 400 days
MAX_REVOCATIONS = 32  # revocations one auth line carries (the newest)


class OperatorError(ValueError):
    """A statement refused; ``kind`` names the rule (``bad``, ``forged``)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _signed(context: bytes, st: dict) -> bytes:
    return context + b"\x00" + canonical_bytes({k: v for k, v in st.items() if k != "sig"})


def make_cert(op: Identity, device: str, nbf_ms: int, exp_ms: int, name: str = "") -> dict:
    """A certificate by ``op`` for ``device``, valid from ``nbf_ms`` to ``exp_ms``."""
    cert: dict = {"op": op.key, "device": normalize_key(device), "nbf": format_ts(nbf_ms),
                  "exp": format_ts(exp_ms)}
    if name:
        cert["name"] = name
    cert["sig"] = op.sign(_signed(CERT_CONTEXT, cert))
    return cert


def make_revocation(op: Identity, device: str, ts_ms: int) -> dict:
    """A revocation by ``op`` of every certificate it gave ``device``."""
    rev: dict = {"op": op.key, "device": normalize_key(device), "ts": format_ts(ts_ms)}
    rev["sig"] = op.sign(_signed(REVOKE_CONTEXT, rev))
    return rev


@dataclass(frozen=True)
class Cert:
    """A certificate whose shape and signature checked out (not yet its time)."""

    op: str
    device: str
    nbf_ms: int
    exp_ms: int
    name: str
    raw: dict

    def live(self, now_ms: int) -> bool:
        return self.nbf_ms <= now_ms < self.exp_ms

    @property
    def text(self) -> str:
        return canonical_json(self.raw)


@dataclass(frozen=True)
class Revocation:
    """A revocation whose shape and signature checked out."""

    op: str
    device: str
    ts_ms: int
    raw: dict

    @property
    def text(self) -> str:
        return canonical_json(self.raw)


def _keys(st: dict, *fields: str) -> list[str]:
    out = []
    for f in fields:
        try:
            key = normalize_key(st.get(f))  # type: ignore[arg-type]
        except KeyError_ as e:
            raise OperatorError("bad", f"{f}: {e}") from None
        if key != st[f]:
            raise OperatorError("bad", f"{f} is not in canonical form")
        out.append(key)
    if len(set(out)) != len(out):
        raise OperatorError("bad", "an operator cannot vouch for or revoke its own key")
    return out


def _time(st: dict, f: str) -> int:
    try:
        return parse_ts(st.get(f))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise OperatorError("bad", f"{f} is not an RFC 3339 time") from None


def _shape(st: object, what: str) -> dict:
    if not isinstance(st, dict):
        raise OperatorError("bad", f"a {what} is a JSON object")
    try:
        size = len(canonical_bytes(st))
    except (TypeError, ValueError) as e:
        raise OperatorError("bad", f"not canonical JSON: {e}") from None
    if size > MAX_STATEMENT_BYTES:
        raise OperatorError("bad", f"{what} over {MAX_STATEMENT_BYTES} bytes")
    return st


def _verify(context: bytes, st: dict, op: str, what: str) -> None:
    sig = st.get("sig")
    if not isinstance(sig, str) or not verify(op, _signed(context, st), sig):
        raise OperatorError("forged", f"{what} signature does not verify")


def check_cert(st: object) -> Cert:
    """Shape and signature of a certificate; raises :class:`OperatorError`."""
    cert = _shape(st, "certificate")
    op, device = _keys(cert, "op", "device")
    nbf, exp = _time(cert, "nbf"), _time(cert, "exp")
    if exp <= nbf:
        raise OperatorError("bad", "exp is not after nbf")
    if exp - nbf > MAX_TTL_S * 1000:
        raise OperatorError("bad", f"a certificate lasts at most {MAX_TTL_S // 86400} days")
    name = cert.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME or any(ord(ch) < 32 for ch in name):
        raise OperatorError("bad", f"name must be text of at most {MAX_NAME} characters")
    _verify(CERT_CONTEXT, cert, op, "certificate")
    return Cert(op, device, nbf, exp, name, cert)


def check_revocation(st: object) -> Revocation:
    """Shape and signature of a revocation; raises :class:`OperatorError`."""
    rev = _shape(st, "revocation")
    op, device = _keys(rev, "op", "device")
    ts = _time(rev, "ts")
    _verify(REVOKE_CONTEXT, rev, op, "revocation")
    return Revocation(op, device, ts, rev)
