"""Identity scenarios: key rotation (cap ``rotate``) and operator revocations (cap ``operator``).

A peer that lists ``rotate`` must follow a valid rotation record from a key
it met to the new key, refuse the old key afterwards, and refuse a forged or
uncommitted record (SPEC.md section 11).  A peer that lists ``operator`` must
keep a valid revocation it was sent, drop a forged one, and pass the valid
one on in its auth to the next peer that lists the cap (SPEC.md section 11,
"Operator keys").
Each scenario uses fresh runner keys, so a peer's memory of earlier runs
never decides the outcome.
"""

from __future__ import annotations

from ..wire import operator as O
from ..wire import rotation as R
from ..wire.canonical import canonical_json
from ..wire.keys import Identity, auth_transcript
from ..wire.timefmt import now_ms
from .conn import Fail, Skip, describe
from .session import Ctx, Scenario, _err_code, _is, _ping, handshake

QUIET_S = 1.0  # how long a peer is watched for an err after a line it must take silently


def _needs(ctx: Ctx, cap: str) -> None:
    s = handshake(ctx, ctx.fresh(), strict=False)
    if cap not in s.caps:
        raise Skip(f"the peer does not list cap {cap}")
    s.conn.close()


def _admitted(ctx: Ctx, me: Identity, auth_extra: dict, what: str) -> None:
    s = handshake(ctx, ctx.dial(), strict=False, identity=me, caps=[R.CAP],
                  auth_extra=auth_extra)
    if s.resume is None:
        raise Fail(f"expected a resume after {what}")
    s.conn.close()


def _refused(ctx: Ctx, me: Identity, auth_extra: dict | None, what: str) -> str:
    """Hello (and, unless refused at hello, our auth with ``auth_extra``): expect err auth."""
    conn = ctx.dial()
    hello = ctx.hello_line(identity=me)
    hello["caps"] = [*hello["caps"], R.CAP]
    _, my_raw = conn.send(hello, ctx.deadline)
    first = conn.expect(lambda x: x.get("t") in ("hello", "err"), ctx.deadline,
                        "the peer's hello")
    if first.get("t") == "hello":
        peer_raw = conn.raw_of(first)
        line = conn.expect(lambda x: x.get("t") in ("auth", "err"), ctx.deadline,
                           "the peer's auth or err")
        if line.get("t") == "auth":
            conn.send({"t": "auth", "sig": me.sign(auth_transcript(my_raw, peer_raw)),
                       **(auth_extra or {})}, ctx.deadline)
            line = conn.expect(
                _is("err"), ctx.deadline, f"err auth for {what}",
                reject=lambda x: x.get("t") != "err",
                explain=lambda x: f"the peer accepted {what}: it sent {x.get('t')}, not err auth")
    else:
        line = first
    if _err_code(line) != "auth":
        raise Fail(f"expected err auth for {what}, got {describe(line)}")
    conn.expect_close(ctx.deadline, "the peer to close after err auth")
    detail = line.get("detail")
    return detail if isinstance(detail, str) else ""


def s_rotate(ctx: Ctx) -> str:
    """Meet key A (committing to B), move to B with a record, then knock as A again."""
    _needs(ctx, R.CAP)
    a, b, c = Identity.generate(), Identity.generate(), Identity.generate()
    _admitted(ctx, a, {"rotation": {"next": R.commitment(b.key)}}, "a plain first meeting")
    rec = R.make(a, b, 1, c.key, now_ms())
    _admitted(ctx, b, {"rotation": {"chain": [rec], "next": R.commitment(c.key)}},
              "a valid rotation record from a key it met")
    detail = _refused(ctx, a, None, "the key that rotated away")
    if "rotat" not in detail:
        raise Fail(f"the old key was refused, but the err does not say it rotated: {detail!r}")
    return f"old key refused: {detail}"


def s_rotate_forged(ctx: Ctx) -> str:
    """A record whose old-key signature is another key's, and one to an uncommitted key."""
    _needs(ctx, R.CAP)
    a, b, c, mallory = (Identity.generate() for _ in range(4))
    _admitted(ctx, a, {"rotation": {"next": R.commitment(b.key)}}, "a plain first meeting")
    forged = R.make(mallory, b, 1, c.key, now_ms())
    forged["old"] = a.key  # claims to move a, signed by mallory
    forged["sig_new"] = b.sign(R.signed_bytes(forged))
    why = _refused(ctx, b, {"rotation": {"chain": [forged]}}, "a forged rotation record")
    uncommitted = R.make(a, mallory, 1, c.key, now_ms())  # a signed it, but committed to b
    why2 = _refused(ctx, mallory, {"rotation": {"chain": [uncommitted]}},
                    "a rotation to a key the old one did not commit to")
    return f"forged: {why}; uncommitted: {why2}"


def s_op_revoke(ctx: Ctx) -> str:
    """Send a valid and a forged revocation; the next peer's auth must carry only the first."""
    _needs(ctx, O.CAP)
    op, device, other = Identity.generate(), Identity.generate(), Identity.generate()
    good = O.make_revocation(op, device.key, now_ms())
    forged = O.make_revocation(other, device.key, now_ms())
    forged["op"] = op.key  # claims op's word, signed by another key
    s = handshake(ctx, ctx.dial(), strict=False, identity=Identity.generate(), caps=[O.CAP])
    for rec in (forged, good):
        s.conn.send({"t": "op-revoke", "rec": rec}, ctx.deadline)
    for line in s.conn.quiet_for(QUIET_S, ctx.deadline):
        if line.get("t") == "err" or "_invalid" in line:
            raise Fail(f"expected no err within {QUIET_S:g}s of op-revoke lines,"
                       f" got {describe(line)}")
    _ping(ctx, s.conn)
    s.conn.close()
    second = handshake(ctx, ctx.dial(), strict=False, identity=Identity.generate(),
                       caps=[O.CAP])
    field = (second.auth or {}).get("operator")
    held = field.get("revoked") if isinstance(field, dict) else None
    if not isinstance(held, list):
        raise Fail("the next peer's auth has no operator.revoked list: the revocation was not"
                   " kept or not passed on")
    texts = {canonical_json(r) for r in held if isinstance(r, dict)}
    if canonical_json(good) not in texts:
        raise Fail(f"operator.revoked ({len(held)} records) lacks the valid revocation sent")
    if canonical_json(forged) in texts:
        raise Fail("operator.revoked carries the forged revocation: it was not checked")
    second.conn.close()
    return f"passed on in auth ({len(held)} held)"


IDENTITY_SCENARIOS: list[Scenario] = [
    Scenario("rotate", "a valid rotation record moves the runner's key; the old key then gets"
             " err auth saying it rotated (cap rotate)", s_rotate, own_connection=True),
    Scenario("rotate-forged", "a forged record and one to an uncommitted key get err auth"
             " (cap rotate)", s_rotate_forged, own_connection=True),
    Scenario("op-revoke", "a valid op-revoke line is kept and passed on in the next auth,"
             " a forged one is not (cap operator)", s_op_revoke, own_connection=True),
]
