"""Capability requests (exec, fs:read, fs:write) as they reach the engine.

Decided in the transaction that stores the request msg, so the decision and
the message are one fact: no grant -> marked and answered ``forbidden``;
granted and served -> a ``served`` row is written and the work starts after
the commit; granted but not served -> marked allowed for the agent to decide.
Every served request gets exactly one final result msg: the result is queued
in the same transaction that closes its ``served`` row, and rows still open at
start-up (the daemon died mid-run) are answered ``interrupted``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
from typing import TYPE_CHECKING

from ..serve import describe, serve_request
from ..serve import requests as rq
from ..serve.journal import interrupted_result
from ..store import grants as grantstore
from .extension import Extension

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.serve")
SERVABLE = frozenset({"exec", "fs:read", "fs:write"})


class Serving(Extension):
    """Engine extension: classify, refuse or perform capability requests."""

    def __init__(self, engine: Engine, serve: set[str], root: str) -> None:
        self.engine = engine
        self.serve = set(serve) & SERVABLE
        self.root = root
        self.scratch = os.path.join(os.path.dirname(engine.blobs_dir), "serve")
        # At most one progress msg per this many seconds while a command runs.
        self.progress_every = float(os.environ.get("AWP_SERVE_PROGRESS_EVERY") or 10.0)

    # -- writer thread -------------------------------------------------------------

    def stored_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, seq: int,
                       now: int) -> list:
        if line["t"] != "msg":
            return []
        found = rq.request_in(line.get("parts"))
        if found is None:
            return []
        cap, mime, data = found
        eng = self.engine
        caps = grantstore.honored_caps(c, conn.peer_key, eng.identity.key, eng.config.trust, now,
                                       eng.audiences())
        th = line.get("th") or ""
        if cap not in caps:
            status = "forbidden"
        elif cap in self.serve:
            status = "served"
            c.execute("INSERT OR IGNORE INTO served (peer, req_id, th, cap, status, started)"
                      " VALUES (?, ?, ?, ?, 'running', ?)",
                      (conn.peer_key, line["id"], th, cap, now))
        else:
            status = "allowed"
        c.execute("UPDATE log SET request = ? WHERE seq = ?",
                  (json.dumps({"cap": cap, "mime": mime, "status": status}), seq))
        if status == "forbidden":
            log.info("refused %s request %s from %s: no grant", cap, line["id"], conn.peer_key)
            return [{"t": "err", "code": "forbidden", "re": line["id"],
                     "detail": rq.forbidden_detail(mime, cap)}]
        if status == "served":
            key, ident = conn.peer_key, line["id"]
            return [lambda: self.perform(key, th, ident, cap, data)]
        return []

    # -- event loop -------------------------------------------------------------------

    async def perform(self, key: str, th: str, req_id: str, cap: str, data: object) -> None:
        """Run one granted request and queue its single result."""
        log.info("serving %s request %s from %s: %s", cap, req_id, key,
                 json.dumps(data, ensure_ascii=False)[:300])
        scratch = os.path.join(self.scratch, req_id)
        os.makedirs(scratch, mode=0o700, exist_ok=True)

        async def progress(text: str, pdata: dict) -> None:
            await self.engine.send_msg(key, [{"k": "text", "text": text},
                                             rq.progress_part(pdata)], th=th, re=req_id)

        try:
            result, blobs = await serve_request(
                cap, self.root, data, scratch_dir=scratch, on_progress=progress,
                progress_every=self.progress_every, max_blob=self.engine.config.blob_limit)
            files = [{"path": p, "name": n} for n, p in blobs]
            await self._answer(key, th, req_id, cap, describe(cap, data, result), result, files)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    async def _answer(self, key: str, th: str, req_id: str, cap: str, text: str, result: dict,
                      files: list[dict]) -> None:
        def close(c: sqlite3.Connection) -> None:
            c.execute("UPDATE served SET status = 'done' WHERE peer = ? AND req_id = ?",
                      (key, req_id))

        await self.engine.send_msg(key, [{"k": "text", "text": text},
                                         rq.result_part(cap, result)],
                                   th=th, re=req_id, files=files or None, also=close)
        log.info("served %s request %s from %s: %s", cap, req_id, key, text)

    async def on_start(self) -> None:
        """At start-up: requests left running by a daemon that died get their answer."""
        rows = await self.engine.read(lambda c: c.execute(
            "SELECT peer, req_id, th, cap FROM served WHERE status = 'running'").fetchall())
        for key, req_id, th, cap in rows:
            result = interrupted_result(cap)
            await self._answer(key, th, req_id, cap, f"{cap} interrupted: {result['error']}",
                               result, [])
