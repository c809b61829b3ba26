"""What the web API shows, built from the daemon's snapshots.

Pure functions (no I/O), so the rules are easy to test: the State of
``/api/state`` from a ``/v1/web/state`` snapshot, and conversation messages
from log records and mirrored lines (activity items: :mod:`awp.web.activity`).
"""

from __future__ import annotations

from typing import Any

from ..harness.identity import normalize
from ..wire.keys import short_key
from ..wire.names import clean_name, name_fold
from ..wire.timefmt import format_ts, parse_ts

#: No heartbeat for this long: the agent shows as stale.
STALE_MS = 150_000
#: Presence older than this is forgotten.
FORGET_MS = 10 * 60_000
#: An agent that acted within this window counts as active.
ACTIVE_MS = 5 * 60_000

FINAL = ("done", "failed", "closed")
RASTER = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/avif")


def ts(ms: int | None) -> str | None:
    return format_ts(int(ms)) if ms else None


def _ms(text: object) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_ts(text)
    except ValueError:
        return None


def _s(v: object, limit: int = 1000) -> str:
    return v[:limit] if isinstance(v, str) else ""


def guess_harness(name: str) -> str:
    """``claude-code@host`` -> ``claude``: the harness a name suggests, if any."""
    head = name.split("@", 1)[0].strip().lower()
    return normalize(head) or ""


def thread_id(a: str, b: str, th: str) -> str:
    return f"{a}:{b}:{th}"


def _new_agent(key: str) -> dict[str, Any]:
    return {
        "key": key, "short": short_key(key), "name": "", "about": "", "version": "",
        "harness": "", "model": "", "host": "", "status": "offline", "sharing": False,
        "direct": False, "via": "", "hops": None, "seen": None, "last_active": None,
        "listening": False, "transport": "", "rtt_ms": None, "unreachable": "",
        "threads": 0, "active": False, "working": False, "waiting": False, "shares": [],
        "unread": 0, "outbox": 0, "board": None, "heard": "",
        # identity (docs/identity.md): "" | "verified" | "carried" (checked under a key
        # it rotated from), the keys it rotated from, the operator that certified it,
        # and a warning when its key seems to have changed without a record
        "verified": "", "rotated_from": [], "operator": None, "identity_warning": "",
    }


BOARD_ROLES = ("owner", "author", "worker")


def _board_seen(row: dict) -> dict:
    """What the board says of a host: its roles and (up to five) topics, as the page shows."""
    roles = [r for r in row.get("roles") or [] if r in BOARD_ROLES]
    topics = [{"id": _s(t.get("id"), 300), "label": _s(t.get("label"), 300)}
              for t in row.get("topics") or [] if isinstance(t, dict)][:5]
    return {"roles": roles, "topics": topics, "via": _s(row.get("via"), 100),
            "hops": row.get("hops") if isinstance(row.get("hops"), int) else None,
            "last": ts(row.get("last") if isinstance(row.get("last"), int) else None)}


def _identity(a: dict, p: dict) -> None:
    """A direct peer's verification, rotations and operator, as ``awp peers`` shows them."""
    verified = _s(p.get("verified"), 100)
    a["verified"] = "" if not verified else "verified" if verified == a["key"] else "carried"
    a["rotated_from"] = [_s(k, 100) for k in p.get("rotated_from") or [] if isinstance(k, str)][:8]
    op = p.get("operator")
    if isinstance(op, dict):
        a["operator"] = {k: _s(op.get(k), 100) for k in ("op", "name", "status", "exp")}
    a["identity_warning"] = _s(p.get("warning"), 300)


def build_state(snap: dict, *, at_ms: int | None = None) -> dict:
    """The State of ``/api/state`` from a ``/v1/web/state`` snapshot."""
    now = int(at_ms if at_ms is not None else snap.get("now") or 0)
    me = snap.get("self") or {}
    self_key = me.get("key", "")
    agents: dict[str, dict] = {}

    def agent(key: str) -> dict:
        a = agents.get(key)
        if a is None:
            a = agents[key] = _new_agent(key)
        return a

    # -- this host
    s = agent(self_key)
    s.update({
        "name": me.get("name", ""), "about": me.get("about", ""),
        "version": me.get("version", ""), "harness": me.get("harness") or "",
        "model": me.get("model") or "", "host": me.get("host", ""), "status": "self",
        "sharing": bool(me.get("presence")), "seen": ts(now),
        "last_active": ts(me.get("active")), "listening": bool(me.get("waiting")),
        "shares": list(me.get("shares") or []),
        "unread": (snap.get("counts") or {}).get("unread", 0),
        "outbox": (snap.get("counts") or {}).get("queued", 0),
    })

    links: dict[tuple[str, str], dict] = {}

    def link(x: str, y: str, up: bool, rtt: Any, *, direct: bool = False,
             transport: str = "", error: str = "", board: bool = False) -> None:
        if not x or not y or x == y:
            return
        a, b = (x, y) if x < y else (y, x)
        rtt_ms = rtt if isinstance(rtt, int | float) and not isinstance(rtt, bool) else None
        cur = links.get((a, b))
        if cur is None or (direct and not cur.get("direct")):
            item = {"a": a, "b": b, "up": bool(up), "rtt_ms": rtt_ms}
            if direct:
                item.update({"direct": True, "transport": transport, "error": error})
            elif board:
                item["board"] = True  # a path a board record came by, not a known link
            links[(a, b)] = item
            return
        if cur.get("direct"):
            return  # this host's own view of its links wins
        cur["up"] = cur["up"] or bool(up)
        if rtt_ms is not None and (cur["rtt_ms"] is None or rtt_ms < cur["rtt_ms"]):
            cur["rtt_ms"] = rtt_ms

    # -- direct peers
    for p in snap.get("peers") or []:
        key = p.get("key", "")
        if not key or key == self_key:
            continue
        a = agent(key)
        up = bool(p.get("up"))
        a["name"] = p.get("name") or (p.get("aliases") or [""])[0] or a["name"]
        a["about"] = p.get("about") or a["about"]
        a["direct"] = up
        a["status"] = "connected" if up else "offline"
        a["transport"] = p.get("transport") or ""
        a["rtt_ms"] = p.get("rtt_ms")
        a["shares"] = list(p.get("shares") or [])
        _identity(a, p)
        if up:
            a["seen"] = ts(now)
        elif p.get("last_seen"):
            a["seen"] = ts(p["last_seen"])
        if not up and not p.get("parked"):
            a["unreachable"] = p.get("unreachable") or ""
        if (up or p.get("last_seen") or p.get("reconnecting")) and not p.get("parked"):
            link(self_key, key, up, p.get("rtt_ms"), direct=True,
                 transport=p.get("transport") or "", error=a["unreachable"])

    # -- presence documents
    fresh_origins: set[str] = set()
    docs = []
    for row in snap.get("presence") or []:
        origin = row.get("origin", "")
        doc = row.get("doc") or {}
        if not origin or origin == self_key or not isinstance(doc, dict):
            continue
        doc_ts = int(row.get("doc_ts") or 0)
        seen = min(doc_ts, int(row.get("received") or doc_ts)) if doc_ts else 0
        age = now - seen
        if age > FORGET_MS:
            continue
        fresh = age <= STALE_MS
        docs.append((origin, doc, fresh))
        a = agent(origin)
        a["name"] = _s(doc.get("name"), 200) or a["name"]
        a["about"] = _s(doc.get("about"), 200) or a["about"]
        a["version"] = _s(doc.get("version"), 100)
        a["harness"] = normalize(doc.get("harness")) or ""
        a["model"] = _s(doc.get("model"), 200)
        a["host"] = _s(doc.get("host"), 100)
        a["sharing"] = True
        a["via"] = row.get("via") or ""
        a["hops"] = row.get("hops")
        a["seen"] = ts(seen) if not a["direct"] else a["seen"]
        a["last_active"] = ts(_ms(doc.get("active"))) or None
        a["listening"] = doc.get("waiting") is True
        if isinstance(doc.get("shares"), list):
            a["shares"] = [x for x in doc["shares"] if isinstance(x, str)][:64]
        if isinstance(doc.get("unread"), int):
            a["unread"] = doc["unread"]
        if isinstance(doc.get("outbox"), int):
            a["outbox"] = doc["outbox"]
        if not a["direct"]:
            a["status"] = "online" if fresh else "stale"
        if fresh:
            fresh_origins.add(origin)
    for origin, doc, fresh in docs:
        for p in doc.get("peers") or []:
            if not isinstance(p, dict) or not isinstance(p.get("key"), str):
                continue
            key = p["key"]
            a = agent(key)
            if not a["name"]:
                a["name"] = _s(p.get("name"), 200)
            up = p.get("up") is True and fresh
            link(origin, key, up, p.get("rtt"))
            if up and a["status"] == "offline":
                a["status"] = "online"  # listed as connected by an agent that is online

    # -- hosts seen on the board (owners, authors, workers this host never met)
    for row in snap.get("board_hosts") or []:
        key = row.get("key") if isinstance(row, dict) else None
        if not isinstance(key, str) or not key or key == self_key:
            continue
        known = key in agents
        a = agent(key)
        seen = _board_seen(row)
        a["board"] = seen
        if not a["name"]:
            a["name"] = _s(row.get("name"), 200)
            if row.get("name_source") and row.get("name_source") != "met":
                a["heard"] = _s(row.get("name_source"), 40)  # a name heard of, not met
        if known and (a["direct"] or a["sharing"] or a["status"] != "offline"):
            continue  # met or present: the board only adds what it knows
        last = row.get("last") if isinstance(row.get("last"), int) else 0
        if a["status"] == "offline" and not a["seen"]:
            a["status"] = "board"
            a["seen"] = ts(last) if last else None
        via = seen["via"]
        if via and via != key:
            link(via, key, bool(last) and now - last <= STALE_MS, None, board=True)

    # -- threads
    threads: dict[str, dict] = {}

    def side_states(x: str, x_state: str, y: str, y_state: str) -> tuple[str, str, str, str]:
        if x < y:
            return x, y, x_state, y_state
        return y, x, y_state, x_state

    for t in snap.get("threads") or []:
        peer = t.get("peer", "")
        th = t.get("th", "")
        if not peer or not th:
            continue
        agent(peer)
        a, b, sa, sb = side_states(self_key, t.get("mine", "open"), peer,
                                   t.get("theirs", "open"))
        na, nb = (t.get("my_note", ""), t.get("their_note", "")) if a == self_key else (
            t.get("their_note", ""), t.get("my_note", ""))
        tid = thread_id(a, b, th)
        threads[tid] = {
            "id": tid, "th": th, "subject": t.get("subject", ""),
            "updated": ts(t.get("updated")), "a": a, "b": b, "a_state": sa, "b_state": sb,
            "a_note": na, "b_note": nb, "local": True, "shared_by": "", "peer": peer,
            "unread": t.get("unread", 0), "private": bool(t.get("private")),
            "_updated": int(t.get("updated") or 0),
        }

    for origin, doc, _fresh in docs:
        for t in doc.get("threads") or []:
            if not isinstance(t, dict):
                continue
            peer, th = t.get("peer"), t.get("th")
            if not isinstance(peer, str) or not isinstance(th, str) or not peer or not th:
                continue
            agent(peer)
            a, b, sa, sb = side_states(origin, _s(t.get("mine"), 40) or "open", peer,
                                       _s(t.get("theirs"), 40) or "open")
            tid = thread_id(a, b, th)
            updated = _ms(t.get("updated")) or 0
            cur = threads.get(tid)
            if cur is not None and (cur["local"] or cur["_updated"] >= updated):
                continue
            threads[tid] = {
                "id": tid, "th": th, "subject": _s(t.get("subject"), 120),
                "updated": ts(updated), "a": a, "b": b, "a_state": sa, "b_state": sb,
                "local": False, "shared_by": cur["shared_by"] if cur else "",
                "_updated": updated,
            }

    for m in snap.get("mirrors") or []:
        sharer, of, th = m.get("sharer", ""), m.get("of", ""), m.get("th", "")
        if not sharer or not of or not th:
            continue
        sa_ = agent(sharer)
        oa = agent(of)
        if not sa_["name"] and m.get("sharer_name"):
            sa_["name"] = m["sharer_name"]
        if not oa["name"]:
            oa["name"] = _s(m.get("of_name"), 200)
        a, b, sa, sb = side_states(sharer, m.get("sharer_state") or "open", of,
                                   m.get("of_state") or "open")
        tid = thread_id(a, b, th)
        updated = int(m.get("last_at") or 0)
        cur = threads.get(tid)
        if cur is not None:
            if cur["local"]:
                continue
            cur["shared_by"] = sharer
            if updated > cur["_updated"]:
                cur.update({"a_state": sa, "b_state": sb, "updated": ts(updated),
                            "_updated": updated})
            if not cur["subject"]:
                cur["subject"] = m.get("subject", "")
            continue
        threads[tid] = {
            "id": tid, "th": th, "subject": m.get("subject", ""), "updated": ts(updated),
            "a": a, "b": b, "a_state": sa, "b_state": sb, "local": False,
            "shared_by": sharer, "_updated": updated,
        }

    ordered = sorted(threads.values(), key=lambda t: (-t["_updated"], t["id"]))
    for t in ordered:
        for side, state in ((t["a"], t["a_state"]), (t["b"], t["b_state"])):
            ag = agents.get(side)
            if ag is None:
                continue
            ag["threads"] += 1
            if state == "working":
                ag["working"] = True
        del t["_updated"]

    # -- flags and the last fallbacks
    folds: dict[str, set[str]] = {}
    for a in agents.values():
        a["name"] = clean_name(a["name"])  # names come from peers: no invisible characters
        if a["name"]:
            folds.setdefault(name_fold(a["name"]), set()).add(a["key"])
    for a in agents.values():
        # Another key claims this name or one drawn like it: the page shows the key too.
        a["lookalike"] = len(folds.get(name_fold(a["name"]), ())) > 1 if a["name"] else False
        if not a["harness"]:
            a["harness"] = guess_harness(a["name"])
        last = _ms(a["last_active"])
        a["active"] = bool(last and now - last <= ACTIVE_MS)
        a["waiting"] = a["listening"]
        if not a["name"]:
            a["name"] = a["short"]

    order = {"self": 0, "connected": 1, "online": 2, "stale": 3, "board": 4, "offline": 5}
    agent_list = sorted(agents.values(), key=lambda a: (order.get(a["status"], 9),
                                                        a["name"].lower(), a["key"]))
    stats = {
        "agents": len(agent_list),
        "up": sum(1 for a in agent_list if a["status"] in ("self", "connected", "online")),
        "threads": len(ordered),
        "active": sum(1 for a in agent_list if a["active"]),
        "working": sum(1 for a in agent_list if a["working"]),
        "waiting": sum(1 for a in agent_list if a["waiting"]),
    }
    return {
        "at": ts(now),
        "version": me.get("version", ""),
        "self": self_key,
        "name": me.get("name", ""),
        "host_name": me.get("host", ""),
        "presence": bool(me.get("presence")),
        "address": me.get("address", ""),
        "listeners": list(me.get("listeners") or []),
        "listen_errors": dict(me.get("listen_errors") or {}),
        "tailcat_error": me.get("tailcat_error", ""),
        "shares": list(me.get("shares") or []),
        "counts": dict(snap.get("counts") or {}),
        "agents": agent_list,
        "links": sorted(links.values(), key=lambda x: (x["a"], x["b"])),
        "threads": ordered,
        "stats": stats,
    }


# ------------------------------------------------------------------ messages


def _parts(line: dict, files: list[dict] | None, blob_url) -> list[dict]:
    out = []
    files_by_ref = {f.get("ref"): f for f in files or []}
    for p in line.get("parts") if isinstance(line.get("parts"), list) else []:
        if not isinstance(p, dict):
            continue
        k = p.get("k")
        if k == "text":
            out.append({"type": "text", "text": _s(p.get("text"), 1_000_000)})
        elif k == "code":
            item = {"type": "code", "text": _s(p.get("text"), 1_000_000)}
            if isinstance(p.get("lang"), str):
                item["lang"] = p["lang"][:40]
            out.append(item)
        elif k == "data":
            out.append({"type": "data", "mime": _s(p.get("mime"), 200), "data": p.get("data")})
        elif k == "blob":
            ref = _s(p.get("ref"), 200)
            f = files_by_ref.get(ref) or {}
            size = p.get("size")
            item = {"type": "blob", "ref": ref, "name": _s(p.get("name"), 300),
                    "mime": _s(p.get("mime"), 200),
                    "size": size if isinstance(size, int) and not isinstance(size, bool) else -1,
                    "status": f.get("status") or "not copied"}
            url = blob_url(ref) if f.get("available") and blob_url else None
            if url:
                item["url"] = url
            out.append(item)
    return out


def _kind_of(t: str, line: dict) -> str:
    if t == "notice":
        kind = line.get("kind")
        return {"bye": "bye", "blob": "blob", "refused": "error"}.get(kind, "notice")
    return {"msg": "msg", "state": "state", "grant": "grant", "introduce": "introduce",
            "bye": "bye", "err": "error"}.get(t, t)


def message_from_record(rec: dict, self_key: str, blob_url=None) -> dict:
    """A local log record as a message of ``/api/thread``."""
    line = rec.get("line") if isinstance(rec.get("line"), dict) else {}
    t = rec.get("t", "")
    peer = rec.get("peer", "")
    direction = rec.get("dir", "")
    sender = self_key if direction == "out" else peer
    at = _ms(line.get("ts")) or rec.get("ts") or rec.get("at")
    msg: dict[str, Any] = {"seq": rec.get("seq"), "id": rec.get("id", ""), "at": ts(at),
                           "from": sender, "kind": _kind_of(t, line)}
    if direction == "out":
        msg["acked"] = bool(rec.get("acked"))
    if t == "msg":
        def url(ref: str, peer=peer, direction=direction) -> str:
            return blob_url(peer, "out" if direction == "out" else "in", ref)

        msg["parts"] = _parts(line, rec.get("files"), url if blob_url else None)
        if isinstance(line.get("subject"), str):
            msg["subject"] = line["subject"]
    elif t == "state":
        msg["state"] = _s(line.get("state"), 40)
        msg["note"] = _s(line.get("note"), 10_000)
    elif t == "notice":
        msg["text"] = _s(line.get("text"), 10_000)
    elif t == "err":
        msg["text"] = f"{_s(line.get('code'), 40)}: {_s(line.get('detail'), 2000)}".strip(": ")
    elif t == "grant":
        g = line.get("grant") if isinstance(line.get("grant"), dict) else {}
        caps = g.get("caps") if isinstance(g.get("caps"), list) else []
        msg["text"] = "granted " + ", ".join(c for c in caps if isinstance(c, str))
    elif t == "introduce":
        msg["text"] = "introduced " + (_s(line.get("name"), 200) or _s(line.get("key"), 100))
    return msg


def message_from_mirror(row: dict) -> dict:
    """A mirrored line as a message of ``/api/thread`` (files are never copied)."""
    line = row.get("line") if isinstance(row.get("line"), dict) else {}
    t = line.get("t", "")
    sender = row.get("sharer", "") if row.get("dir") == "out" else row.get("of", "")
    at = _ms(line.get("ts")) or row.get("at")
    msg: dict[str, Any] = {"seq": row.get("seq"), "id": _s(line.get("id"), 100),
                           "at": ts(at), "from": sender, "kind": _kind_of(t, line)}
    if t == "msg":
        msg["parts"] = _parts(line, None, None)
        if isinstance(line.get("subject"), str):
            msg["subject"] = line["subject"]
    elif t == "state":
        msg["state"] = _s(line.get("state"), 40)
        msg["note"] = _s(line.get("note"), 10_000)
    return msg


def conversation(found: dict, blob_url=None) -> dict:
    """The answer of ``/api/thread`` from ``/v1/web/thread``."""
    self_key = found.get("self", "")
    if found.get("kind") == "local":
        messages = [message_from_record(r, self_key, blob_url)
                    for r in found.get("records") or []]
        return {"peer": found["peer"], "th": found["th"], "subject": found.get("subject", ""),
                "a": self_key, "b": found["peer"],
                "a_state": found.get("mine", "open"), "b_state": found.get("theirs", "open"),
                "a_note": found.get("my_note", ""), "b_note": found.get("their_note", ""),
                "local": True, "shared_by": "", "messages": messages}
    lines = found.get("lines") or []
    sharer, of = found.get("sharer", ""), found.get("of", "")
    a_state = b_state = "open"
    for row in lines:
        line = row.get("line") or {}
        if line.get("t") == "state" and isinstance(line.get("state"), str):
            if row.get("dir") == "out":
                a_state = line["state"][:40]
            else:
                b_state = line["state"][:40]
    return {"peer": found["peer"], "th": found["th"], "subject": found.get("subject", ""),
            "a": sharer, "b": of, "a_state": a_state, "b_state": b_state,
            "local": False, "shared_by": sharer, "of_name": found.get("of_name", ""),
            "messages": [message_from_mirror(r) for r in lines]}
