"""Who gets in: the admission policy applied to a peer that passed its handshake.

One function, because the order of its rules is the policy: an invite's
verdict first (under any policy), then ``accept`` (``operator``,
``invite-only``, ``allowlist``, or ``any``), and under ``allowlist`` the keys
we allow, trust or dialed, the grants the peer presents, and what an
extension admits (a live operator certificate).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..store import grants as grantstore
from ..store import ops
from ..wire.timefmt import now_ms
from .invites import INVITE_ONLY
from .operators import OPERATOR

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.node")


async def admit(engine: Engine, conn: Connection) -> str:
    """Empty string to admit; otherwise the reason for ``err auth``."""
    cfg = engine.config
    if engine.operators is not None:  # its certificate and revocations, under any policy
        await engine.operators.take(conn)
    invited = None if conn.outbound else await engine.invites.admit(conn)
    if invited is not None:  # an invite in the auth: its verdict, under any policy
        return invited
    if cfg.accept == OPERATOR:
        if conn.outbound or conn.peer_key in cfg.allow:
            return ""
        why = (engine.operators.verdict(conn.peer_key, now_ms()) if engine.operators is not None
               else "operator keys are not loaded on this host")
        return await _refused(engine, conn, why) if why else ""
    if cfg.accept == INVITE_ONLY:
        if conn.outbound or await engine.invites.met(conn.peer_key):
            return ""
        return ("this host admits only holders of a live invite and peers it has met"
                " (accept: invite-only)")
    if cfg.accept != "allowlist":
        log.info("admitted %s (%s) under policy any", conn.peer_name, conn.peer_key)
        return ""
    key = conn.peer_key
    if conn.outbound or key in cfg.allow or key in cfg.trust:
        return ""
    dialed = await engine.read(lambda c: c.execute(
        "SELECT 1 FROM addresses WHERE peer = ? AND last_success > 0 LIMIT 1",
        (key,)).fetchone())
    if dialed:  # a key we reached ourselves before (dial-back, a restart)
        return ""
    presented = conn.hs.peer_grants
    if presented:
        await engine.writer.run(lambda c: engine.store_grants(c, conn, presented, now_ms()))
        if await engine.read(lambda c: grantstore.honored(
                c, key, engine.identity.key, cfg.trust, now_ms(), engine.audiences())):
            return ""
    for ext in engine.extensions:
        if await ext.admits(conn):
            return ""
    return await _refused(engine, conn, "not on the allowlist")


async def _refused(engine: Engine, conn: Connection, why: str) -> str:
    """Tell the user (a notice) that ``conn`` was refused, and return ``why``."""
    key = conn.peer_key
    name = conn.peer_name or "a peer"
    now = now_ms()
    try:
        await engine.writer.run(lambda c: (
            ops.ensure_peer(c, key, now),
            ops.add_notice(c, engine.ids, key, "refused",
                           f"refused a connection from {name} ({key}): {why}", now),
        ))
    except Exception:
        pass
    engine.changes.publish({"kind": "notice", "peer": key})
    return why
