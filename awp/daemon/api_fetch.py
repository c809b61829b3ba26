"""``POST /v1/fetch``: verified bytes of a bulk file a peer sent (docs/bulk.md).

The answer is the bytes themselves (``application/octet-stream``, chunked),
one verified piece at a time; the ``x-awp-*`` headers say which file and
which bytes.  Everything that can be refused (an unknown peer or file, a bad
range, a peer we cannot reach) is refused before the first byte, with a JSON
error; a break after that cuts the body short, which the client reports.
"""

from __future__ import annotations

from ..localapi.server import ApiError, Request, Router, Stream
from ..node import bulk_range
from ..node.engine import Engine
from ..store import queries
from ..store.queries import LookupFailed


def add_fetch_routes(r: Router, engine: Engine) -> None:

    @r.route("POST", "/v1/fetch")
    async def fetch(req: Request) -> Stream:
        body = req.json() if req.body else {}
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_request")
        peer, name, text = body.get("peer"), body.get("file"), body.get("range")
        if not isinstance(peer, str) or not peer.strip():
            raise ApiError(400, "fetch needs a peer", "bad_request")
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "fetch needs a file: its ref or root hash (awp blobs)",
                           "bad_request")
        if text is not None and not isinstance(text, str):
            raise ApiError(400, "range is a string: A-B, A- or -N", "bad_range")

        def who(c):
            try:
                return queries.resolve_peer(c, peer)
            except LookupFailed as e:
                status = 409 if e.code.startswith(("ambiguous", "lookalike")) else 404
                raise ApiError(status, str(e), e.code) from None

        key = await engine.read(who)
        try:
            plan = await bulk_range.plan(engine, key, name, text)
            side = await bulk_range.open_side(engine, key, plan)
        except bulk_range.RangeError as e:
            raise ApiError(e.status, str(e), "fetch_failed") from None
        headers = {"content-type": "application/octet-stream", **plan.header()}
        return Stream(lambda: bulk_range.stream(engine, key, plan, side), headers=headers)
