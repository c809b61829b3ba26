"""The conformance scenarios: the fifteen of wire-facts section 12, and ours.

The board's (SPEC.md section 14) live in :mod:`.board_scenarios` and the
WebSocket binding's in :mod:`.ws_scenarios`; both run before ``bye``.  The
context and the handshake are in :mod:`.session`.

Each scenario is a function of a :class:`Ctx`; it returns a detail string on
success and raises :class:`~awp.conform.conn.Fail` (or ``Skip``) otherwise.
Every wait is bounded by ``ctx.deadline``, the scenario's own deadline.

In connect mode every scenario opens its own connection.  In listen mode the
peer dials in once; scenarios marked ``own_connection`` (those that end the
connection on purpose during or right after the handshake) are skipped, and
the rest share the inbound connection, ``bye`` last.
"""

from __future__ import annotations

import base64
import os
import time

from ..wire.b64 import b64url
from ..wire.canonical import canonical_bytes, compact_json
from ..wire.keys import Identity, auth_transcript
from ..wire.timefmt import format_ts_seconds, now_ms
from .board_scenarios import BOARD_SCENARIOS
from .bulk_scenarios import BULK_SCENARIOS
from .conn import Fail, Skip, describe, random_thread
from .identity_scenarios import IDENTITY_SCENARIOS
from .owner_scenarios import OWNER_SCENARIOS
from .session import (  # noqa: F401 - Ctx, Session, handshake are this module's API too
    PROTOCOL_VERSION,
    RUNNER_CAPS,
    Ctx,
    Scenario,
    Session,
    _err_code,
    _expect_ack,
    _is,
    _ping,
    handshake,
    msg_of_size,
)
from .ws_scenarios import WS_SCENARIOS

# -- scenarios --------------------------------------------------------------------------

def s_handshake(ctx: Ctx) -> str:
    s = handshake(ctx, ctx.fresh(), strict=True)
    if ctx.listen_mode:
        ctx.shared = s
    if s.faults:
        raise Fail("; ".join(s.faults))
    name = s.hello.get("name")
    return f"peer {name!r} {s.key}, caps {','.join(s.caps) or '-'}"


def s_version(ctx: Ctx) -> str:
    conn = ctx.fresh()
    mine = ctx.hello_line(version=99)
    conn.send(mine, ctx.deadline)
    err = conn.expect(
        _is("err"), ctx.deadline, "err version for a v 99 hello",
        reject=lambda x: x.get("t") not in ("hello", "err"),
        explain=lambda x: "the peer accepted a v 99 hello: it sent auth, not err version"
        if x.get("t") == "auth" else "")
    if _err_code(err) != "version":
        raise Fail(f"expected err version for a v 99 hello, got {describe(err)}")
    conn.expect_close(ctx.deadline, "the peer to close after err version")
    if err.get("re") != mine["id"]:
        return f"note: err version has re {err.get('re')!r}, expected our hello's id"
    return ""


def s_auth_bad_sig(ctx: Ctx) -> str:
    conn = ctx.fresh()
    _, my_raw = conn.send(ctx.hello_line(), ctx.deadline)
    peer = conn.expect(_is("hello"), ctx.deadline, "the peer's hello")
    peer_raw = conn.raw_of(peer)
    # A real signature by our key, over the transcript in the wrong order.
    wrong = ctx.identity.sign(auth_transcript(peer_raw, my_raw))
    conn.send({"t": "auth", "sig": wrong}, ctx.deadline)
    err = conn.expect(
        _is("err"), ctx.deadline, "err auth for a signature over the wrong transcript",
        reject=lambda x: x.get("t") not in ("auth", "err"),
        explain=lambda x: "the peer accepted an auth signed over the wrong transcript:"
        f" it sent {x.get('t')}, not err auth" if x.get("t") in ("resume", "ping", "msg") else "")
    if _err_code(err) != "auth":
        raise Fail(f"expected err auth, got {describe(err)}")
    conn.expect_close(ctx.deadline, "the peer to close after err auth")
    return ""


def s_bad_frame(ctx: Ctx) -> str:
    s = ctx.session()
    s.conn.send_raw(b"this is not json\n", ctx.deadline)
    err = s.conn.expect(_is("err"), ctx.deadline, "err bad_frame for a line that is not JSON",
                        reject=lambda x: "_invalid" in x)
    if _err_code(err) != "bad_frame":
        raise Fail(f"expected err bad_frame, got {describe(err)}")
    s.conn.expect_close(ctx.deadline, "the peer to close after err bad_frame")
    return ""


def s_too_large(ctx: Ctx) -> str:
    s = ctx.session()
    size = 1_048_576 + 4096
    _, raw = msg_of_size(s.conn, size)
    s.conn.send_raw(raw + b"\n", ctx.deadline, tolerate_close=True)
    err = s.conn.expect(_is("err"), ctx.deadline, f"err too_large for a {size}-byte msg line",
                        reject=lambda x: "_invalid" in x or x.get("t") == "ack")
    if _err_code(err) != "too_large":
        raise Fail(f"expected err too_large, got {describe(err)}")
    s.conn.expect_close(ctx.deadline, "the peer to close after err too_large")
    return ""


def s_ping(ctx: Ctx) -> str:
    s = ctx.session()
    _ping(ctx, s.conn)
    return ""


def s_msg_ack(ctx: Ctx) -> str:
    s = ctx.session()
    sent, _ = s.conn.send({
        "t": "msg", "th": random_thread(), "subject": "conformance: msg-ack",
        "parts": [
            {"k": "text", "text": "conformance check: a msg with text, code and data parts"},
            {"k": "code", "lang": "python", "text": "print('hello <awp> & friends')\n"},
            {"k": "data", "mime": "application/json", "data": {"n": 1, "ok": True, "list": [1]}},
        ],
    }, ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "msg")
    return ""


def s_state_ack(ctx: Ctx) -> str:
    s = ctx.session()
    sent, _ = s.conn.send({"t": "state", "th": random_thread(), "state": "working",
                           "note": "conformance: state-ack"}, ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "state")
    return ""


def s_dedup(ctx: Ctx) -> str:
    s = ctx.session()
    sent, raw = s.conn.send({"t": "msg", "th": random_thread(),
                             "parts": [{"k": "text", "text": "conformance: sent twice"}]},
                            ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "msg")
    s.conn.send_raw(raw + b"\n", ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "same msg sent again")
    return ""


def s_unknown_type(ctx: Ctx) -> str:
    s = ctx.session()
    s.conn.send({"t": "conformance-future", "th": random_thread(),
                 "payload": {"nested": [1, "two", {"three": 3}]}}, ctx.deadline)
    got_unsupported = []

    def reject(x: dict) -> bool:
        if x.get("t") == "err" and _err_code(x) == "unsupported":
            got_unsupported.append(x)
            return False
        return "_invalid" in x or x.get("t") == "err"

    _ping(ctx, s.conn, reject=reject)
    return "answered err unsupported first" if got_unsupported else ""


def s_unknown_field(ctx: Ctx) -> str:
    s = ctx.session()
    sent, _ = s.conn.send({
        "t": "msg", "th": random_thread(), "x_conformance": {"future": True, "n": [1, 2]},
        "parts": [{"k": "text", "text": "conformance: unknown fields", "x_part_field": "kept"},
                  {"k": "x-future-kind", "whatever": 1}],
    }, ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "msg with unknown fields")
    return ""


def s_err_nonclosing(ctx: Ctx) -> str:
    s = ctx.session()
    s.conn.send({"t": "err", "code": "unsupported",
                 "detail": "conformance: an err that must not close the connection"},
                ctx.deadline)
    _ping(ctx, s.conn, reject=lambda x: "_invalid" in x or x.get("t") == "err")
    return ""


BLOB = b"abcdefghijklmnopqrstuvwxyz"  # 26 bytes


def s_chunk(ctx: Ctx) -> str:
    s = ctx.session()
    if "blob" not in s.caps:
        raise Skip("the peer does not list cap blob")
    ref = "b_" + ctx.ids.next()
    th = random_thread()
    refused: list[dict] = []

    def reject(x: dict) -> bool:
        if x.get("t") == "err" and _err_code(x) == "blob_refused":
            refused.append(x)
            return False
        return "_invalid" in x or x.get("t") == "err"

    sent, _ = s.conn.send({
        "t": "msg", "th": th,
        "parts": [{"k": "text", "text": "conformance: a 26-byte file"},
                  {"k": "blob", "ref": ref, "name": "alphabet.txt", "mime": "text/plain",
                   "size": len(BLOB)}],
    }, ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "msg naming a blob", reject=reject)
    for n, piece in enumerate((BLOB[:13], BLOB[13:])):
        s.conn.send({"t": "chunk", "th": th, "ref": ref, "n": n, "last": n == 1,
                     "data": base64.b64encode(piece).decode()}, ctx.deadline)
    _ping(ctx, s.conn, reject=reject)
    if refused:
        return f"the peer refused the blob: {describe(refused[0])}"
    return ""


def s_grant(ctx: Ctx) -> str:
    s = ctx.session()
    if "grant" not in s.caps:
        raise Skip("the peer does not list cap grant")
    if not s.key:
        raise Fail("the peer's hello has no key to grant to")
    grant = {
        "iss": ctx.identity.key, "sub": s.key, "caps": ["fs:read"],
        "exp": format_ts_seconds(now_ms() + 3600_000), "nonce": b64url(os.urandom(16)),
    }
    grant["sig"] = ctx.identity.sign(canonical_bytes(grant))
    sent, _ = s.conn.send({"t": "grant", "grant": grant}, ctx.deadline)

    def acked(x: dict) -> bool:
        return x.get("t") == "ack" and x.get("re") == sent["id"]

    for line in s.conn.quiet_for(1.0, ctx.deadline):
        if line.get("t") == "err" or "_invalid" in line:
            raise Fail(f"expected no err within 1s of a valid grant, got {describe(line)}")
        if acked(line):
            raise Fail("the peer acked a grant line (grants are never acked)")
    if s.conn.eof:
        raise Fail("the peer closed the connection after a valid grant")
    _ping(ctx, s.conn, reject=lambda x: "_invalid" in x or x.get("t") == "err" or acked(x))
    return ""


def s_introduce_replay(ctx: Ctx) -> str:
    """An introduce line sent twice, as a sender's replay does, then reconnect.

    Introductions are never acked, so a sender can only stop replaying one
    when the peer's ``resume`` counts it in ``seen``.  A peer must take the
    replayed copy as the duplicate it is (no err, no ack) and list the
    introduction's thread at its id or later on the next connection.
    """
    first = handshake(ctx, ctx.fresh(), strict=False)
    if "introduce" not in first.caps:
        raise Skip("the peer does not list cap introduce")
    if not first.key:
        raise Fail("the peer's hello has no key to address an introduction to")
    third = Identity.generate().key
    grant = {
        "iss": ctx.identity.key, "sub": first.key, "aud": third, "caps": ["fs:read"],
        "exp": format_ts_seconds(now_ms() + 3600_000), "nonce": b64url(os.urandom(16)),
    }
    grant["sig"] = ctx.identity.sign(canonical_bytes(grant))
    th = random_thread()
    sent, raw = first.conn.send({
        "t": "introduce", "th": th, "grant": grant,
        "peer": {"key": third, "name": "conformance-introduced", "address": "tcp:127.0.0.1:9"},
    }, ctx.deadline)
    first.conn.send_raw(raw + b"\n", ctx.deadline)  # the replay

    def bad(x: dict) -> bool:
        if x.get("t") == "ack" and x.get("re") == sent["id"]:
            raise Fail("the peer acked an introduce line (introductions are never acked)")
        return "_invalid" in x or x.get("t") == "err"

    _ping(ctx, first.conn, reject=bad)
    first.conn.close()
    # Storing may finish after the pong: reconnect until the resume shows it.
    tries = 0
    while True:
        tries += 1
        again = handshake(ctx, ctx.fresh(), strict=False)
        seen = again.resume.get("seen") if isinstance(again.resume, dict) else None
        last = seen.get(th) if isinstance(seen, dict) else None
        again.conn.close()
        if isinstance(last, str) and last >= sent["id"]:
            return f"listed in seen after {tries} reconnect(s)" if tries > 1 else ""
        if time.monotonic() + 0.5 >= ctx.deadline:
            raise Fail(f"the peer's resume does not list the introduction's thread {th} at"
                       f" {sent['id']} or later (got {shown_seen(last)}): a sender replays"
                       " an introduction on every reconnect until its resume does")
        time.sleep(0.2)


def _sealed_session(ctx: Ctx) -> Session:
    s = handshake(ctx, ctx.fresh(), strict=False, seal=True)
    if not s.sealed:
        raise Skip("the peer does not offer the seal extension")
    if s.conn.seal_broken:
        raise Fail(f"the peer's sealed bytes after its auth: {s.conn.seal_broken}")
    return s


def s_seal(ctx: Ctx) -> str:
    s = _sealed_session(ctx)
    sent, _ = s.conn.send({"t": "msg", "th": random_thread(), "subject": "conformance: seal",
                           "parts": [{"k": "text", "text": "sealed end to end"}]}, ctx.deadline)
    _expect_ack(ctx, s.conn, sent, "sealed msg")
    _ping(ctx, s.conn)
    if s.conn.seal_broken:
        raise Fail(f"the peer's sealed bytes: {s.conn.seal_broken}")
    return "resume, ack and pong arrived sealed"


def s_seal_tamper(ctx: Ctx) -> str:
    s = _sealed_session(ctx)
    assert s.conn.sealer is not None
    line = {"t": "msg", "th": random_thread(), "subject": "conformance: seal-tamper",
            "parts": [{"k": "text", "text": "one byte of this record is flipped"}]}
    full = s.conn.envelope(line)
    record = bytearray(s.conn.sealer.seal(compact_json(full).encode() + b"\n"))
    record[-5] ^= 0x40  # inside the ciphertext: the record no longer authenticates
    s.conn.send_raw(bytes(record), ctx.deadline, tolerate_close=True, unsealed=True)
    seen = s.conn.expect_close(ctx.deadline, "the peer to close after a record that fails")
    if any(x.get("t") == "ack" and x.get("re") == full["id"] for x in seen):
        raise Fail("the peer acked a msg whose sealed record does not authenticate")
    return "closed without an ack"


def shown_seen(last: object) -> str:
    return "no entry" if last is None else repr(last)


def s_bye(ctx: Ctx) -> str:
    s = ctx.session()
    sent, _ = s.conn.send({"t": "bye", "reason": "conformance run finished"}, ctx.deadline)
    reply = s.conn.expect(_is("bye"), ctx.deadline, "a bye back")
    s.conn.expect_close(ctx.deadline, "the peer to close after the bye exchange")
    notes = []
    if reply.get("re") != sent["id"]:
        notes.append(f"bye reply has re {reply.get('re')!r}, expected our bye's id")
    return "note: " + "; ".join(notes) if notes else ""


SCENARIOS: list[Scenario] = [
    Scenario("handshake", "peer sends hello unprompted, a verifying auth, and resume before ours",
             s_handshake),
    Scenario("version", "hello with v 99 gets err version, then close", s_version,
             own_connection=True),
    Scenario("auth-bad-sig", "auth signed over the wrong transcript gets err auth, then close",
             s_auth_bad_sig, own_connection=True),
    Scenario("bad-frame", "a line that is not JSON gets err bad_frame, then close", s_bad_frame,
             own_connection=True),
    Scenario("too-large", "a msg line over 1 MiB gets err too_large, then close", s_too_large,
             own_connection=True),
    Scenario("ping", "ping gets a pong whose re is the ping's id", s_ping),
    Scenario("msg-ack", "msg with text, code and data parts gets an ack with th and re",
             s_msg_ack),
    Scenario("state-ack", "state working gets an ack", s_state_ack),
    Scenario("dedup", "the same msg line sent twice is acked twice", s_dedup),
    Scenario("unknown-type", "an unknown message type is ignored: ping still answered",
             s_unknown_type),
    Scenario("unknown-field", "unknown top-level and part fields are ignored: msg acked",
             s_unknown_field),
    Scenario("err-nonclosing", "err unsupported neither closes nor gets an err back",
             s_err_nonclosing),
    Scenario("chunk", "msg naming a 26-byte blob acked, two chunks, ping answered (cap blob)",
             s_chunk),
    Scenario("grant", "a valid grant line: no err within 1s, no ack, ping answered (cap grant)",
             s_grant),
    Scenario("introduce-replay", "an introduce line sent twice draws no err or ack, and the"
             " next resume lists its thread (cap introduce)", s_introduce_replay,
             own_connection=True),
    Scenario("seal", "both hellos offer seal: resume, ack and pong come sealed (cap seal)",
             s_seal, own_connection=True),
    Scenario("seal-tamper", "a sealed record with one flipped byte: the peer closes, no ack"
             " (cap seal)", s_seal_tamper, own_connection=True),
    *BOARD_SCENARIOS,
    *OWNER_SCENARIOS,
    *WS_SCENARIOS,
    *IDENTITY_SCENARIOS,
    *BULK_SCENARIOS,
    Scenario("bye", "bye gets a bye back, then the peer closes", s_bye),
]

BY_NAME = {s.name: s for s in SCENARIOS}


def elapsed_ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
