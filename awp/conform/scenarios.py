"""The conformance scenarios: the fifteen of wire-facts section 12, and ours.

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
from collections.abc import Callable
from dataclasses import dataclass, field

from ..wire.b64 import b64url
from ..wire.canonical import canonical_bytes, compact_json
from ..wire.ids import IdGenerator
from ..wire.keys import Identity, auth_transcript, verify
from ..wire.timefmt import format_ts, format_ts_seconds, now_ms
from .conn import Fail, PeerConn, Skip, Tracer, describe, random_nonce, random_thread

PROTOCOL_VERSION = 0
RUNNER_CAPS = ["chat"]  # the runner asks the peer for nothing optional


@dataclass
class Session:
    """A connection after the handshake, with what the peer told us."""

    conn: PeerConn
    hello: dict
    hello_raw: bytes
    auth: dict | None = None
    resume: dict | None = None
    faults: list[str] = field(default_factory=list)

    @property
    def caps(self) -> list[str]:
        caps = self.hello.get("caps")
        return [c for c in caps if isinstance(c, str)] if isinstance(caps, list) else []

    @property
    def key(self) -> str:
        k = self.hello.get("key")
        return k if isinstance(k, str) else ""


@dataclass
class Ctx:
    """What a scenario runs with."""

    identity: Identity
    ids: IdGenerator
    deadline: float
    tracer: Tracer | None = None
    address: str | None = None  # connect mode
    accepted: PeerConn | None = None  # listen mode: the inbound connection, before handshake
    shared: Session | None = None  # listen mode: the inbound connection, after handshake
    conns: list[PeerConn] = field(default_factory=list)
    name: str = "awp-conform"
    peer: dict | None = None  # who answered: key, name, caps of the last hello seen

    @property
    def listen_mode(self) -> bool:
        return self.address is None

    def fresh(self) -> PeerConn:
        """A connection on which no handshake has happened yet."""
        if self.accepted is not None:
            conn, self.accepted = self.accepted, None
            return conn
        if self.address is None:
            raise Fail("no inbound connection to run the handshake on")
        conn = PeerConn.dial(self.address, self.deadline, self.ids, self.tracer)
        self.conns.append(conn)
        return conn

    def session(self) -> Session:
        """A connection that has completed the handshake."""
        if self.shared is not None:
            if self.shared.conn.eof:
                where = self.shared.conn.closed_in
                raise Fail("the peer had already closed the shared connection"
                           + (f" (during {where})" if where else ""))
            return self.shared
        return handshake(self, self.fresh(), strict=False)

    def hello_line(self, version: int = PROTOCOL_VERSION) -> dict:
        return {
            "t": "hello", "id": self.ids.next(), "ts": _ts(), "v": version,
            "key": self.identity.key, "name": self.name, "nonce": random_nonce(),
            "caps": list(RUNNER_CAPS), "about": "AWP conformance runner",
        }

    def close(self) -> None:
        for c in self.conns:
            c.close()


def _ts() -> str:
    return format_ts(now_ms())


def _err_code(line: dict) -> str:
    code = line.get("code")
    return code if isinstance(code, str) else "?"


def _is(t: str) -> Callable[[dict], bool]:
    return lambda line: line.get("t") == t


# -- the handshake ----------------------------------------------------------------------

def handshake(ctx: Ctx, conn: PeerConn, *, strict: bool) -> Session:
    """Run hello/auth/resume with the peer.

    ``strict`` is the ``handshake`` scenario: wait for the peer's hello before
    sending ours, and wait for its resume before sending ours.  Otherwise our
    hello goes out at once.  Either way a peer auth that does not verify is
    recorded in ``faults`` rather than raised: it is the ``handshake``
    scenario's business, and the connection is still usable for the others.
    """
    mine = ctx.hello_line()
    if not strict:
        _, my_raw = conn.send(mine, ctx.deadline)
    what = "the peer's hello (sent without waiting for ours)" if strict else "the peer's hello"
    started = time.monotonic()
    try:
        first = conn.next_line(ctx.deadline)
    except TimeoutError:
        waited = time.monotonic() - started
        raise Fail(f"expected {what} within {waited:.1f}s: got nothing") from None
    if first is None:
        raise Fail(f"expected {what}, but the peer closed the connection")
    if first.get("t") != "hello":
        raise Fail(f"expected {what} as the first line, got {describe(first, full=True)}")
    hello_raw = conn.raw_of(first)
    session = Session(conn, first, hello_raw)
    ctx.peer = {"key": session.key, "name": first.get("name"), "caps": session.caps}
    v = first.get("v")
    if v != PROTOCOL_VERSION:
        raise Fail(f"the peer's hello has v {v!r}; this runner speaks v {PROTOCOL_VERSION}")
    if strict:
        _, my_raw = conn.send(mine, ctx.deadline)

    auth = conn.expect(_is("auth"), ctx.deadline, "the peer's auth",
                       reject=lambda x: x.get("t") not in ("auth",))
    session.auth = auth
    sig = auth.get("sig")
    good = isinstance(sig, str) and verify(session.key, auth_transcript(hello_raw, my_raw), sig)
    if not good:
        # Recorded, not raised: the handshake scenario fails on it, the others
        # (and, in listen mode, the shared connection) carry on.
        session.faults.append("the peer's auth does not verify over \"awp-auth-v0\" 0x00"
                              " <its hello> 0x00 <our hello>")
    conn.send({"t": "auth", "sig": ctx.identity.sign(auth_transcript(my_raw, hello_raw))},
              ctx.deadline)
    if not strict:
        conn.send({"t": "resume", "seen": {}}, ctx.deadline)
    what = "the peer's resume (sent without waiting for ours)" if strict else "the peer's resume"
    session.resume = conn.expect(_is("resume"), ctx.deadline, what)
    if strict:
        conn.send({"t": "resume", "seen": {}}, ctx.deadline)
    conn.auto_pong = True
    return session


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
    line = s.conn.envelope({"t": "msg", "th": random_thread(),
                            "parts": [{"k": "text", "text": ""}]})
    base = len(compact_json(line).encode())
    size = 1_048_576 + 4096
    line["parts"][0]["text"] = "x" * (size - base)
    data = compact_json(line).encode() + b"\n"
    s.conn.send_raw(data, ctx.deadline, tolerate_close=True)
    err = s.conn.expect(_is("err"), ctx.deadline, f"err too_large for a {size}-byte msg line",
                        reject=lambda x: "_invalid" in x or x.get("t") == "ack")
    if _err_code(err) != "too_large":
        raise Fail(f"expected err too_large, got {describe(err)}")
    s.conn.expect_close(ctx.deadline, "the peer to close after err too_large")
    return ""


def _ping(ctx: Ctx, conn: PeerConn, *, reject: Callable[[dict], bool] | None = None) -> dict:
    ping, _ = conn.send({"t": "ping"}, ctx.deadline)
    return conn.expect(lambda x: x.get("t") == "pong" and x.get("re") == ping["id"],
                       ctx.deadline, f"pong with re {ping['id']}", reject=reject)


def s_ping(ctx: Ctx) -> str:
    s = ctx.session()
    _ping(ctx, s.conn)
    return ""


def _expect_ack(ctx: Ctx, conn: PeerConn, sent: dict, what: str,
                reject: Callable[[dict], bool] | None = None) -> dict:
    ack = conn.expect(lambda x: x.get("t") == "ack" and x.get("re") == sent["id"],
                      ctx.deadline, f"ack of the {what} (re {sent['id']})", reject=reject)
    if ack.get("th") != sent["th"]:
        raise Fail(f"the ack of the {what} has th {ack.get('th')!r}, expected {sent['th']!r}")
    return ack


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


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    run: Callable[[Ctx], str]
    own_connection: bool = False


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
    Scenario("bye", "bye gets a bye back, then the peer closes", s_bye),
]

BY_NAME = {s.name: s for s in SCENARIOS}


def elapsed_ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
