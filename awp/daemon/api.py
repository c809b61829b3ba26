"""The local API on ``awp.sock``: every CLI verb as an HTTP endpoint.

Handlers translate between JSON and the engine; protocol rules stay in the
engine, and rendering for humans stays in the CLI.

Why one module: it is one table, the endpoints of the CLI's verbs, read
against docs/local-api.md; its handlers share closures over the engine
(resolving a peer reference, waiting for an ack) that ``build_router``
makes once.  The board's, the agent's and the dashboard's routes are
modules of their own (``api_board``, ``api_agent``, ``api_web``).  It splits
further when the routes call a typed daemon facade instead of the engine
(issue 21).
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

import trio

from .. import PROTOCOL_VERSION, __version__
from ..base.durations import MAX_SECONDS
from ..base.echo import echo
from ..localapi.server import ApiError, Request, Router, Stream
from ..node import bulk
from ..node.dialer import DialFailed, dial_key
from ..node.engine import DialError, Engine
from ..node.reach import endpoints
from ..store import blobs as blobstore
from ..store import bulk as bulkstore
from ..store import grants as grantstore
from ..store import keylinks as keylinkstore
from ..store import ops, queries
from ..store.blobs import BlobTooLarge
from ..store.queries import LookupFailed
from ..wire.address import AddressError, looks_like_address, parse_address
from ..wire.grants import CAPABILITIES
from ..wire.keys import KeyError_, normalize_key, short_key
from ..wire.multiaddr import format_multi
from ..wire.names import clean_name
from ..wire.timefmt import now_ms
from .api_invite import connect_text, is_key_text
from .app import DaemonState
from .facade import Door


def _lookup(fn):
    """Run a lookup, turning LookupFailed into a 404/409 API error."""
    try:
        return fn()
    except LookupFailed as e:
        status = (409 if e.code.startswith(("ambiguous", "lookalike"))
                  else 400 if e.code.startswith("bad") else 404)
        raise ApiError(status, str(e), e.code) from None


def json_body(req: Request) -> dict:
    """The request's JSON object (empty when there is no body)."""
    if not req.body:
        return {}
    data = req.json()
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", "bad_request")
    return data


_body = json_body


def _str(body: dict, key: str, default: str | None = None) -> str | None:
    v = body.get(key, default)
    if v is not None and not isinstance(v, str):
        raise ApiError(400, f"{key} must be a string", "bad_request")
    return v


def _num(body: dict, key: str, default: float) -> float:
    """A count or a number of seconds, at most 100 years' worth: past it, times in
    milliseconds stop being integers and counts overflow SQLite's."""
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_SECONDS:
        raise ApiError(400, f"{key} must be a number from 0 to {MAX_SECONDS:.0f}",
                       "bad_request")
    return float(v)


def peer_state(engine: Engine, key: str, parked: bool) -> str:
    conn = engine.peers.active(key)
    if conn is not None and conn.established.is_set():
        return "connected (out)" if conn.outbound else "connected (in)"
    if parked:
        return "said bye"
    slot = engine.peers.slots.get(key)
    if slot is not None and slot.loop_running:
        return "reconnecting"
    return "offline"


def build_router(engine: Engine, state: DaemonState) -> Router:
    r = Router()
    door = Door(engine, state.parts)

    async def connect_address(text: str, timeout: float) -> tuple[bool, str]:
        """Connect to an address; returns (already connected, peer key)."""
        try:
            addr = str(parse_address(text))
        except AddressError as e:
            raise ApiError(400, str(e), "bad_address") from None
        try:
            with trio.fail_after(timeout):
                conn, key = await engine.connect(addr, timeout)
        except trio.TooSlowError:
            raise ApiError(504, f"timed out connecting to {addr}", "timeout") from None
        except DialError as e:
            raise ApiError(502, f"cannot connect to {addr}: {e}", "unreachable") from None
        return conn is None, key

    async def resolve(ref: str, *, connect_timeout: float = 30.0,
                      introduced: bool = False) -> str:
        """A peer reference to a key; an address is connected to first."""
        if is_key_text(ref):
            return (await connect_text(engine, ref.strip(), connect_timeout))["key"]
        _check_address_form(ref)
        if looks_like_address(ref):
            return (await connect_address(ref, connect_timeout))[1]
        return await engine.read(lambda c: _lookup(
            lambda: queries.resolve_peer(c, ref, introduced=introduced)))

    @r.route("GET", "/v1/status")
    async def status(req: Request) -> dict:
        def q(c: sqlite3.Connection) -> tuple[dict, list[dict]]:
            return queries.counts(c), queries.peer_rows(c)

        counts, peers = await engine.read(q)
        s = state.settings
        presence = state.parts.presence
        peer_list = []
        for p in peers:
            conn = engine.peers.active(p["key"])
            peer_list.append({
                "key": p["key"], "name": p["name"], "aliases": p["aliases"],
                "state": peer_state(engine, p["key"], p["parked"]),
                "rtt_ms": round(conn.rtt_ms, 2) if conn and conn.rtt_ms is not None else None,
                "sealed": bool(conn.sealed) if conn else None,
                "queued": p["queued"], "unread": p["unread"],
            })
        tailcat_error = next((v for k, v in state.listen_errors.items()
                              if k.strip().lower() == "tailcat"), "")
        return {
            "version": __version__, "protocol": PROTOCOL_VERSION, "pid": os.getpid(),
            "home": state.home, "socket": state.socket_path, "key": engine.identity.key,
            "name": engine.config.name, "about": engine.config.about, "harness": s.harness,
            "model": s.model, "addresses": [str(a) for a in engine.listen_addrs],
            "address": _share_address(engine), "advertise": engine.advertised(),
            "reachable": reachable_addresses(engine),
            "multi_address": multi_address(engine),
            "listen": {"configured": list(s.listen), "source": s.listen_source},
            "listen_errors": state.listen_errors, "tailcat_error": tailcat_error,
            "started": state.started_ms, "policy": {"accept": s.accept, "serve": s.serve},
            "presence": {"publishing": s.presence,
                         "lines_sent": presence.sent_lines if presence else 0,
                         "signed": presence.signed if presence else 0,
                         "lines_by_peer": dict(presence.lines_to) if presence else {},
                         "origins": await engine.read(queries.presence_origins)},
            "shares": list(engine.shares or []),
            "board": board.status() if (board := state.parts.board) else None,
            "store": {"commits": engine.writer.commits,
                      "sent_before_commit": engine.writer.early_batches,
                      "inline": engine.writer.inline_batches,
                      "relaxed": engine.writer.relaxed_batches,
                      "written_first": engine.written_first,
                      "intake": engine.intake.status() if engine.intake else None},
            "budgets": engine.budgets.status(),
            "rotation": engine.rotation.status() if engine.rotation else None,
            **counts, "peers": peer_list,
        }

    @r.route("POST", "/v1/shutdown")
    async def shutdown(req: Request) -> dict:
        state.stop.set()
        return {"stopping": True, "pid": os.getpid()}

    @r.route("POST", "/v1/resolve")
    async def resolve_ep(req: Request) -> dict:
        body = _body(req)
        key = await resolve(_str(body, "peer") or "")
        name = await engine.read(lambda c: queries.peer_label(c, key))
        return {"key": key, "name": name}

    @r.route("POST", "/v1/connect")
    async def connect(req: Request) -> dict:
        body = _body(req)
        target = (_str(body, "target") or "").strip()
        timeout = _num(body, "timeout", 60.0)
        if not target:
            raise ApiError(400, "connect needs an address or a peer name", "bad_request")
        if ca := _str(body, "ca"):
            _trust_ca(state.home, ca)
        extra: dict = {}
        if not is_key_text(target):
            _check_address_form(target)
        if is_key_text(target):  # awp: or awpinv:, naming the key
            extra = await connect_text(engine, target, timeout)
            key, already = extra["key"], extra["already"]
        elif looks_like_address(target):
            already, key = await connect_address(target, timeout)
        else:
            key = await resolve(target, introduced=True)  # a name an introduction gave
            already = engine.peers.active(key) is not None
            await engine.business.unpark(key)  # connecting ends a bye
            if not already:
                addrs = await engine.dial_addresses(key)
                if not addrs:
                    raise ApiError(404, f"no known address for {target}; connect to its address",
                                   "no_address")
                try:
                    with trio.fail_after(timeout):
                        await dial_key(engine, key, [a for a, _src in addrs], timeout=timeout)
                except (DialFailed, trio.TooSlowError) as e:
                    engine.peers.ensure_loop(key)  # keep trying if there is business
                    raise ApiError(502, f"cannot reach {target}: {str(e) or 'timed out'}",
                                   "unreachable") from None
        name = await engine.read(lambda c: queries.peer_label(c, key))
        conn = engine.peers.active(key)
        return {**extra, "key": key, "name": name, "already": already,
                "state": peer_state(engine, key, False),
                "about": conn.hs.peer.get("about", "") if conn else ""}

    @r.route("GET", "/v1/peers")
    async def peers(req: Request) -> list:
        rows = await engine.read(queries.peer_rows)
        for p in rows:
            conn = engine.peers.active(p["key"])
            p["state"] = peer_state(engine, p["key"], p["parked"])
            p["rtt_ms"] = round(conn.rtt_ms, 2) if conn and conn.rtt_ms is not None else None
            p["sealed"] = bool(conn and conn.sealed) if conn else None
            slot = engine.peers.slots.get(p["key"])
            if slot and slot.last_error and not conn:
                p["last_error"] = slot.last_error
            if slot and slot.loop_running and slot.reason:
                p["kept_for"] = slot.reason  # the business it is redialled for
            p["budget"] = engine.budgets.peer(p["key"], conn)
        now = now_ms()
        for p in rows:  # the operator that certified it, from its last handshake
            ops_ = engine.operators
            p["operator"] = ops_.summary(p.pop("opcert", ""), now) if ops_ is not None else None
        also = engine.audiences()
        granted = await engine.read(lambda c: {p["key"]: sorted(grantstore.honored_caps(
            c, p["key"], engine.identity.key, engine.config.trust, now, also)) for p in rows})
        for p in rows:
            p["granted"] = granted.get(p["key"], [])
        linked = await engine.read(lambda c: {p["key"]: keylinkstore.identity_of(c, p["key"])
                                              for p in rows})
        for p in rows:  # the other keys of its identity (key links it showed us)
            p["linked"] = linked.get(p["key"], [])
        return rows

    @r.route("POST", "/v1/alias")
    async def alias(req: Request) -> dict:
        body = _body(req)
        name = (_str(body, "alias") or "").strip()
        if (not name or name.startswith("ed25519:") or looks_like_address(name)
                or name != clean_name(name) or " " in name):
            raise ApiError(400, "an alias is one word that is not a key or an address, without"
                           " control or invisible characters", "bad_request")
        key = await resolve(_str(body, "peer") or "")
        await door.set_alias(name, key)
        return {"alias": name, "key": key}

    async def _target(body: dict, how: str, starts: bool = False) -> tuple[str, str | None]:
        th = _str(body, "th")
        if th is not None and not th.strip():
            raise ApiError(400, "the thread id is empty", "bad_request")
        ref = _str(body, "peer")
        key = await resolve(ref) if ref else None
        if th and key is None:
            key = await engine.read(lambda c: _lookup(lambda: queries.thread_peer(
                c, th, how=how, starts=starts)))
        if key is None:
            raise ApiError(400, "name a peer (or a --thread to reply in)", "bad_request")
        return key, th

    async def _unread_note(key: str, th: str | None) -> str:
        if not th:
            return ""

        def q(c: sqlite3.Connection) -> tuple[int, int, str, str]:
            n, newest = queries.unread_in_thread(c, key, th)
            if not n:
                return 0, 0, "", ""
            return n, newest, queries.peer_label(c, key), queries.thread_ref(c, key, th)

        n, newest, label, ref = await engine.read(q)
        if not n:
            return ""
        from ..base.durations import format_duration

        ago = format_duration((now_ms() - newest) / 1000)
        return f"note: {n} unread from {label} in this thread ({ago} ago): awp read {ref}"

    @r.route("POST", "/v1/send")
    async def send(req: Request) -> dict:
        body = _body(req)
        key, th = await _target(body, "awp send {peer} --thread {th} ...", starts=True)
        parts = body.get("parts") or []
        files = _files(body)
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts) or not (
                parts or files):
            raise ApiError(400, "a message needs at least one part", "bad_request")
        note = await _unread_note(key, th)
        t0 = time.perf_counter()
        try:
            res = await engine.send_msg(key, parts, th=th, subject=_str(body, "subject"),
                                        re=_str(body, "re"), files=files)
        except (ops.LineTooLong, BlobTooLarge) as e:
            raise ApiError(413, str(e), "too_large") from None
        except sqlite3.Error as e:
            raise _store_error(e) from None
        except OSError as e:
            where = f"{e.filename}: " if getattr(e, "filename", None) else ""
            raise ApiError(400, f"{where}{e.strerror or e}", "bad_file") from None
        return await _delivery(key, res, body, note, t0)

    @r.route("POST", "/v1/state")
    async def set_state(req: Request) -> dict:
        body = _body(req)
        key, th = await _target(body, "awp state {peer} {th} STATE")
        word = (_str(body, "state") or "").strip()
        if word.lower() in ops.KNOWN_STATES:
            word = word.lower()  # "DONE" means done, not a new word the peer won't know
        if not th or not word:
            raise ApiError(400, "state needs a thread and a state word", "bad_request")
        note = await _unread_note(key, th)
        t0 = time.perf_counter()
        try:
            res = await engine.send_state(key, th, word, _str(body, "note") or "")
        except ops.LineTooLong as e:
            raise ApiError(413, str(e), "too_large") from None
        except sqlite3.Error as e:
            raise _store_error(e) from None
        return {**await _delivery(key, res, body, note, t0), "state": word}

    def _files(body: dict) -> list[dict]:
        files = body.get("files") or []
        if not isinstance(files, list):
            raise ApiError(400, "files must be a list", "bad_request")
        out = []
        for f in files:
            if isinstance(f, str):
                f = {"path": f}
            if not isinstance(f, dict) or not isinstance(f.get("path"), str):
                raise ApiError(400, "each file needs a path", "bad_request")
            if not os.path.isabs(f["path"]):
                raise ApiError(400, f"file path must be absolute: {f['path']}", "bad_file")
            out.append({k: f[k] for k in ("path", "name", "mime") if isinstance(f.get(k), str)})
        return out

    @r.route("POST", "/v1/grant")
    async def grant(req: Request) -> dict:
        body = _body(req)
        key = await resolve(_str(body, "peer") or "")
        caps = _caps(body)
        ttl = _num(body, "ttl", 3600.0)
        if ttl <= 0:
            raise ApiError(400, "ttl must be positive", "bad_request")
        aud = _str(body, "aud") or None
        if aud is not None:  # a host, or an operator: every device it certifies
            try:
                aud = normalize_key(aud)
            except KeyError_:
                aud = await resolve(aud)
        res = await engine.grant(key, caps, ttl, aud=aud)
        risky = sorted(set(caps) & {"exec", "fs:write"})
        res["warning"] = (f"{' and '.join(risky)} let the peer run code on this machine"
                          " (remote code execution); keep the ttl short" if risky else "")
        res["peer"] = key
        res["peer_name"] = await engine.read(lambda c: queries.peer_label(c, key))
        return res

    def _caps(body: dict) -> list[str]:
        caps = body.get("caps")
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise ApiError(400, "caps must be a list of capability names", "bad_request")
        bad = [c for c in caps if c not in CAPABILITIES]
        if bad:
            raise ApiError(400, f"unknown capability {echo(bad[0])}: choose from "
                           + ", ".join(CAPABILITIES), "bad_request")
        return list(dict.fromkeys(caps))

    @r.route("GET", "/v1/caps")
    async def caps(req: Request) -> dict:
        """What a peer may do here, by the grants we honor."""
        key = await resolve(req.query.get("peer") or "")
        return {"peer": key, "caps": sorted(await engine.read(lambda c: grantstore.honored_caps(
            c, key, engine.identity.key, engine.config.trust, now_ms(), engine.audiences())))}

    @r.route("GET", "/v1/grants")
    async def grants(req: Request) -> list:
        def q(c: sqlite3.Connection) -> list[dict]:
            rows = grantstore.listing(c, now_ms())
            labels: dict = {}
            for g in rows:
                for f in ("iss", "sub", "aud"):
                    k = g[f]
                    if k and k not in labels:
                        labels[k] = "you" if k == engine.identity.key else queries.peer_label(c, k)
                    g[f + "_name"] = labels.get(k, "")
            return rows

        return await engine.read(q)

    @r.route("POST", "/v1/revoke")
    async def revoke(req: Request) -> dict:
        prefix = (_str(_body(req), "hash") or "").strip().lower()
        if len(prefix) < 4 or any(ch not in "0123456789abcdef" for ch in prefix):
            raise ApiError(400, "give the grant's hash (at least 4 hex digits, see awp grants)",
                           "bad_request")
        hits = await door.revoke(prefix)
        if not hits:
            raise ApiError(404, f"no grant with hash {prefix} (see awp grants)", "unknown_grant")
        if len(hits) > 1:
            raise ApiError(409, f"hash prefix {prefix} matches {len(hits)} grants; give more digits",
                           "ambiguous_grant")
        return {"revoked": hits[0]}

    @r.route("POST", "/v1/introduce")
    async def introduce(req: Request) -> dict:
        body = _body(req)
        to = await resolve(_str(body, "to") or "")
        peer = await resolve(_str(body, "peer") or "")
        if to == peer:
            raise ApiError(400, "cannot introduce a peer to itself", "bad_request")
        caps = _caps(body) if body.get("caps") else []
        th = _str(body, "th")
        if th is not None and not th.strip():
            raise ApiError(400, "the thread id is empty", "bad_request")
        res = await engine.introduce(to, peer, caps, _num(body, "ttl", 3600.0), th=th)
        conn = engine.peers.active(to)
        res["status"] = "delivering" if conn else "queued until the peer is reachable"
        res["to"] = to
        return res

    @r.route("GET", "/v1/share")
    async def share_get(req: Request) -> dict:
        return await _shares()

    async def _shares() -> dict:
        keys = list(engine.shares or [])
        names = await engine.read(lambda c: [queries.peer_label(c, k) for k in keys])
        return {"hosts": [{"key": k, "name": n} for k, n in zip(keys, names, strict=True)]}

    @r.route("POST", "/v1/share")
    async def share_set(req: Request) -> dict:
        body = _body(req)
        if body.get("stop"):
            await engine.set_shares([])
            return await _shares()
        hosts = body.get("hosts")
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            raise ApiError(400, "give the hosts to share with (names, aliases or keys)",
                           "bad_request")
        keys = []
        for h in hosts:
            if h.startswith("ed25519:"):
                try:
                    keys.append(normalize_key(h))
                except KeyError_ as e:
                    raise ApiError(400, f"bad key {h}: {e}", "bad_request") from None
            else:
                keys.append(await resolve(h))
        if engine.identity.key in keys:
            raise ApiError(400, "cannot share with yourself", "bad_request")
        await engine.set_shares(keys)
        return await _shares()

    @r.route("POST", "/v1/private")
    async def private(req: Request) -> dict:
        body = _body(req)
        key, th = await _target(body, "awp private {peer} {th}")
        if not th:
            raise ApiError(400, "private needs a thread", "bad_request")
        await engine.private(key, th)
        return {"th": th, "peer": key, "private": True}

    @r.route("GET", "/v1/blobs")
    async def blobs(req: Request) -> list:
        key = await resolve(req.query["peer"]) if req.query.get("peer") else None

        def q(c: sqlite3.Connection) -> list[dict]:
            rows = blobstore.blob_rows(c, key)
            labels: dict = {}
            for b in rows:
                if b["peer"] not in labels:
                    labels[b["peer"]] = queries.peer_label(c, b["peer"])
                b["peer_name"] = labels[b["peer"]]
            return bulk.annotate(getattr(engine, "bulk", None), c, rows)

        return await engine.read(q)

    @r.route("POST", "/v1/blobs/verify")
    async def blobs_verify(req: Request) -> list:
        """Recheck received bulk files on disk; damaged pieces are fetched again."""
        body = _body(req)
        key = await resolve(body["peer"]) if body.get("peer") else None
        ext = getattr(engine, "bulk", None)
        files = await engine.read(lambda c: bulkstore.verifiable(c, key))
        return [await ext.verify(p, ref) for p, ref in files] if ext is not None else []

    async def _delivery(key: str, res: dict, body: dict, note: str, t0: float) -> dict:
        """Wait for the ack as asked; ``ack_ms`` is queue-to-ack time inside the daemon."""
        conn = engine.peers.active(key)
        connected = conn is not None and conn.established.is_set()
        wait = body.get("wait_ack")
        wait_s = _num(body, "wait_ack", 1.0) if wait is not None else (1.0 if connected else 0.0)
        acked = False
        ack_ms = None
        if wait_s > 0 and (connected or wait is not None):
            acked = await engine.wait_ack(res["id"], wait_s, key)
            if acked:
                ack_ms = round((time.perf_counter() - t0) * 1000, 3)
        if not acked:  # queued, not delivered: our own record of it is durable first
            await engine.writer.synced()
        status = "delivered" if acked else ("delivering" if connected or engine.peers.active(key)
                                            else "queued until the peer is reachable")
        name = await engine.read(lambda c: queries.peer_label(c, key))
        return {"id": res["id"], "th": res["th"], "thread": res["th"], "peer": key,
                "peer_name": name, "status": status, "acked": acked, "ack_ms": ack_ms,
                "queued_ns": int(t0 * 1e9), "note": note}

    @r.route("GET", "/v1/timings")
    async def timings(req: Request) -> dict:
        """Diagnostics for benches: when recent inbound lines were committed."""
        return {"clock": "CLOCK_MONOTONIC ns", "committed": dict(engine.commit_stamps)}

    @r.route("POST", "/v1/wait_ack")
    async def wait_ack(req: Request) -> dict:
        body = _body(req)
        ident = _str(body, "id") or ""
        return {"id": ident, "acked": await engine.wait_ack(ident, _num(body, "timeout", 30))}

    async def _scope(body: dict) -> tuple[str | None, str | None]:
        ref = _str(body, "peer")
        key = await resolve(ref) if ref else None
        th = _str(body, "th")
        if th is not None and not th.strip():
            raise ApiError(400, "the thread id is empty", "bad_request")
        return key, th

    def _bind(c: sqlite3.Connection, key: str | None, th: str | None, how: str) -> str | None:
        """The peer a thread filter means (with ``c`` held): a thread is (peer, id).

        A bare id used by several peers is refused rather than merged; an id
        nobody used with us (with that peer, when one is named) is
        ``unknown_thread``, as for send and state: a typo must not read as an
        empty thread or a wait that never ends.
        """
        if not th:
            return key
        users = queries.thread_peers(c, th)
        if key:
            if key not in users:
                raise ApiError(404, str(queries.unknown_thread(th)), "unknown_thread")
            return key
        if not users:
            raise ApiError(404, str(queries.unknown_thread(th)), "unknown_thread")
        return _lookup(lambda: queries.scope_thread(c, th, None, how))

    async def _mark(records: list[dict]) -> None:
        seqs = [x["seq"] for x in records if not x["read"] and x["dir"] != "out"]
        if seqs:
            await door.mark_read(seqs)
            for x in records:
                if x["seq"] in seqs:
                    x["read"] = True

    @r.route("POST", "/v1/read")
    async def read(req: Request) -> dict:
        body = _body(req)
        key, th = await _scope(body)
        n = int(_num(body, "n", 50))

        def q(c: sqlite3.Connection) -> list[dict]:
            bound = _bind(c, key, th, "awp read {th} -p {peer}")
            if th and bound is None:
                return []
            return queries.read_log(c, peer=bound, th=th, last=n)

        records = await engine.read(q)
        was_unread = [x["seq"] for x in records if not x["read"] and x["dir"] != "out"]
        if body.get("mark", True):
            await _mark(records)
        return {"records": records, "marked": len(was_unread) if body.get("mark", True) else 0}

    @r.route("POST", "/v1/inbox")
    async def inbox(req: Request) -> dict:
        body = _body(req)
        key, th = await _scope(body)

        def q(c: sqlite3.Connection) -> list[dict]:
            bound = _bind(c, key, th, "awp tail --once -t {th} -p {peer}")
            if th and bound is None:
                return []
            return queries.unread(c, peer=bound, th=th)

        records = await engine.read(q)
        if body.get("mark", True):
            await _mark(records)
        return {"records": records}

    @r.route("POST", "/v1/wait")
    async def wait(req: Request) -> dict:
        body = _body(req)
        key, th = await _scope(body)
        timeout = _num(body, "timeout", 300.0)
        # "mark": false leaves marking to the caller (the MCP server marks with
        # POST /v1/seen what it has written to its client)
        mark = body.get("mark", True) is not False
        states = body.get("states") or []
        if not isinstance(states, list) or not all(isinstance(s, str) for s in states):
            raise ApiError(400, "states must be a list of words", "bad_request")
        if states and not th:
            raise ApiError(400, "--state needs --thread", "bad_request")
        how = "awp wait -t {th} -p {peer}"
        if states and key is None:
            key = await engine.read(lambda c: _lookup(lambda: queries.thread_peer(c, th,
                                                                                  how=how)))
        elif th:
            bound_key = key
            key = await engine.read(lambda c: _bind(c, bound_key, th, how))

        def their_state(c: sqlite3.Connection) -> str | None:
            return queries.their_state(c, key, th)

        def pending(c: sqlite3.Connection) -> tuple[str | None, list[dict]]:
            """Unread records in scope (a thread is bound to its peer by now)."""
            return key, queries.unread(c, peer=key, th=th)

        engine.waiting += 1
        try:
            with engine.changes.subscribe() as events, trio.move_on_after(timeout):
                while True:
                    key, records = await engine.read(pending)
                    theirs = await engine.read(their_state) if states else None
                    matched = bool(states) and theirs in states
                    content = [x for x in records if x["dir"] == "in"]
                    if matched or content:
                        if mark:
                            await _mark(records)
                        return {"records": records, "matched": matched, "state": theirs,
                                "timed_out": False, **({"peer": key} if th else {})}
                    await events.receive()
        finally:
            engine.waiting -= 1
        key, records = await engine.read(pending)
        notices = [x for x in records if x["dir"] == "notice"]
        if mark:
            await _mark(notices)
        theirs = await engine.read(their_state) if states else None
        return {"records": notices, "matched": False, "state": theirs, "timed_out": True,
                **({"peer": key} if th else {})}

    @r.route("GET", "/v1/threads")
    async def threads(req: Request) -> list | dict:
        key = await resolve(req.query["peer"]) if req.query.get("peer") else None
        open_only = req.query.get("open") in ("1", "true")
        if req.query.get("compact") in ("1", "true"):
            rows = await engine.read(lambda c: queries.thread_table(c, peer=key,
                                                                   open_only=open_only))
            return {"columns": list(queries.TABLE_COLUMNS), "rows": rows}
        return await engine.read(lambda c: queries.thread_rows(c, peer=key, open_only=open_only))

    @r.route("POST", "/v1/bye")
    async def bye(req: Request) -> dict:
        body = _body(req)
        key = await resolve(_str(body, "peer") or "")
        said = await engine.bye(key, _str(body, "reason") or "")
        # the state after the call: parked, and not connected (a bye closes the link)
        return {"key": key, "connected": False, "parked": True, "said_bye": said}

    @r.route("GET", "/v1/events")
    async def events(req: Request) -> Stream:
        """Records as they come. Streaming marks nothing: a reader marks what it has
        printed (POST /v1/seen), so a reader stopped or killed loses nothing."""
        q = req.query
        key = await resolve(q["peer"]) if q.get("peer") else None
        th = q.get("th") or None
        all_dirs = q.get("all") in ("1", "true")
        start = q.get("from", "now")
        if th:
            named = key
            key = await engine.read(lambda c: _bind(c, named, th, "awp tail -t {th} -p {peer}"))
        bound = key

        def batch_after(c: sqlite3.Connection, after: int) -> list[dict]:
            """New records in scope (a thread is bound to its peer by now)."""
            return queries.since(c, after, peer=bound, th=th, all_dirs=all_dirs)

        async def gen() -> Any:
            with engine.changes.subscribe() as changes:
                if start == "unread":
                    first = await engine.read(lambda c: queries.unread(
                        c, peer=bound, th=th) if bound or not th else [])
                    after = await engine.read(queries.max_seq)
                    for x in first:
                        yield x
                else:
                    after = await engine.read(queries.max_seq)
                while True:
                    await changes.receive()
                    batch = await engine.read(lambda c, a=after: batch_after(c, a))
                    if not batch:
                        continue
                    after = batch[-1]["seq"]
                    for x in batch:
                        yield x

        return Stream(gen())

    return r


def _store_error(e: Exception) -> ApiError:
    """The store refused a write (full or read-only disk): say so; nothing was queued."""
    from ..store.check import is_damage

    if is_damage(e):
        raise e  # the whole API maps damage to store_damaged (awp.daemon.damage)
    return ApiError(507, f"cannot store it ({e}); nothing was queued", "store_error")


def _check_address_form(text: str) -> None:
    """Something written as an address but malformed is an address error, not a name."""
    if text.strip().lower().startswith(("tcp:", "unix:", "tailcat:", "ws:", "wss:")):
        try:
            parse_address(text)
        except AddressError as e:
            raise ApiError(400, str(e), "bad_address") from None


def _trust_ca(home: str, pem: str) -> None:
    """``awp connect --ca``: trust these certificates for wss:// from now on."""
    from .ws_ca import CaError, add_ca

    try:
        add_ca(home, pem)
    except (CaError, OSError) as e:
        raise ApiError(400, f"--ca: {e}", "bad_ca") from None


def reachable_addresses(engine: Engine) -> list[str]:
    """Addresses a peer can dial, tailcat first; a wildcard TCP or ws listener
    is replaced by the host's concrete addresses (``0.0.0.0`` is no address)."""
    from ..transport.ifaddrs import expand_wildcard

    out: list[str] = []
    for a in sorted(engine.listen_addrs, key=lambda a: a.kind != "tailcat"):
        out += [ep] if (ep := a.endpoint()) else expand_wildcard(a)
    return list(dict.fromkeys(out))


def multi_address(engine: Engine) -> str:
    """The ``awp:`` text naming our key and every endpoint, when there is more than one."""
    found = endpoints(engine)
    return format_multi(engine.identity.key, found) if len(found) > 1 else ""


def _share_address(engine: Engine) -> str:
    found = reachable_addresses(engine)
    return found[0] if found else ""


__all__ = ["build_router", "peer_state", "short_key"]
