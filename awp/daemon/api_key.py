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

import trio

from ..localapi.server import ApiError, Request, Router
from ..node.engine import Engine
from ..store import queries
from ..store import rotations as rotstore
from ..store.queries import LookupFailed
from ..wire import rotation as R
from ..wire.timefmt import now_ms
from .app import DaemonState
from .keyfile import rotate_identity


def add_key_routes(r: Router, engine: Engine, state: DaemonState) -> None:
    rotating = trio.Lock()

    @r.route("GET", "/v1/key")
    async def key_show(req: Request) -> dict:
        rot = engine.rotation
        owed = await engine.read(lambda c: sorted(rotstore.owed(c)))
        return {"key": engine.identity.key, "seq": rot.seq if rot else 0,
                "former_keys": [str(x.get("old")) for x in rot.chain] if rot else [],
                "next": rot.commit if rot else "", "owed_to": owed,
                "records": rot.chain if rot else []}

    @r.route("POST", "/v1/key/rotate")
    async def key_rotate(req: Request) -> dict:
        if rotating.locked() or state.restart:
            raise ApiError(409, "a rotation is already under way", "busy")
        async with rotating:
            old = engine.identity.key
            try:
                rec, _ = await trio.to_thread.run_sync(rotate_identity, state.home, now_ms())
            except Exception as e:
                raise ApiError(500, f"cannot rotate: {e}", "internal") from None
            peers = await engine.read(lambda c: c.execute(
                "SELECT count(*) FROM peers WHERE key != ?", (old,)).fetchone()[0])
            state.restart = True
            state.stop.set()  # the answer is written before the loop winds down
            return {"old": old, "new": rec["new"], "seq": rec["seq"], "record": rec,
                    "peers": peers, "restarting": True}

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
