"""Local API of pair streams (docs/local-api.md, "Pair streams").

``POST /v1/pair`` and ``POST /v1/pair/accept`` answer ``101 Switching
Protocols`` (awp/localapi/upgrade.py) once the stream is up, and from then on
the local connection carries the stream's raw bytes, spliced by the daemon to
the side connection.  ``GET /v1/pair/{session}`` says how a session ended,
which the CLI asks after its connection closed (raw bytes have no room for
an error).
"""

from __future__ import annotations

import itertools

import trio

from ..localapi.server import ApiError, Request, Router
from ..localapi.upgrade import Upgrade
from ..node.engine import Engine
from ..node.pair import KEPT_OUTCOMES, Pair, PairRefused
from ..node.pair_splice import Outcome
from ..store import queries
from ..wire import pair as wire
from .api import _lookup, json_body

PROTOCOL = "awp-pair"

_STATUS = {"unsupported": 409, "unreachable": 502, "refused": 403, "quota": 429}


def add_pair_routes(router: Router, engine: Engine, pair: Pair) -> None:
    numbers = itertools.count(1)
    sessions: dict[str, tuple[Outcome | None, trio.Event]] = {}

    def begin() -> tuple[str, trio.Event]:
        number, event = str(next(numbers)), trio.Event()
        sessions[number] = (None, event)
        while len(sessions) > KEPT_OUTCOMES:
            sessions.pop(next(iter(sessions)))
        return number, event

    def finish(number: str, event: trio.Event, out: Outcome | None) -> None:
        if number in sessions:
            sessions[number] = (out, event)
        event.set()

    def text(body: dict, name: str) -> str:
        v = body.get(name, "")
        if not isinstance(v, str) or len(v) > 200:
            raise ApiError(400, f"{name} must be a string of at most 200 characters",
                           "bad_request")
        return v.strip()

    async def peer_key(ref: str) -> str:
        if not ref:
            raise ApiError(400, "name a peer", "bad_request")
        return await engine.read(lambda c: _lookup(lambda: queries.resolve_peer(c, ref)))

    @router.route("POST", "/v1/pair")
    async def open_pair(req: Request) -> Upgrade:
        body = json_body(req)
        ref, th = text(body, "peer"), text(body, "th")
        try:
            wire.check_request(wire.request("x", th))
        except wire.PairError as e:
            raise ApiError(400, str(e), "bad_request") from None

        async def ready():
            key = await peer_key(ref)
            ident = engine.ids.next()
            try:
                side = await pair.open(key, ident, th)
            except PairRefused as e:
                raise ApiError(_STATUS.get(e.code, 403), str(e), e.code) from None
            number, event = begin()

            async def run(stream, rest: bytes) -> None:
                if stream is None:
                    await side.aclose()
                    pair.abandon(key)
                    finish(number, event, None)
                    return
                out = None
                try:
                    out = await pair.run(key, ident, th, side, stream, rest,
                                         on_end=lambda o: finish(number, event, o))
                finally:
                    finish(number, event, out)

            return {"awp-pair-session": number, "awp-pair-id": ident, "awp-pair-peer": key}, run

        return Upgrade(PROTOCOL, ready)

    @router.route("POST", "/v1/pair/accept")
    async def accept_pair(req: Request) -> Upgrade:
        body = json_body(req)
        ref = text(body, "from")

        async def ready():
            from_key = await peer_key(ref) if ref else None
            inc = await pair.accept(from_key)
            number, event = begin()

            async def run(stream, rest: bytes) -> None:
                out = None
                try:
                    if stream is not None:
                        out = await pair.serve(inc, stream, rest)
                finally:
                    inc.done.set()
                    finish(number, event, out)

            return {"awp-pair-session": number, "awp-pair-id": inc.ident,
                    "awp-pair-peer": inc.key, "awp-pair-thread": inc.th}, run

        return Upgrade(PROTOCOL, ready)

    @router.route("GET", "/v1/pair")
    async def listing(req: Request) -> dict:
        return {"waiting": [{"from": w.from_key or ""} for w in pair.waiters],
                "held": [{"peer": h.key, "name": h.name, "id": h.ident, "th": h.th}
                         for h in pair.held],
                "streams": pair.running}

    @router.route("GET", "/v1/pair/{session}")
    async def outcome(req: Request) -> dict:
        number = req.params["session"]
        if number not in sessions:
            raise ApiError(404, f"no pair session {number[:20]} here", "not_found")
        try:
            wait = min(float(req.query.get("wait", "0")), 30.0)
        except ValueError:
            raise ApiError(400, "wait must be a number of seconds", "bad_request") from None
        with trio.move_on_after(wait):
            await sessions[number][1].wait()
        out, event = sessions.get(number, (None, trio.Event()))
        if out is None:
            return {"session": number, "done": event.is_set(), "error": ""
                    if not event.is_set() else "the stream did not start"}
        return {"session": number, **out.as_dict(), "done": event.is_set()}
