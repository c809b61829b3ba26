"""The handshake as a sans-I/O state machine.

Both sides send ``hello`` at once, then ``auth`` (a signature over both hello
lines, so it cannot be replayed), then ``resume``.  This module decides what
to send and when to fail; it never touches a socket, a clock or the store, so
every rule here is tested with plain byte strings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..wire import errors
from ..wire import rotation as rotation_wire
from ..wire.b64 import b64url
from ..wire.errors import ProtocolError
from ..wire.framing import MAX_LINE
from ..wire.ids import IdGenerator
from ..wire.keys import Identity, KeyError_, auth_transcript, decode_key, normalize_key, verify
from ..wire.messages import MAX_DEPTH, dump, hello, parse_line
from ..wire.seal import SEAL_CAP, Ephemeral, SealError, parse_seal_key, transcript_hash
from ..wire.timefmt import format_ts, now_ms

SUPPORTED_VERSIONS = frozenset({0})


@dataclass
class LocalHello:
    """What we announce about ourselves."""

    name: str
    caps: list[str]
    about: str = ""
    addr: str | None = None
    shares: list[str] | None = None
    version: int = 0
    # Every endpoint we can be reached on (``hello.addrs``, ours): ``addr``
    # stays one string, which is all the reference peer reads.
    addrs: list[str] | None = None
    # A side connection's purpose (``hello.side``, ours: "bulk", awp/node/bulk_side.py).
    side: str = ""


@dataclass
class Handshake:
    """One connection's handshake; feed it lines until ``done``."""

    identity: Identity
    local: LocalHello
    ids: IdGenerator
    my_hello: bytes = b""
    peer_hello: bytes = b""
    peer: dict = field(default_factory=dict)
    peer_key: str = ""
    stage: str = "hello"  # hello -> auth -> done
    # Dialing: called with the key in the peer's hello before we send auth; a
    # non-empty answer (a key the address did not name, a race another
    # endpoint won) ends the handshake with nothing more sent.
    check_peer: Callable[[str], str] | None = None
    # Dialing: fields to add to our auth, given our hello and the peer's (the
    # proof of an invite, awp.wire.invite).
    auth_extra: Callable[[bytes, bytes], dict] | None = None
    # Our auth's ``keys`` field (key links, awp/node/keylinks.py) for this peer's
    # hello, or None.
    keylinks: Callable[[dict], list[dict] | None] | None = None
    # Grants to show the peer in our auth, looked up once its key is known.
    present: Callable[[str], list[dict]] | None = None
    # Why a hello's key is refused although it verifies (a key rotated away:
    # "KEY rotated to KEY"), or "" (awp/node/rotate.py).
    refuse_key: Callable[[str], str] | None = None
    # Our auth's ``rotation`` field for this peer's hello, or None (only peers
    # that list the ``rotate`` cap get one).
    rotation: Callable[[dict], dict | None] | None = None
    # Our auth's ``operator`` field (our device certificate, the revocations we
    # hold) for this peer's hello, or None (awp/node/operators.py).
    operator: Callable[[dict], dict | None] | None = None
    # Dialing a known key: the key we expect.  A hello with another key that
    # lists the ``rotate`` cap is not refused at once: we wait for the peer's
    # auth (it writes its own without waiting for ours), and answer only if
    # its rotation records lead from this key to the hello's.
    expect: str = ""
    max_chain: int = rotation_wire.MAX_CHAIN  # records looked at meanwhile (limits.rotation_chain)
    _mismatch: str = ""
    # Deepest JSON nesting accepted in a line (``Limits.json_depth``), here and after.
    max_depth: int = MAX_DEPTH
    # We dialed (our hello comes first in the seal transcript).
    outbound: bool = False
    # "off": never offer the seal extension; "prefer": seal when the peer offers
    # it too; "require": refuse a peer that does not (wire/seal.py).
    seal: str = "prefer"
    # (tx, rx) once both hellos offered sealing: every byte after our auth is
    # sealed with tx, every byte after the peer's with rx.
    seal_keys: tuple[bytes, bytes] | None = None
    _ephemeral: Ephemeral | None = None

    def start(self) -> bytes:
        """Our hello line (with newline), sent at once on connect."""
        nonce = b64url(os.urandom(32))
        caps = list(self.local.caps)
        if self.seal != "off":
            self._ephemeral = Ephemeral()
            if SEAL_CAP not in caps:
                caps.append(SEAL_CAP)
        line = hello(
            id=self.ids.next(), ts=format_ts(now_ms()), key=self.identity.key,
            name=self.local.name, nonce=nonce, caps=caps,
            about=self.local.about, addr=self.local.addr, shares=self.local.shares,
            v=self.local.version, seal=self._ephemeral.text if self._ephemeral else None,
        )
        if self.local.addrs:
            line["addrs"] = list(self.local.addrs)
        if self.local.side:
            line["side"] = self.local.side
        data = dump(line)
        self.my_hello = data[:-1]
        return data

    @property
    def done(self) -> bool:
        return self.stage == "done"

    def receive(self, raw: bytes) -> bytes | None:
        """Handle one handshake line; returns a line to send, if any.

        Raises :class:`ProtocolError` with the code to answer (the caller sends
        the err and closes).  A peer ``err`` raises with code ``""``: close
        without answering, since an err is never answered with an err.
        """
        try:
            obj = parse_line(raw, self.max_depth)
        except ProtocolError as e:
            if self.stage != "hello":
                raise
            # What a web server or anything else that is not AWP answers with.
            raise ProtocolError(e.code, "not an AWP peer: its first line is not an AWP hello"
                                f" ({e.detail})", re=e.re) from None
        t = obj["t"]
        if t == "err":
            code = obj.get("code") if isinstance(obj.get("code"), str) else "?"
            raise ProtocolError("", f"peer refused: {code} {obj.get('detail') or ''}".strip())
        if self.stage == "hello":
            if t != "hello":
                raise ProtocolError(errors.BAD_FRAME, f"expected hello, got {t}")
            return self._on_hello(obj, raw)
        if self.stage == "auth":
            if t != "auth":
                raise ProtocolError(errors.AUTH, f"expected auth, got {t}")
            return self._on_auth(obj)
        raise ProtocolError(errors.BAD_FRAME, "handshake already complete")

    def _on_hello(self, obj: dict, raw: bytes) -> bytes | None:
        v = obj.get("v", 0)
        if not isinstance(v, int) or isinstance(v, bool) or v not in SUPPORTED_VERSIONS:
            raise ProtocolError(errors.VERSION, f"version {v!r} not spoken (we speak 0)",
                                re=obj.get("id"))
        try:
            decode_key(obj.get("key"))
            key = normalize_key(obj["key"])
        except KeyError_ as e:
            raise ProtocolError(errors.AUTH, f"hello key: {e}") from None
        if key == self.identity.key:
            raise ProtocolError(errors.AUTH, "hello carries our own key")
        nonce = obj.get("nonce")
        if not isinstance(nonce, str) or not nonce:
            raise ProtocolError(errors.AUTH, "hello without nonce")
        retired = self.refuse_key(key) if self.refuse_key is not None else ""
        if retired:
            raise ProtocolError(errors.AUTH, retired)
        refusal = self.check_peer(key) if self.check_peer is not None else ""
        caps = obj.get("caps")
        follow = (refusal and self.expect and key != self.expect and isinstance(caps, list)
                  and rotation_wire.CAP in caps)
        if refusal and not follow:
            raise ProtocolError("", refusal)
        self.peer = obj
        self.peer_key = key
        self.peer_hello = raw
        self._agree_seal(obj, raw)
        self.stage = "auth"
        if follow:
            self._mismatch = refusal
            return None
        return self._auth_line(obj, key)

    def _followed(self) -> None:
        """Our auth is held until the peer's rotation records lead from the key we dialed."""
        field = self.peer_auth.get("rotation")
        chain = field.get("chain") if isinstance(field, dict) else None
        cur = self.expect
        if isinstance(chain, list) and len(chain) > self.max_chain:
            raise ProtocolError("", f"{self._mismatch} (over {self.max_chain} records)")
        try:
            for rec in chain if isinstance(chain, list) else []:
                rot = rotation_wire.check(rec)
                if rot.old == cur:
                    cur = rot.new
        except rotation_wire.RotationError as e:
            raise ProtocolError("", f"{self._mismatch} ({e.detail})") from None
        if cur != self.peer_key:
            raise ProtocolError("", f"{self._mismatch}, and no rotation record leads there")
        refusal = self.check_peer(self.expect) if self.check_peer is not None else ""
        if refusal:  # another endpoint of the race led meanwhile
            raise ProtocolError("", refusal)

    def _auth_line(self, obj: dict, key: str) -> bytes:
        sig = self.identity.sign(auth_transcript(self.my_hello, self.peer_hello))
        auth: dict = {"t": "auth", "id": self.ids.next(), "ts": format_ts(now_ms()), "sig": sig}
        if self.auth_extra is not None:
            auth.update(self.auth_extra(self.my_hello, self.peer_hello))
        rotation = self.rotation(obj) if self.rotation is not None else None
        if rotation:
            auth["rotation"] = rotation
        operator = self.operator(obj) if self.operator is not None else None
        if operator:
            auth["operator"] = operator
        linked = self.keylinks(obj) if self.keylinks is not None else None
        if linked:
            auth["keys"] = linked
        grants = self.present(key) if self.present is not None else []
        if grants:
            auth["grants"] = grants
            line = dump(auth)
            if len(line) <= MAX_LINE:
                return line
            # Never let what we were given to present cost us the connection.
            del auth["grants"]
        return dump(auth)

    def _agree_seal(self, obj: dict, raw: bytes) -> None:
        """Decide whether this link is sealed, from both hellos.

        Sealed exactly when both offered it: the peer lists the cap and
        carries a usable key.  A peer that lists the cap with a key we
        cannot use is refused rather than silently left plain.
        """
        caps = obj.get("caps")
        offered = isinstance(caps, list) and SEAL_CAP in caps and "seal" in obj
        if self._ephemeral is None or not offered:
            if self.seal == "require":
                raise ProtocolError(errors.AUTH, "this host requires sealed links and the peer"
                                    " does not offer the seal extension", re=obj.get("id"))
            return
        peer_public = parse_seal_key(obj.get("seal"))
        if peer_public is None:
            raise ProtocolError(errors.AUTH, "hello seal key is not a 32-byte X25519 key",
                                re=obj.get("id"))
        first, second = ((self.my_hello, raw) if self.outbound else (raw, self.my_hello))
        try:
            self.seal_keys = self._ephemeral.keys(peer_public, dialer=self.outbound,
                                                  transcript=transcript_hash(first, second))
        except SealError as e:
            raise ProtocolError(errors.AUTH, str(e), re=obj.get("id")) from None

    def _on_auth(self, obj: dict) -> bytes | None:
        sig = obj.get("sig")
        if not isinstance(sig, str) or not verify(
            self.peer_key, auth_transcript(self.peer_hello, self.my_hello), sig
        ):
            raise ProtocolError(errors.AUTH, "auth signature does not verify")
        self.peer_auth = obj
        self.stage = "done"
        if self._mismatch:  # the key we dialed rotated: answer now, if its records say so
            self._followed()
            return self._auth_line(self.peer, self.peer_key)
        return None

    @property
    def peer_grants(self) -> list[dict]:
        grants = getattr(self, "peer_auth", {}).get("grants")
        return [g for g in grants if isinstance(g, dict)] if isinstance(grants, list) else []
