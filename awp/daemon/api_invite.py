"""Invites and multi-endpoint addresses on the local API (docs/local-api.md, "Invites").

``POST /v1/invite`` issues one, ``GET /v1/invites`` lists them (never a
secret: the store has none), ``POST /v1/invite/revoke`` revokes one.
:func:`connect_text` is what ``POST /v1/connect`` does with an ``awp:``
address or an ``awpinv:`` invite: reach the key they name at any of their
endpoints, proving the invite without sending its secret.  No message ever
repeats an invite text, which holds the secret.
"""

from __future__ import annotations

import trio

from ..base.durations import MAX_SECONDS
from ..localapi.server import ApiError, Request, Router
from ..node.dialer import DialFailed
from ..node.engine import Engine
from ..node.invites import MAX_USES, proof
from ..node.reach import connect_key, endpoints
from ..store import board as sb
from ..store.invites import TooManyInvites
from ..wire import board as wb
from ..wire.address import AddressError
from ..wire.grants import CAPABILITIES
from ..wire.invite import ID_RE, looks_like_invite, parse_invite
from ..wire.keys import short_key
from ..wire.multiaddr import looks_like_multi, parse_multi
from .app import DaemonState

DEFAULT_TTL_S = 24 * 3600.0  # an invite is redeemable this long
CAP_GRANT_TTL_S = 3600.0  # a capability an invite carries lasts this long (as awp grant)
TOPIC_GRANT_TTL_S = 30 * 86400.0  # topic rights it carries (as awp topic grant)


def is_key_text(text: str) -> bool:
    """An ``awp:`` address or an invite: a text that names the key to reach."""
    return looks_like_multi(text) or looks_like_invite(text)


async def connect_text(engine: Engine, text: str, timeout: float) -> dict:
    """Connect to the key an ``awp:`` address or invite names; the answer of /v1/connect."""
    try:
        if looks_like_invite(text):
            inv = parse_invite(text)
            key, addrs, extra = inv.key, list(inv.endpoints), proof(inv)
            label = f"{inv.name or 'the inviter'} (ed25519:{short_key(key)}...)"
        else:
            m = parse_multi(text)
            key, addrs, extra = m.key, list(m.endpoints), None
            label = f"ed25519:{short_key(key)}..."
    except AddressError as e:
        raise ApiError(400, str(e), "bad_address") from None
    try:
        with trio.fail_after(timeout):
            won, errors = await connect_key(engine, key, addrs, timeout=timeout,
                                            auth_extra=extra)
    except trio.TooSlowError:
        raise ApiError(504, f"timed out connecting to {label}", "timeout") from None
    except DialFailed as e:
        if e.refused:
            detail = e.refused.removeprefix("peer refused:").strip().removeprefix("auth").strip()
            raise ApiError(403, f"{label} refused the connection: {detail}", "refused",
                           ) from None
        raise ApiError(502, f"cannot reach {label}: {e}", "unreachable") from None
    return {"key": key, "already": won is None, "via": won.addr if won else "",
            "ms": round(won.ms, 1) if won else None, "unreached": errors}


def add_invite_routes(r: Router, engine: Engine, state: DaemonState) -> None:
    me = engine.identity.key

    def body_of(req: Request) -> dict:
        data = req.json() if req.body else {}
        if not isinstance(data, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_request")
        return data

    def number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
        v = body.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ApiError(400, f"{key} must be a number from {lo:g} to {hi:g}", "bad_request")
        return float(v)

    async def topic_right(body: dict) -> list[dict]:
        topic, can = body.get("topic"), body.get("can", "post")
        if topic is None:
            return []
        if can not in ("read", "post"):
            raise ApiError(400, "can is read or post", "bad_request")
        if not isinstance(topic, str) or not topic.strip():
            raise ApiError(400, "topic must be one of your topics' names", "bad_topic")
        name = topic.strip()
        if name.startswith((me + "/", "me/")):
            name = name.split("/", 1)[1]
        if "/" in name:
            raise ApiError(400, "an invite carries rights to your own topics only (NAME)",
                           "bad_topic")
        try:
            scope = wb.topic_id(me, name)
        except wb.BoardError as e:
            raise ApiError(400, f"topic {name!r}: {e}", "bad_topic") from None
        if not await engine.read(lambda c: sb.topic_doc(c, scope)):
            raise ApiError(404, f"you have no topic {name!r}: create it first"
                           f" (awp topic create {name})", "unknown_topic")
        ttl = number(body, "grant_ttl", TOPIC_GRANT_TTL_S, 1, MAX_SECONDS)
        return [{"topic": scope, "can": can, "ttl_ms": int(ttl * 1000)}]

    @r.route("POST", "/v1/invite")
    async def invite(req: Request) -> dict:
        body = body_of(req)
        uses = number(body, "uses", 1, 1, MAX_USES)
        if not float(uses).is_integer():
            raise ApiError(400, "uses must be a whole number", "bad_request")
        ttl = number(body, "ttl", DEFAULT_TTL_S, 1, MAX_SECONDS)
        caps = body.get("caps", [])
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise ApiError(400, "caps must be a list of capability names", "bad_request")
        bad = [c for c in caps if c not in CAPABILITIES]
        if bad:
            raise ApiError(400, f"unknown capability {bad[0]!r}: choose from "
                           + ", ".join(CAPABILITIES), "bad_request")
        topics = await topic_right(body)
        grant_ttl = number(body, "grant_ttl", CAP_GRANT_TTL_S, 1, MAX_SECONDS)
        found = endpoints(engine)
        try:
            text, row = await engine.invites.create(
                uses=int(uses), ttl_s=ttl, caps=list(dict.fromkeys(caps)), topics=topics,
                grant_ttl_s=grant_ttl, endpoints=found)
        except TooManyInvites as e:
            raise ApiError(409, str(e), "too_many_invites") from None
        except ValueError as e:
            raise ApiError(409, str(e), "no_address") from None
        risky = sorted(set(caps) & {"exec", "fs:write"})
        return {**row, "invite": text, "endpoints": found,
                "warning": (f"{' and '.join(risky)} let whoever redeems it run code on this"
                            " machine (remote code execution)" if risky else "")}

    @r.route("GET", "/v1/invites")
    async def invites(req: Request) -> list:
        return await engine.invites.listing()

    @r.route("POST", "/v1/invite/revoke")
    async def revoke(req: Request) -> dict:
        ident = body_of(req).get("id")
        if not isinstance(ident, str) or not ID_RE.fullmatch(ident.strip()):
            raise ApiError(400, "give the invite's id (inv_ and 12 characters, see"
                           " awp invite --list)", "bad_request")
        if not await engine.invites.revoke(ident.strip()):
            raise ApiError(404, f"no invite {ident.strip()} (see awp invite --list)",
                           "unknown_invite")
        return {"revoked": ident.strip()}
