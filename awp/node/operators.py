"""Operator keys on a running host: our certificate, trusted operators, revocations.

What travels:

* Our own device certificate (``awp operator install``) goes in our
  ``auth`` as ``operator.cert`` to peers whose hello lists the ``operator``
  cap; the reference peer never sees it.
* The newest revocations we hold go in the same field (``operator.revoked``,
  at most :data:`~awp.wire.operator.MAX_REVOCATIONS`), so a host learns
  them at every handshake, before it decides to admit anyone; and a new one
  is passed at once to every connected peer that lists the cap as an
  ``op-revoke`` line.  A host keeps and passes on a revocation whether or
  not it trusts the operator, so it reaches hosts two hops away and more;
  the first copy a host already holds ends the flood.

What it decides: under ``accept: operator`` a peer is admitted when it shows
a live certificate from an operator we trust that was not revoked since;
under ``allowlist`` such a certificate admits too, as a grant we honour
would.  A revocation we take closes a connection that only its certificate
admitted.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import TYPE_CHECKING

import trio

from ..store import grants as grantstore
from ..store import operators as opstore
from ..store import ops
from ..wire import operator as O
from ..wire.timefmt import format_ts, now_ms, parse_ts
from .extension import Extension

if TYPE_CHECKING:
    import sqlite3

    from .connection import Connection
    from .engine import Engine
    from .handshake import Handshake

log = logging.getLogger("awp.operators")

OPERATOR = "operator"  # the admission policy
FIELD = "operator"  # auth.operator
LINE = "op-revoke"
META_CERT = "operator.cert"


class Operators(Extension):
    """The operator extension of one engine (also the engine's ``operators``)."""

    def __init__(self, engine: Engine, configured: list[str] | None = None) -> None:
        self.engine = engine
        # Trusted by config.json (``policy.operators``): not in the store, not removable here.
        self.configured = set(configured or [])
        self.trusted: dict[str, str] = {}
        self.revoked: dict[tuple[str, str], int] = {}
        self.cert: O.Cert | None = None
        self.certs: dict[str, O.Cert] = {}  # peer key -> the certificate it showed last
        self.loaded = trio.Event()
        self._field: list[dict] = []  # the revocations our auth carries
        self.taken = 0  # revocations taken that we did not hold (for tests and status)

    # -- state ------------------------------------------------------------------------

    async def load(self) -> None:
        def read(c: sqlite3.Connection):
            return (opstore.trusted(c), opstore.revoked(c), ops.get_meta(c, META_CERT) or "",
                    opstore.revocations(c, O.MAX_REVOCATIONS))
        self.trusted, self.revoked, cert, field = await self.engine.read(read)
        for key in self.configured:
            self.trusted.setdefault(key, "config")
        self.cert = None
        if cert:
            try:
                self.cert = O.check_cert(_json(cert))
            except (O.OperatorError, ValueError) as e:
                log.warning("our operator certificate is unusable: %s", e)
        self._field = [_json(t) for t in field]
        self.loaded.set()

    def is_revoked(self, cert: O.Cert) -> bool:
        """A revocation at or after the certificate's start cancels it."""
        ts = self.revoked.get((cert.op, cert.device))
        return ts is not None and ts >= cert.nbf_ms

    def verdict(self, key: str, now: int) -> str:
        """"" when ``key`` shows a live, unrevoked certificate of an operator we trust."""
        cert = self.certs.get(key)
        if cert is None:
            return "no operator certificate (accept: operator admits certified devices only)"
        if cert.op not in self.trusted:
            return f"its operator {cert.op} is not trusted here (awp trust)"
        if not cert.live(now):
            return (f"its operator certificate expired {format_ts(cert.exp_ms)}"
                    if now >= cert.exp_ms else "its operator certificate is not valid yet")
        if self.is_revoked(cert):
            return f"its operator {cert.op} revoked it"
        return ""

    def audiences(self, now: int) -> frozenset[str]:
        """Our operator, while our certificate is live: grants addressed to it count here."""
        cert = self.cert
        if cert is None or not cert.live(now) or self.is_revoked(cert):
            return frozenset()
        return frozenset({cert.op})

    # -- the handshake ----------------------------------------------------------------

    def bind(self, hs: Handshake) -> None:
        hs.operator = self.auth_field

    def auth_field(self, peer_hello: dict) -> dict | None:
        caps = peer_hello.get("caps")
        if not isinstance(caps, list) or O.CAP not in caps:
            return None
        out: dict = {}
        if self.cert is not None and self.cert.device == self.engine.identity.key:
            out["cert"] = self.cert.raw
        if self._field:
            out["revoked"] = self._field
        return out or None

    async def take(self, conn: Connection) -> None:
        """Read the peer's ``auth.operator``: its certificate and the revocations it holds."""
        await self.loaded.wait()
        field = getattr(conn.hs, "peer_auth", {}).get(FIELD)
        self.certs.pop(conn.peer_key, None)
        if not isinstance(field, dict):
            return
        try:
            cert = O.check_cert(field.get("cert")) if "cert" in field else None
        except O.OperatorError as e:
            log.info("operator certificate of %s ignored: %s", conn.peer_key[:18], e.detail)
            cert = None
        if cert is not None and cert.device == conn.peer_key:
            self.certs[conn.peer_key] = cert
        revoked = field.get("revoked")
        if isinstance(revoked, list):
            await self.take_revocations(revoked[:O.MAX_REVOCATIONS], conn)

    # -- revocations ------------------------------------------------------------------

    async def take_revocations(self, recs: list, source: Connection | None) -> int:
        """Check, keep and pass on revocations; how many were new to us."""
        checked = []
        for rec in recs:
            if self._held(rec):
                continue  # the usual case at a handshake: no signature check
            try:
                checked.append(O.check_revocation(rec))
            except O.OperatorError as e:
                who = source.peer_key[:18] if source is not None else "the local API"
                log.info("revocation from %s refused: %s", who, e.detail)
        if not checked:
            return 0
        now, bound = now_ms(), self.engine.config.limits.op_revocations
        verdicts = await self.engine.writer.run(lambda c: [
            opstore.take_revocation(c, r, now, bound) for r in checked])
        new = [r for r, v in zip(checked, verdicts, strict=True) if v == opstore.NEW]
        if opstore.FULL in verdicts:
            log.warning("revocations of untrusted operators over the bound (%d): not kept", bound)
        for r in new:
            self.revoked[(r.op, r.device)] = max(r.ts_ms, self.revoked.get((r.op, r.device), 0))
            self._field = [r.raw] + [x for x in self._field
                                     if (x.get("op"), x.get("device")) != (r.op, r.device)]
            del self._field[O.MAX_REVOCATIONS:]
            log.info("operator %s revoked %s", r.op[:18], r.device[:18])
        self.taken += len(new)
        if new:
            self.engine.changes.publish({"kind": "operator", "revoked": len(new)})
            await self._pass_on(new, source)
            await self._drop_revoked()
        return len(new)

    def _held(self, rec: object) -> bool:
        """We hold a revocation of this pair at least as new (checked before a signature)."""
        if not isinstance(rec, dict):
            return False
        held = self.revoked.get((rec.get("op"), rec.get("device")))  # type: ignore[arg-type]
        if held is None:
            return False
        try:
            return parse_ts(rec.get("ts")) <= held  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    async def _pass_on(self, new: list[O.Revocation], source: Connection | None) -> None:
        """One background send per link, so a stalled peer never holds up the others
        (or the reader of the link the revocation came on)."""
        for key in self.engine.peers.live_keys():
            conn = self.engine.peers.active(key)
            if conn is None or conn is source or O.CAP not in conn.peer_caps:
                continue
            self.engine.spawn(lambda conn=conn: self._send(conn, new))

    @staticmethod
    async def _send(conn: Connection, new: list[O.Revocation]) -> None:
        for r in new:
            try:
                await conn.send_raw_line(conn.session.line({"t": LINE, "rec": r.raw}))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    async def _drop_revoked(self) -> None:
        """Close links that only a certificate, now revoked, admitted."""
        cfg = self.engine.config
        if cfg.accept != OPERATOR:
            return
        now = now_ms()
        for key in self.engine.peers.live_keys():
            conn = self.engine.peers.active(key)
            if (conn is None or conn.outbound or key in cfg.allow or key not in self.certs
                    or not self.verdict(key, now).endswith("revoked it")):
                continue
            conn.close(f"its operator revoked {key}")

    # -- extension hooks --------------------------------------------------------------

    async def on_start(self) -> None:
        if not self.loaded.is_set():
            await self.load()

    async def admits(self, conn: Connection) -> bool:
        return not self.verdict(conn.peer_key, now_ms())

    async def on_established(self, conn: Connection, prev: dict) -> None:
        """Record the peer's certificate; show it our grants addressed to its operator."""
        cert = self.certs.get(conn.peer_key)
        text = cert.text if cert is not None else ""
        await self.engine.writer.run(lambda c: opstore.set_peer_cert(c, conn.peer_key, text))
        now = now_ms()
        if cert is None or not cert.live(now):
            return
        limit = self.engine.config.limits.present_count
        grants = await self.engine.read(
            lambda c: grantstore.held_for_audience(c, cert.op, now, limit))
        if grants:
            try:
                await conn.send_grants(grants)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    async def on_line(self, conn: Connection, line: dict, raw: bytes) -> bool:
        if line.get("t") != LINE:
            return False
        await self.take_revocations([line.get("rec")], conn)
        return True

    # -- the local API ----------------------------------------------------------------

    async def install(self, cert: O.Cert) -> None:
        """Carry ``cert`` from the next handshake on (it must name our key)."""
        await self.engine.writer.run(lambda c: ops.set_meta(c, META_CERT, cert.text))
        self.cert = cert

    async def set_trust(self, key: str, name: str, on: bool) -> bool:
        now = now_ms()
        if on:
            changed = await self.engine.writer.run(lambda c: opstore.trust(c, key, name, now))
            self.trusted[key] = name
        else:
            changed = await self.engine.writer.run(lambda c: opstore.untrust(c, key))
            if key not in self.configured:
                self.trusted.pop(key, None)
        await self._drop_revoked()
        return changed

    def summary(self, text: str, now: int) -> dict | None:
        """What ``awp peers`` says of a certificate a peer showed (stored verified)."""
        cert = _stored_cert(text) if text else None
        if cert is None:
            return None
        status = ("revoked" if self.is_revoked(cert) else "expired" if now >= cert.exp_ms
                  else "trusted" if cert.op in self.trusted else "not trusted here")
        return {"op": cert.op, "name": self.trusted.get(cert.op, ""), "device_name": cert.name,
                "exp": cert.raw["exp"], "status": status}

    def describe(self, now: int) -> dict:
        cert = self.cert
        return {
            "cert": cert.raw if cert else None,
            "cert_live": bool(cert and cert.live(now) and not self.is_revoked(cert)),
            "cert_revoked": bool(cert and self.is_revoked(cert)),
            "trusted": [{"key": k, "name": n} for k, n in self.trusted.items()],
            "revocations": len(self.revoked),
        }


@functools.lru_cache(maxsize=1024)
def _stored_cert(text: str) -> O.Cert | None:
    """A stored certificate, checked once per text: ``awp peers`` and the dashboard
    read every peer's at each refresh, and a signature check each time adds up."""
    try:
        return O.check_cert(_json(text))
    except (O.OperatorError, ValueError):
        return None


def _json(text: str) -> dict:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
