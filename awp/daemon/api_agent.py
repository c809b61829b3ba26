"""Local API routes for the agent side: activity, model and harness.

- ``POST /v1/activity`` — a hook says the agent just acted; it may carry the
  model the agent runs on and the harness it detected, and with
  ``"inbox": true`` it also answers the unread records, marked read (the
  hook's single round trip). ``GET /v1/activity`` reads the state back.
- ``GET /v1/model`` / ``POST /v1/model`` — ``awp model [ID]``.
- ``POST /v1/harness`` — ``awp mcp --harness`` telling a running daemon.

Activity is kept on the engine (``engine.activity``: ``at`` in Unix ms and
``source``) for presence and ``awp web``; "blocked in a wait" is
``engine.waiting > 0``, which ``/v1/wait`` (and so ``awp wait`` and
``awp_read`` with ``wait_seconds``) maintains. The local API calls an agent
makes when it acts (send, state, inbox, read, wait, ...) record activity
too: they are wrapped here, so ``api.py`` needs no change.

An explicit harness and any reported model are remembered in the store
(``remember.harness``, ``remember.model``), like ``awp daemon --harness``; a
detected harness is used only while nothing explicit or remembered is set,
and is never remembered.
"""

from __future__ import annotations

import logging
from typing import Any

from ..localapi.server import ApiError, Request, Router
from ..node.engine import Engine
from ..store import ops, queries
from ..wire.timefmt import now_ms
from .api import json_body as _body
from .app import DaemonState

log = logging.getLogger("awp.daemon")

#: Routes whose use is the agent acting (a dashboard reading is not).
ACTING_ROUTES = (
    ("POST", "/v1/send"), ("POST", "/v1/state"), ("POST", "/v1/inbox"),
    ("POST", "/v1/read"), ("POST", "/v1/wait"), ("POST", "/v1/connect"),
    ("POST", "/v1/bye"), ("POST", "/v1/alias"), ("POST", "/v1/grant"),
    ("POST", "/v1/revoke"), ("POST", "/v1/introduce"), ("POST", "/v1/private"),
    ("POST", "/v1/board/post"), ("POST", "/v1/board/get"), ("POST", "/v1/board/wait"),
    ("POST", "/v1/board/subscribe"), ("POST", "/v1/board/topic"),
    ("POST", "/v1/board/edit"), ("POST", "/v1/board/delete"), ("POST", "/v1/board/hide"),
    ("POST", "/v1/board/claim"), ("POST", "/v1/board/lease"),
)

MAX_MODEL = 200
MAX_SOURCE = 40


def _clean(value: object, what: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, f"{what} must be a string", "bad_request")
    v = value.strip()
    if len(v) > limit:
        raise ApiError(400, f"{what} is longer than {limit} characters", "bad_request")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in v):
        raise ApiError(400, f"{what} must not contain control characters", "bad_request")
    return v


def add_agent_routes(router: Router, engine: Engine, state: DaemonState) -> None:
    """Register the agent routes and make the acting routes record activity."""
    act: dict[str, Any] = getattr(engine, "activity", None) or {"at": 0, "source": ""}
    engine.activity = act
    settings = state.settings
    if settings.harness:
        act["harness_source"] = "set"  # explicit or remembered
    else:
        found = settings.harnesses.detected  # the caller that ran us detected it
        settings.harness = found
        act["harness_source"] = "detected" if found else ""

    def touch(source: str) -> None:
        act["at"] = now_ms()
        act["source"] = source

    def view() -> dict:
        return {
            "active": act.get("at") or None, "source": act.get("source", ""),
            "waiting": engine.waiting > 0, "waits": engine.waiting,
            "model": settings.model, "harness": settings.harness,
            "harness_source": act.get("harness_source", ""),
        }

    async def remember(key: str, value: str) -> None:
        await engine.writer.run(lambda c: ops.set_meta(c, "remember." + key, value))

    def changed(what: str) -> None:
        """Tell listeners (presence publishes soon after a change) that we changed."""
        engine.changes.publish({"kind": "agent", "what": what})

    async def set_model(model: str) -> bool:
        if not model or model == settings.model:
            return False
        settings.model = model
        engine.model = model  # presence reads engine.model before settings.model
        await remember("model", model)
        log.info("model is now %s", model)
        changed("model")
        return True

    async def set_harness(raw: object, explicit: bool) -> None:
        if raw is None or raw == "":
            return
        found = settings.harnesses.id_of(raw)
        if found is None:
            raise ApiError(400, f"unknown harness {raw!r}: choose from"
                                f" {', '.join(settings.harnesses.known)}",
                           "bad_request")
        if explicit:
            if found != settings.harness or act.get("harness_source") != "set":
                settings.harness = found
                act["harness_source"] = "set"
                await remember("harness", found)
                log.info("harness is now %s", found)
                changed("harness")
        elif act.get("harness_source") in ("", "detected") and found != settings.harness:
            settings.harness = found
            act["harness_source"] = "detected"
            changed("harness")

    @router.route("GET", "/v1/activity")
    async def get_activity(req: Request) -> dict:
        return view()

    @router.route("POST", "/v1/activity")
    async def post_activity(req: Request) -> dict:
        body = _body(req)
        source = _clean(body.get("source"), "source", MAX_SOURCE) or "hook"
        model = _clean(body.get("model"), "model", MAX_MODEL)
        await set_harness(body.get("harness"), bool(body.get("harness_explicit")))
        await set_model(model)
        touch(source)
        out = view()
        if body.get("inbox"):
            # The hook's one round trip: what /v1/inbox {"mark": true} answers, too.
            out["records"] = await take_unread()
        return out

    async def take_unread() -> list[dict]:
        records = await engine.read(lambda c: queries.unread(c))
        seqs = [x["seq"] for x in records if not x["read"] and x["dir"] != "out"]
        if seqs:
            await engine.writer.run(lambda c: ops.mark_read(c, seqs))
            for x in records:
                x["read"] = True
        return records

    @router.route("GET", "/v1/model")
    async def get_model(req: Request) -> dict:
        return {"model": settings.model, "harness": settings.harness}

    @router.route("POST", "/v1/model")
    async def post_model(req: Request) -> dict:
        body = _body(req)
        model = _clean(body.get("model"), "model", MAX_MODEL)
        if not model:
            raise ApiError(400, "name the model, e.g. awp model gpt-5.5", "bad_request")
        changed = await set_model(model)
        touch("model")
        return {"model": settings.model, "harness": settings.harness, "changed": changed}

    @router.route("POST", "/v1/harness")
    async def post_harness(req: Request) -> dict:
        body = _body(req)
        if not body.get("harness"):
            raise ApiError(400, "name the harness", "bad_request")
        await set_harness(body.get("harness"), body.get("explicit", True) is not False)
        return {"harness": settings.harness, "source": act.get("harness_source", "")}

    _wrap_acting(router, touch)


def _wrap_acting(router: Router, touch) -> None:
    """Make the routes in ``ACTING_ROUTES`` record activity before and after."""
    wanted = set(ACTING_ROUTES)
    for route in getattr(router, "_routes", []):
        key = (getattr(route, "method", ""), getattr(route, "pattern", ""))
        if key not in wanted or getattr(route.handler, "_awp_activity", False):
            continue
        inner = route.handler
        source = key[1].rsplit("/", 1)[-1]

        async def handler(req: Request, inner=inner, source=source) -> Any:
            touch(source)
            try:
                return await inner(req)
            finally:
                if source == "wait":
                    touch(source)  # a long wait ends: the agent acts again now

        handler._awp_activity = True  # type: ignore[attr-defined]
        handler._awp_inner = inner  # type: ignore[attr-defined]  # for reads that are not acts
        route.handler = handler
