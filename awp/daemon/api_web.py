"""Read-only local API routes behind ``awp web``.

``awp web`` is a separate process that never opens ``awp.db``: everything it
shows comes from these routes on the daemon's socket.

- ``GET /v1/web/state``: one snapshot with everything the dashboard's State
  is built from (this host, peers and their connections, presence documents,
  local threads, and the threads other agents share with this host).
- ``GET /v1/web/log?after=SEQ&mafter=ROWID&tail=N``: log records (every
  direction, notices included) and mirrored lines past two cursors, for the
  activity feed and live conversations. Reading never marks anything read.
- ``GET /v1/web/thread?peer=KEY&th=TH``: one conversation, local (``peer``
  is the other side) or shared with this host (``peer`` is the sharer).
- ``GET /v1/web/blob?peer=KEY&dir=in|out&ref=REF``: where a recorded file is.
- ``GET /v1/web/board``: every topic this host knows, as ``/v1/board/topics``.
- ``GET /v1/web/topic?topic=KEY/NAME&n=N``: one topic and its newest posts, as
  ``/v1/board/get`` gives them (``n`` up to 2000); for a work queue also
  ``queue``, its items as ``/v1/board/queue`` gives them.
- ``GET /v1/web/changes``: an NDJSON stream of the engine's change hints,
  with a ``tick`` every 15 s so a reader notices a dead daemon.

None of these count as the agent acting (they are not in
``api_agent.ACTING_ROUTES``), so watching never makes an agent look busy.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from typing import Any
from urllib.parse import urlencode

import trio

from .. import __version__
from ..localapi.server import ApiError, Request, Router, Stream
from ..node.engine import Engine
from ..store import queries, views
from ..store.board_seen import board_feed, board_hosts
from ..store.db import in_one_snapshot
from ..wire.address import AddressError, parse_address
from ..wire.keys import KEY_PREFIX
from ..wire.numbers import is_count
from ..wire.timefmt import now_ms
from .app import DaemonState

#: Presence documents older than this are gone (the engine forgets them too).
PRESENCE_MAX_AGE_MS = 10 * 60 * 1000

#: Most records one ``/v1/web/log`` call returns per source.
LOG_BATCH = 500

#: Most lines of one conversation ``/v1/web/thread`` returns (the newest).
THREAD_LINES = 2000

#: Most local threads in a state snapshot.
MAX_THREADS = 5000
MAX_BOARD_HOSTS = 500  # hosts seen only on the board, in one state snapshot

#: Posts of one topic ``/v1/web/topic`` returns by default, and at most (the newest).
TOPIC_POSTS = 500
MAX_TOPIC_POSTS = 2000

TICK_SECONDS = 15.0


def _transport(conn: Any) -> str:
    """``tailcat``, ``tcp`` or ``unix``: how a live connection travels."""
    if getattr(conn, "outbound", False) and getattr(conn, "dialed", ""):
        try:
            return parse_address(conn.dialed).kind
        except (AddressError, ValueError):
            pass
    desc = getattr(conn, "desc", "") or ""
    word = desc.split(" ", 1)[0]
    if word == "out":
        word = desc.split(" ", 2)[1] if desc.count(" ") else ""
        try:
            return parse_address(word).kind
        except (AddressError, ValueError):
            return ""
    return word if word in ("tailcat", "tcp", "unix") else ""


def _publishes(state: DaemonState) -> bool:
    presence = state.parts.presence
    return presence.publish if presence is not None else state.settings.presence


def _strip_paths(records: list[dict]) -> list[dict]:
    """Records without local file paths (the web process asks for a blob by ref)."""
    for rec in records:
        for f in rec.get("files") or []:
            f["available"] = bool(f.get("path")) and (
                rec.get("dir") == "out" or f.get("status") == "complete")
            f.pop("path", None)
        if rec.get("t") == "notice" and isinstance(rec.get("line"), dict):
            data = rec["line"].get("data")
            if isinstance(data, dict):
                data.pop("path", None)
    return records


def _without_file_data(posts: list[dict]) -> list[dict]:
    """Posts whose file parts keep their name, type and size but not the bytes.

    A post carries its files inside it (base64, up to the topic's ``max_post``);
    the dashboard names them and does not serve them, so 2000 posts never
    make a 100 MB answer.
    """
    for p in posts:
        for part in p.get("parts") or []:
            if isinstance(part, dict) and part.get("k") == "file":
                part.pop("data", None)
    return posts


def add_web_routes(router: Router, engine: Engine, state: DaemonState) -> None:
    me = engine.identity.key

    def _topic_label(c: sqlite3.Connection, topic: str) -> str:
        """``alice/jobs``: the topic as the CLI writes it (our own under our name)."""
        owner, _, name = topic.partition("/")
        who = (engine.config.name or "me") if owner == me else queries.owner_label(c, owner)
        return f"{who}/{name}"

    """Register the read-only ``/v1/web/*`` routes."""

    def _key(req: Request, name: str = "peer") -> str:
        value = (req.query.get(name) or "").strip()
        if not value.startswith(KEY_PREFIX) or len(value) > 100:
            raise ApiError(400, f"{name} must be a key (ed25519:...)", "bad_request")
        return value

    def _int(req: Request, name: str, default: int) -> int:
        raw = req.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            v = int(raw)
        except ValueError:
            raise ApiError(400, f"{name} must be a whole number", "bad_request") from None
        if not is_count(v):
            raise ApiError(400, f"{name} must be from 0 to 2**63 - 1", "bad_request")
        return v

    @router.route("GET", "/v1/web/state")
    async def web_state(req: Request) -> dict:
        now = now_ms()

        def q(c: sqlite3.Connection) -> dict:
            cutoff = now - PRESENCE_MAX_AGE_MS
            presence = views.presence_docs(c, cutoff)
            seen = board_hosts(c, engine.identity.key, MAX_BOARD_HOSTS)
            for h in seen:
                h["topics"] = [{"id": t, "label": _topic_label(c, t)} for t in h["topics"]]
            return {
                "counts": queries.counts(c),
                "peers": queries.peer_rows(c),
                "threads": queries.thread_rows(c, limit=MAX_THREADS),
                "presence": presence,
                "mirrors": views.mirror_summary(c),
                "board_hosts": seen,
            }

        snap = await engine.read(q)
        s = state.settings
        act = engine.activity
        for p in snap["peers"]:
            conn = engine.peers.active(p["key"])
            up = conn is not None and conn.established.is_set()
            slot = engine.peers.slots.get(p["key"])
            p["up"] = up
            p["outbound"] = bool(conn.outbound) if up else None
            p["transport"] = _transport(conn) if up else ""
            p["rtt_ms"] = round(conn.rtt_ms, 2) if up and conn.rtt_ms is not None else None
            p["reconnecting"] = bool(slot and slot.loop_running and not up)
            failing = slot.last_error if slot is not None else ""
            p["unreachable"] = "" if up else (failing or "")
            p.pop("addresses", None)  # addresses never leave through the dashboard
            ops_ = engine.operators
            p["operator"] = ops_.summary(p.pop("opcert", ""), now) if ops_ is not None else None
        tailcat_error = next((v for k, v in state.listen_errors.items()
                              if k.strip().lower() == "tailcat"), "")
        from .api import _share_address

        snap["now"] = now
        snap["self"] = {
            "key": engine.identity.key, "name": engine.config.name,
            "about": engine.config.about, "version": __version__,
            "harness": s.harness, "model": s.model, "host": socket.gethostname(),
            "presence": _publishes(state),
            "address": _share_address(engine),
            "listeners": [str(a) for a in engine.listen_addrs],
            "listen_errors": dict(state.listen_errors), "tailcat_error": tailcat_error,
            "active": int(act.get("at") or 0), "waiting": engine.waiting > 0,
            "shares": list(engine.shares or []), "started": state.started_ms,
            "pid": os.getpid(),
        }
        return snap

    @router.route("GET", "/v1/web/log")
    async def web_log(req: Request) -> dict:
        after = req.query.get("after")
        mafter = req.query.get("mafter")
        bafter = req.query.get("bafter")
        tail = min(_int(req, "tail", 0), LOG_BATCH)
        limit = min(_int(req, "limit", LOG_BATCH) or LOG_BATCH, LOG_BATCH)

        def q(c: sqlite3.Connection) -> dict:
            log_max = queries.max_seq(c)
            mirror_max = views.mirror_max(c)
            if after is None or after == "":
                records = views.log_records(c, after=None, limit=tail)
            else:
                records = views.log_records(c, after=int(after), limit=limit)
            if mafter is None or mafter == "":
                mirrors = views.mirror_rows_newest(c, tail) if tail else []
            else:
                mirrors = views.mirror_rows_after(c, int(mafter), limit)
            # the board's posts and queue changes, with their topics' labels
            board_max = c.execute("SELECT coalesce(max(seq), 0) FROM board_records").fetchone()[0]
            if bafter is None or bafter == "":
                board = board_feed(c, after=None, limit=tail) if tail else []
            else:
                board = board_feed(c, after=int(bafter), limit=limit)
            for r in board:
                r["label"] = _topic_label(c, r["topic"])
            pairs = {(r["peer"], r["th"]) for r in records if r["th"]}
            return {"records": _strip_paths(records), "mirrors": mirrors,
                    "subjects": views.subjects(c, pairs), "log_max": log_max,
                    "mirror_max": mirror_max, "board": board, "board_max": board_max}

        if after not in (None, ""):
            _int(req, "after", 0)
        if mafter not in (None, ""):
            _int(req, "mafter", 0)
        if bafter not in (None, ""):
            _int(req, "bafter", 0)
        # One snapshot: a record committed between reading the rows and the
        # maxima would come with a log_max below it, which the hub takes for a
        # replaced store, so it would read and show that record again.
        return await engine.read(lambda c: in_one_snapshot(c, q))

    @router.route("GET", "/v1/web/thread")
    async def web_thread(req: Request) -> dict:
        peer = _key(req)
        th = (req.query.get("th") or "").strip()
        if not th or len(th) > 200:
            raise ApiError(400, "th is required", "bad_request")

        def q(c: sqlite3.Connection) -> dict | None:
            mine = views.local_thread(c, peer, th, THREAD_LINES)
            if mine is not None:
                records = _strip_paths(mine.pop("records"))
                return {"kind": "local", "peer": peer, "th": th, **mine, "records": records}
            lines = views.mirror_rows_of(c, peer, th, THREAD_LINES)
            if not lines:
                return None
            first = lines[-1]
            return {"kind": "shared", "peer": peer, "sharer": peer, "th": th,
                    "of": first["of"], "of_name": first["of_name"],
                    "subject": next((x["subject"] for x in lines if x["subject"]), ""),
                    "lines": lines}

        found = await engine.read(q)
        if found is None:
            raise ApiError(404, "no such conversation here: it is private to the two agents",
                           "not_found")
        found["self"] = engine.identity.key
        return found

    @router.route("GET", "/v1/web/blob")
    async def web_blob(req: Request) -> dict:
        peer = _key(req)
        direction = req.query.get("dir") or ""
        ref = req.query.get("ref") or ""
        if direction not in ("in", "out"):
            raise ApiError(400, "dir must be in or out", "bad_request")
        if not ref or len(ref) > 200:
            raise ApiError(400, "ref is required", "bad_request")
        row = await engine.read(lambda c: views.blob_row(c, peer, direction, ref))
        if row is None or not row["path"] or (direction == "in" and row["status"] != "complete"):
            raise ApiError(404, "no such file here", "not_found")
        path = os.path.realpath(row["path"])
        blobs_dir = os.path.realpath(engine.blobs_dir)
        if not path.startswith(blobs_dir + os.sep):
            raise ApiError(404, "no such file here", "not_found")
        return {"peer": peer, "dir": direction, "ref": ref, "name": row["name"],
                "mime": row["mime"], "size": row["size"], "status": row["status"],
                "path": path}

    # -- the board ---------------------------------------------------------------------
    #
    # The board's own routes (api_board.py) shape topics and posts; the dashboard
    # asks them, through the router, rather than shaping them a second time. Both
    # are reads: neither marks anything read, and neither is an acting route.

    async def _board(method: str, path: str, body: dict | None = None,
                     query: dict[str, str] | None = None) -> Any:
        try:
            handler, params = router.resolve(method, path)
        except ApiError:
            raise ApiError(404, "this daemon has no board", "not_found") from None
        target = f"{path}?{urlencode(query)}" if query else path
        inner = Request(method, target, {}, json.dumps(body).encode() if body else b"")
        inner.params = params
        # the route itself, not the wrapper that counts an agent's acts
        return await getattr(handler, "_awp_inner", handler)(inner)

    @router.route("GET", "/v1/web/board")
    async def web_board(req: Request) -> dict:
        found = await _board("GET", "/v1/board/topics")
        return {"topics": found.get("topics") or [], "self": engine.identity.key}

    @router.route("GET", "/v1/web/topic")
    async def web_topic(req: Request) -> dict:
        topic = (req.query.get("topic") or "").strip()
        owner, _, name = topic.partition("/")
        if not owner.startswith(KEY_PREFIX) or len(owner) > 100 or not name or len(name) > 200:
            raise ApiError(400, "topic must be a topic id (ed25519:...KEY/NAME)", "bad_request")
        n = min(_int(req, "n", TOPIC_POSTS) or TOPIC_POSTS, MAX_TOPIC_POSTS)
        found = await _board("POST", "/v1/board/get", {"topic": topic, "n": n})
        t = found.get("topic") or {}
        if not (t.get("known") or t.get("subscribed") or t.get("records")):
            raise ApiError(404, "no such topic here", "not_found")
        answer = {"topic": t, "posts": _without_file_data(found.get("posts") or []),
                  "self": engine.identity.key}
        if (t.get("policy") or {}).get("queue"):
            # a work queue: each item's state, holder and lease too (the queue view)
            q = await _board("GET", "/v1/board/queue", None, {"topic": topic})
            items = q.get("items") or []
            for e in items:
                e["item"] = _without_file_data([e.get("item") or {}])[0]
            answer["queue"] = {"items": items, "arbiter": q.get("arbiter") is True,
                               "workers": q.get("workers") or []}
        return answer

    @router.route("GET", "/v1/web/changes")
    async def web_changes(req: Request) -> Stream:
        async def gen() -> Any:
            # Subscribed before the first line goes out, so nothing after it is missed.
            with engine.changes.subscribe(buffer=1024) as changes:
                yield {"kind": "hello", "self": engine.identity.key}
                while True:
                    with trio.move_on_after(TICK_SECONDS):
                        ev = await changes.receive()
                        yield {k: v for k, v in ev.items() if isinstance(
                            v, str | int | float | bool | type(None) | list)}
                        continue
                    yield {"kind": "tick"}

        return Stream(gen)
