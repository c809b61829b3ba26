"""Our key and the peers' on the local API: ``awp key rotate`` and ``awp verify``.

``POST /v1/key/rotate`` moves the home to its committed next key
(awp/daemon/keyfile.py) and restarts the daemon in its own process under
it: every part that holds the key (the engine, presence, the board, the
web token) is rebuilt from the home, rather than patched live.  The answer
goes out first; the record is owed to every peer from the next start on.
``POST /v1/verify`` gives a peer's safety number and, with ``mark``, records
that the user compared it.
"""

from __future__ import annotations

from ..base.durations import MAX_SECONDS
from ..localapi.server import ApiError, Request, Router
from ..node.engine import Engine
from ..store import queries
from ..store import rotations as rotstore
from ..store.queries import LookupFailed
from ..wire import rotation as R
from ..wire.keys import KeyError_
from ..wire.timefmt import now_ms
from .app import DaemonState
from .autorotate import MIN_EVERY_S, Rotator


def add_key_routes(r: Router, engine: Engine, state: DaemonState, rotator: Rotator) -> None:

    @r.route("GET", "/v1/key")
    async def key_show(req: Request) -> dict:
        rot = engine.rotation
        owed = await engine.read(lambda c: sorted(rotstore.owed(c)))
        return {"key": engine.identity.key, "seq": rot.seq if rot else 0,
                "schedule": await rotator.plan(),
                "former_keys": [str(x.get("old")) for x in rot.chain] if rot else [],
                "next": rot.commit if rot else "", "owed_to": owed,
                "records": rot.chain if rot else []}

    @r.route("POST", "/v1/key/rotate")
    async def key_rotate(req: Request) -> dict:
        body = req.json() if req.body else {}
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_request")
        if "every" in body:  # a schedule, not a rotation now
            every = body["every"]
            if (isinstance(every, bool) or not isinstance(every, int | float)
                    or not (every == 0 or MIN_EVERY_S <= every <= MAX_SECONDS)):
                raise ApiError(400, f"every must be 0 (off) or {MIN_EVERY_S:g} to"
                               f" {MAX_SECONDS:.0f} seconds", "bad_request")
            return await rotator.schedule(float(every))
        if rotator.lock.locked() or state.restart:
            raise ApiError(409, "a rotation is already under way", "busy")
        async with rotator.lock:
            try:
                return await rotator.rotate()
            except OSError as e:
                raise ApiError(500, f"cannot rotate: {e}", "internal") from None

    @r.route("GET", "/v1/rotation/conflicts")
    async def rotation_conflicts(req: Request) -> dict:
        """Per identity (its current key), the pairs of records that rotated one key twice."""
        return await engine.read(rotstore.conflicts)

    @r.route("POST", "/v1/verify")
    async def verify(req: Request) -> dict:
        body = req.json() if req.body else {}
        if not isinstance(body, dict) or not isinstance(body.get("peer"), str):
            raise ApiError(400, "verify needs a peer", "bad_request")
        ref, mark = body["peer"], body.get("mark") is True

        def lookup(c):
            try:
                key = queries.resolve_peer(c, ref)
            except LookupFailed as e:
                raise ApiError(404, str(e), e.code) from None
            row = c.execute("SELECT name, verified, verified_at FROM peers WHERE key = ?",
                            (key,)).fetchone()
            if row is None:
                raise ApiError(404, f"no peer {ref}: see awp peers", "unknown_peer")
            return key, dict(row), rotstore.history(c, key)

        key, row, history = await engine.read(lookup)
        me = engine.identity.key
        number = R.safety_number(me, key)
        if mark:
            now = now_ms()
            await engine.writer.run(lambda c: rotstore.mark_verified(c, key, now))
            row["verified"], row["verified_at"] = key, now
        return {"key": key, "name": row["name"], "me": me, "safety": number,
                "short": R.safety_short(number), "verified": row["verified"],
                "verified_at": row["verified_at"], "marked": mark,
                "verified_key_current": row["verified"] == key, "rotated_from": history}


def add_keylink_routes(r: Router, engine: Engine) -> None:
    """Key links: ``awp key link`` (docs/identity.md, "Several keys, one identity")."""
    from ..store import keylinks as linkstore
    from ..wire import keylink as K

    links = engine.keylinks

    @r.route("GET", "/v1/key/links")
    async def key_links(req: Request) -> dict:
        return {"key": engine.identity.key, "links": await engine.read(linkstore.listing)}

    @r.route("POST", "/v1/key/link")
    async def key_link(req: Request) -> dict:
        """``with``: start a statement linking our key to those keys (signed by us);
        ``statement``: co-sign one and keep it once every key has signed."""
        body = req.json() if req.body else {}
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_request")
        try:
            if isinstance(body.get("statement"), dict):
                res = await links.install(body["statement"])
            elif isinstance(body.get("with"), list) and body["with"]:
                st = await links.start_link([str(k) for k in body["with"]])
                res = {"statement": st, "missing": K.missing(st)}
            else:
                raise ApiError(400, "key link needs with (keys) or statement", "bad_request")
        except (K.KeyLinkError, KeyError_) as e:
            raise ApiError(400, f"key link: {getattr(e, 'detail', e)}", "bad_keylink") from None
        return res
