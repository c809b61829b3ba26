"""Invites in the engine: issuing them, admitting their holders, redeeming one.

Issuing keeps the invite with its secret's verifier only (awp/store/invites.py).
Admitting: a dialer whose ``auth`` carries ``invite`` is judged by that invite
alone, under any policy.  The field's shape is checked before any lookup;
then one writer transaction checks the MAC, spends a use, records the
redeemer and issues the grants the invite carries, so the grants go out
with that connection's resume (the engine re-sends what it issued to a peer
on every resume).  Topic rights follow right after, through the board's own
member path, before the connection is attached.  ``accept: invite-only``
admits, besides invite holders, only peers already met.

Redeeming is the dialer's half: :func:`proof` builds the ``auth.invite``
field from the two hellos, so the secret itself never leaves this host.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store import grants as grantstore
from ..store import invites as invitestore
from ..store import ops
from ..wire.grants import make_grant
from ..wire.invite import (
    Invite,
    check_invite_field,
    format_invite,
    invite_mac,
    mac_matches,
    new_invite_id,
    verifier_of,
)
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.node")

INVITE_ONLY = "invite-only"
MAX_USES = 1_000_000


def proof(inv: Invite) -> Callable[[bytes, bytes], dict]:
    """The handshake's ``auth_extra`` for redeeming ``inv``: its id and the MAC."""
    verifier = verifier_of(inv.secret)

    def extra(my_hello: bytes, peer_hello: bytes) -> dict:
        return {"invite": {"id": inv.id, "mac": invite_mac(verifier, my_hello, peer_hello)}}
    return extra


class Invites:
    """The invite side of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.redeemed = 0
        self.refused = 0

    async def create(self, *, uses: int, ttl_s: float, caps: list[str], topics: list[dict],
                     grant_ttl_s: float, endpoints: list[str]) -> tuple[str, dict]:
        """A new invite: its text (with the secret, shown once) and its listing row."""
        eng = self.engine
        if not endpoints:
            raise ValueError("this daemon listens on no address a peer could dial:"
                             " an invite needs one (awp up --listen ...)")
        secret = os.urandom(32)
        ident = new_invite_id()
        now = now_ms()
        expires = now + int(ttl_s * 1000)

        def job(c: sqlite3.Connection) -> dict:
            invitestore.create(c, ident, verifier_of(secret), uses=uses, expires=expires,
                               caps=caps, topics=topics, grant_ttl_ms=int(grant_ttl_s * 1000),
                               now=now, max_live=eng.config.limits.invites)
            return next(r for r in invitestore.listing(c, now) if r["id"] == ident)

        row = await eng.writer.run(job)
        text = format_invite(Invite(eng.identity.key, tuple(endpoints), ident, secret,
                                    eng.config.name))
        return text, row

    async def listing(self) -> list[dict]:
        return await self.engine.read(lambda c: invitestore.listing(c, now_ms()))

    async def revoke(self, ident: str) -> bool:
        return await self.engine.writer.run(lambda c: invitestore.revoke(c, ident))

    async def admit(self, conn: Connection) -> str | None:
        """None when the dialer's auth carries no invite; else "" to admit or the refusal."""
        field = getattr(conn.hs, "peer_auth", {}).get("invite")
        if field is None:
            return None
        try:
            ident, mac = check_invite_field(field)
        except ValueError as e:
            self.refused += 1
            return f"bad invite: {e}"
        eng, key, now = self.engine, conn.peer_key, now_ms()
        dialer_hello, listener_hello = conn.hs.peer_hello, conn.hs.my_hello

        def proves(verifier: bytes) -> bool:
            return mac_matches(verifier, dialer_hello, listener_hello, mac)

        def job(c: sqlite3.Connection) -> invitestore.Redeemed:
            got = invitestore.redeem(c, ident, proves, key, now)
            if got.first:
                ops.ensure_peer(c, key, now)
                if got.caps:
                    g = make_grant(eng.identity, key, got.caps, now + got.grant_ttl_ms)
                    grantstore.put(c, g, "issued", now)
            return got

        got = await eng.writer.run(job)
        if got.refusal:
            self.refused += 1
            log.info("refused invite %s from %s (%s): %s", ident, conn.peer_name, key,
                     got.refusal)
            return got.refusal
        if got.first:
            self.redeemed += 1
            log.info("invite %s redeemed by %s (%s)", ident, conn.peer_name, key)
            if got.topics:
                topics = [dict(t, until_ms=now + int(t.get("ttl_ms") or got.grant_ttl_ms))
                          for t in got.topics if isinstance(t, dict)]
                for ext in eng.extensions:
                    await ext.on_invited(key, topics)
        return ""

    async def met(self, key: str) -> bool:
        """Under invite-only: a key we were connected to before, dialed, or named in the policy."""
        cfg = self.engine.config
        if key in cfg.allow or key in cfg.trust:
            return True
        return bool(await self.engine.read(lambda c: c.execute(
            "SELECT 1 FROM peers WHERE key = ? AND last_seen > 0 UNION ALL"
            " SELECT 1 FROM addresses WHERE peer = ? AND last_success > 0 LIMIT 1",
            (key, key)).fetchone()))
