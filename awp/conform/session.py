"""What every scenario runs with: the context, the handshake, and shared helpers.

Kept apart from the scenarios themselves so that the board's scenarios
(:mod:`.board_scenarios`) and the core ones (:mod:`.scenarios`) can share them
without importing each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..wire.address import Address, parse_address
from ..wire.canonical import compact_json
from ..wire.ids import IdGenerator
from ..wire.keys import Identity, auth_transcript, verify
from ..wire.seal import SEAL_CAP, Ephemeral, SealError, parse_seal_key, transcript_hash
from ..wire.timefmt import format_ts, now_ms
from .conn import Fail, PeerConn, Tracer, describe, random_nonce, random_thread

PROTOCOL_VERSION = 0
RUNNER_CAPS = ["chat", "board"]  # nothing optional asked for; board so board peers speak it


@dataclass
class Session:
    """A connection after the handshake, with what the peer told us."""

    conn: PeerConn
    hello: dict
    hello_raw: bytes
    auth: dict | None = None
    resume: dict | None = None
    faults: list[str] = field(default_factory=list)
    sealed: bool = False  # both hellos offered the seal extension (SPEC.md section 11)

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
    board_topic: str = ""  # --board-topic: an open topic the peer holds (board scenarios)
    ca_file: str = ""  # --ca: certificates trusted for wss:// beside the system store
    owner_run: str = ""  # --owner-run: makes the peer subscribe to {topic}, ours

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
        return self.dial()

    def dial(self) -> PeerConn:
        """A new connection to the peer (connect mode), closed with the context."""
        assert self.address is not None
        conn = PeerConn.dial(self.address, self.deadline, self.ids, self.tracer, self.ca_file)
        self.conns.append(conn)
        return conn

    @property
    def ws_target(self) -> Address | None:
        """The peer's ws:// or wss:// address, when that is what is being checked."""
        if self.address is None:
            return None
        addr = parse_address(self.address)
        return addr if addr.kind == "ws" else None

    def session(self) -> Session:
        """A connection that has completed the handshake."""
        if self.shared is not None:
            if self.shared.conn.eof:
                where = self.shared.conn.closed_in
                raise Fail("the peer had already closed the shared connection"
                           + (f" (during {where})" if where else ""))
            return self.shared
        return handshake(self, self.fresh(), strict=False)

    def second_session(self, identity: Identity) -> Session:
        """A handshake under another key on a connection of its own (connect mode
        only): a second party, to see what the peer relays to others."""
        if self.address is None:
            raise Fail("a second party needs connect mode")
        return handshake(self, self.dial(), strict=False, identity=identity)

    def hello_line(self, version: int = PROTOCOL_VERSION,
                   identity: Identity | None = None) -> dict:
        return {
            "t": "hello", "id": self.ids.next(), "ts": _ts(), "v": version,
            "key": (identity or self.identity).key, "name": self.name, "nonce": random_nonce(),
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

def handshake(ctx: Ctx, conn: PeerConn, *, strict: bool,
              identity: Identity | None = None, seal: bool = False,
              caps: list[str] | None = None, auth_extra: dict | None = None) -> Session:
    """Run hello/auth/resume with the peer.

    ``strict`` is the ``handshake`` scenario: wait for the peer's hello before
    sending ours, and wait for its resume before sending ours.  Otherwise our
    hello goes out at once.  Either way a peer auth that does not verify is
    recorded in ``faults`` rather than raised: it is the ``handshake``
    scenario's business, and the connection is still usable for the others.

    ``seal`` offers the seal extension; the link is sealed when the peer
    offers it too (``Session.sealed``).  ``caps`` are listed in our hello
    besides the runner's; ``auth_extra`` are fields added to our auth (a
    rotation chain, say).
    """
    me = identity or ctx.identity
    mine = ctx.hello_line(identity=me)
    mine["caps"] = [*mine["caps"], *(caps or [])]
    ephemeral = Ephemeral() if seal else None
    if ephemeral is not None:
        mine["caps"] = [*mine["caps"], SEAL_CAP]
        mine["seal"] = ephemeral.text
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
    keys = _seal_keys(ephemeral, first, my_raw, hello_raw) if ephemeral is not None else None

    auth = conn.expect(_is("auth"), ctx.deadline, "the peer's auth",
                       reject=lambda x: x.get("t") not in ("auth",))
    if keys is not None:
        session.sealed = True
        conn.seal_receiving(keys[1])
    session.auth = auth
    sig = auth.get("sig")
    good = isinstance(sig, str) and verify(session.key, auth_transcript(hello_raw, my_raw), sig)
    if not good:
        # Recorded, not raised: the handshake scenario fails on it, the others
        # (and, in listen mode, the shared connection) carry on.
        session.faults.append("the peer's auth does not verify over \"awp-auth-v0\" 0x00"
                              " <its hello> 0x00 <our hello>")
    conn.send({"t": "auth", "sig": me.sign(auth_transcript(my_raw, hello_raw)),
               **(auth_extra or {})}, ctx.deadline)
    if keys is not None:
        conn.seal_sending(keys[0])
    if not strict:
        conn.send({"t": "resume", "seen": {}}, ctx.deadline)
    what = "the peer's resume (sent without waiting for ours)" if strict else "the peer's resume"
    session.resume = conn.expect(_is("resume"), ctx.deadline, what)
    if strict:
        conn.send({"t": "resume", "seen": {}}, ctx.deadline)
    conn.auto_pong = True
    return session


def _seal_keys(ephemeral: Ephemeral, hello: dict, my_raw: bytes,
               hello_raw: bytes) -> tuple[bytes, bytes] | None:
    """(tx, rx) when the peer's hello offers sealing too; we are the dialer."""
    caps = hello.get("caps")
    if not (isinstance(caps, list) and SEAL_CAP in caps and "seal" in hello):
        return None
    peer_public = parse_seal_key(hello.get("seal"))
    if peer_public is None:
        raise Fail(f"the peer's hello lists {SEAL_CAP} but its seal key is not a 32-byte"
                   " X25519 key in base64url")
    try:
        return ephemeral.keys(peer_public, dialer=True,
                              transcript=transcript_hash(my_raw, hello_raw))
    except SealError as e:
        raise Fail(f"the peer's seal key: {e}") from None


def _expect_ack(ctx: Ctx, conn: PeerConn, sent: dict, what: str,
                reject: Callable[[dict], bool] | None = None) -> dict:
    ack = conn.expect(lambda x: x.get("t") == "ack" and x.get("re") == sent["id"],
                      ctx.deadline, f"ack of the {what} (re {sent['id']})", reject=reject)
    if ack.get("th") != sent["th"]:
        raise Fail(f"the ack of the {what} has th {ack.get('th')!r}, expected {sent['th']!r}")
    return ack


def msg_of_size(conn: PeerConn, size: int) -> tuple[dict, bytes]:
    """A msg envelope whose line is exactly ``size`` bytes (without its newline)."""
    line = conn.envelope({"t": "msg", "th": random_thread(),
                          "parts": [{"k": "text", "text": ""}]})
    line["parts"][0]["text"] = "x" * (size - len(compact_json(line).encode()))
    raw = compact_json(line).encode()
    assert len(raw) == size
    return line, raw


def _ping(ctx: Ctx, conn: PeerConn, *, reject: Callable[[dict], bool] | None = None) -> dict:
    ping, _ = conn.send({"t": "ping"}, ctx.deadline)
    return conn.expect(lambda x: x.get("t") == "pong" and x.get("re") == ping["id"],
                       ctx.deadline, f"pong with re {ping['id']}", reject=reject)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    run: Callable[[Ctx], str]
    own_connection: bool = False
