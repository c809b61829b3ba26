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

from ..base.echo import echo
from ..localapi.server import ApiError, Request, Router
from ..node.engine import Engine
from ..store import queries
from ..wire.numbers import is_count
from ..wire.timefmt import now_ms
from .api import json_body as _body
from .app import DaemonState
from .facade import Door

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
#: Most records one /v1/activity answer carries for a hook, and their line bytes.
MAX_NEWEST = 500
MAX_NEWEST_BYTES = 4 << 20
#: Most record numbers (and board topics) one /v1/seen marks.
MAX_SEEN = 10_000


def _count(body: dict, key: str, default: int, most: int) -> int:
    v = body.get(key, default)
    if not is_count(v) or v < 1:
        raise ApiError(400, f"{key} must be a positive whole number", "bad_request")
    return min(v, most)


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
    act: dict[str, Any] = engine.activity
    door = Door(engine, state.parts)
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
        await door.remember(key, value)

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
            raise ApiError(400, f"unknown harness {echo(raw)}: choose from"
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
        if body.get("inbox") and body.get("mark", True) is False:
            # The hook's one round trip: the newest unread records, marked read
            # only when the hook confirms it printed them (POST /v1/seen).
            newest = _count(body, "newest", 50, MAX_NEWEST)
            size = _count(body, "bytes", 256 * 1024, MAX_NEWEST_BYTES)
            out["records"], out["unread_total"] = await door.read(
                lambda c: queries.unread_newest(c, newest, size))
        elif body.get("inbox"):
            # What /v1/inbox {"mark": true} answers, too (hooks before /v1/seen).
            out["records"] = await take_unread()
        return out

    @router.route("POST", "/v1/seen")
    async def seen(req: Request) -> dict:
        """Mark read what a hook printed: log records by seq, board topics up to a seq.

        The hook asks for records without marking them, prints them, then
        says here what it printed: a hook that gives up on a slow daemon
        marks nothing, so what it never showed stays unread (a duplicate is
        possible, a loss is not).
        """
        body = _body(req)
        seqs = body.get("seqs") or []
        upto = body.get("board") or {}
        if (not isinstance(seqs, list) or len(seqs) > MAX_SEEN
                or not all(is_count(s) for s in seqs)):
            raise ApiError(400, f"seqs must be a list of at most {MAX_SEEN} record numbers",
                           "bad_request")
        if (not isinstance(upto, dict) or len(upto) > MAX_SEEN
                or not all(isinstance(t, str) and is_count(n) for t, n in upto.items())):
            raise ApiError(400, "board must map topics to post numbers", "bad_request")

        marked = await door.mark_seen(seqs, upto) if seqs or upto else 0
        return {"marked": marked}

    async def take_unread() -> list[dict]:
        records = await engine.read(lambda c: queries.unread(c))
        seqs = [x["seq"] for x in records if not x["read"] and x["dir"] != "out"]
        if seqs:
            await door.mark_read(seqs)
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
