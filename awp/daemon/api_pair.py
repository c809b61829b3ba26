"""Local API of pair streams (docs/local-api.md, "Pair streams").

``POST /v1/pair`` and ``POST /v1/pair/accept`` answer ``101 Switching
Protocols`` (awp/localapi/upgrade.py) once the stream is up, and from then on
the local connection carries the stream's raw bytes, spliced by the daemon to
the side connection.  ``GET /v1/pair/{session}`` says how a session ended,
which the CLI asks after its connection closed (raw bytes have no room for
an error).
"""

from __future__ import annotations

import codecs
import itertools

import trio

from ..localapi.server import ApiError, Request, Router
from ..localapi.upgrade import Upgrade
from ..node.engine import Engine
from ..node.pair import KEPT_OUTCOMES, Pair, PairRefused
from ..node.pair_held import HeldEnd
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

    def target_of(body: dict) -> tuple[str, str]:
        """The peer reference and thread a stream is asked for (the thread checked)."""
        ref, th = text(body, "peer"), text(body, "th")
        try:
            wire.check_request(wire.request("x", th))
        except wire.PairError as e:
            raise ApiError(400, str(e), "bad_request") from None
        return ref, th

    @router.route("POST", "/v1/pair")
    async def open_pair(req: Request) -> Upgrade:
        body = json_body(req)
        ref, th = target_of(body)

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

    held: dict[str, tuple[HeldEnd, codecs.IncrementalDecoder]] = {}

    @router.route("POST", "/v1/pair/held")
    async def open_held(req: Request) -> dict:
        """A stream whose local end the daemon holds (the MCP tools)."""
        body = json_body(req)
        ref, th = target_of(body)
        key = await peer_key(ref)
        ident = engine.ids.next()
        try:
            side = await pair.open(key, ident, th)
        except PairRefused as e:
            raise ApiError(_STATUS.get(e.code, 403), str(e), e.code) from None
        number, event = begin()
        end = HeldEnd()
        held[number] = (end, codecs.getincrementaldecoder("utf-8")("replace"))
        while len(held) > KEPT_OUTCOMES:
            held.pop(next(iter(held)))[0].gone = True

        async def run() -> None:
            out = None
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(end.close_when_idle)
                    out = await pair.run(key, ident, th, side, end, b"",
                                         on_end=lambda o: finish(number, event, o))
                    nursery.cancel_scope.cancel()
            finally:
                finish(number, event, out)

        engine.spawn(run)
        return {"session": number, "id": ident, "peer": key}

    def held_end(req: Request) -> tuple[HeldEnd, codecs.IncrementalDecoder]:
        found = held.get(req.params["session"])
        if found is None:
            raise ApiError(404, f"no held pair session {req.params['session'][:20]} here",
                           "not_found")
        return found

    @router.route("POST", "/v1/pair/held/{session}/send")
    async def held_send(req: Request) -> dict:
        end, _ = held_end(req)
        data = json_body(req).get("text")
        if not isinstance(data, str):
            raise ApiError(400, "text must be a string", "bad_request")
        raw = data.encode("utf-8", "surrogatepass")
        with trio.move_on_after(30) as scope:
            try:
                await end.put(raw)
            except (trio.ClosedResourceError, trio.BrokenResourceError) as e:
                raise ApiError(409, f"cannot send: {e}", "closed") from None
        if scope.cancelled_caught:
            raise ApiError(408, "the peer has not taken what was sent before (30 s):"
                           " its reader is stalled", "stalled")
        return {"queued": len(raw)}

    @router.route("POST", "/v1/pair/held/{session}/recv")
    async def held_recv(req: Request) -> dict:
        end, decoder = held_end(req)
        body = json_body(req)
        most, wait = body.get("max_bytes", 65536), body.get("wait", 0)
        if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= 1 << 20:
            raise ApiError(400, "max_bytes must be 1 to 1048576", "bad_request")
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
            raise ApiError(400, "wait must be 0 to 60 seconds", "bad_request")
        data, ended = await end.take(most, float(wait))
        return {"text": decoder.decode(data, final=ended), "bytes": len(data), "ended": ended}

    @router.route("POST", "/v1/pair/held/{session}/close")
    async def held_close(req: Request) -> dict:
        end, _ = held_end(req)
        how = json_body(req).get("how", "all")
        if how == "mine":
            end.end_mine()
        elif how == "all":
            await end.aclose()
            held.pop(req.params["session"], None)
        else:
            raise ApiError(400, "how is mine (half-close) or all", "bad_request")
        return {"closed": how}

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
