"""What the dashboard shows of the board, built from the daemon's ``/v1/web/board``
and ``/v1/web/topic`` answers.

Pure functions, like :mod:`awp.web.model`: times become RFC 3339 strings as in
the rest of the web API, parts take the shape the page already renders for
messages (``{"type": "text", ...}``), and every string is bounded. Nothing here
is markup: the page puts all of it in with ``textContent``.
"""

from __future__ import annotations

from typing import Any

from ..present.render_board import trust_warnings
from .model import _parts, _s, ts

#: Longest title, name or label passed on.
NAME_MAX = 300


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def policy_text(pol: object) -> str:
    """``read open · post grant · keeps 10000 records, 30 days · 60 a minute each · queue``."""
    if not isinstance(pol, dict):
        return "policy not known yet"
    bits = [f"read {_s(pol.get('read'), 20) or '?'}", f"post {_s(pol.get('post'), 20) or '?'}"]
    keep = []
    if _int(pol.get("keep")):
        keep.append(f"{pol['keep']} records")
    if _int(pol.get("keep_days")):
        keep.append(f"{pol['keep_days']} days")
    if keep:
        bits.append("keeps " + ", ".join(keep))
    if _int(pol.get("rate")):
        bits.append(f"{pol['rate']} a minute each")
    if pol.get("queue") is True:
        bits.append(f"work queue, {_int(pol.get('lease_s'))} s leases")
    if _int(pol.get("revoked")):
        bits.append(f"{pol['revoked']} revoked")
    banned = pol.get("banned")
    if isinstance(banned, list) and banned:
        bits.append(f"{len(banned)} banned")
    return " · ".join(bits)


def topic(t: dict) -> dict:
    """One topic of ``/api/board``."""
    pol = t.get("policy") if isinstance(t.get("policy"), dict) else None
    return {
        "topic": _s(t.get("topic"), NAME_MAX), "label": _s(t.get("label"), NAME_MAX),
        "owner": _s(t.get("owner"), 100), "owner_name": _s(t.get("owner_name"), NAME_MAX),
        "name": _s(t.get("name"), NAME_MAX),
        "title": _s(pol.get("title"), NAME_MAX) if pol else "",
        "mine": t.get("mine") is True, "subscribed": t.get("subscribed") is True,
        "known": t.get("known") is True, "posts": _int(t.get("posts")),
        "records": _int(t.get("records")), "unread": _int(t.get("unread")),
        "newest": ts(_int(t.get("newest"))), "queue": bool(pol and pol.get("queue") is True),
        "policy": pol, "policy_text": policy_text(pol),
        # an owner that equivocated, a stale view, missing records: shown as warnings
        "warnings": [_s(w, 300) for w in trust_warnings(t)],
    }


def parts(p: dict) -> list[dict]:
    """A post's parts as the page renders them; a file (carried inline, base64) is named only."""
    out = []
    for part in p.get("parts") if isinstance(p.get("parts"), list) else []:
        if isinstance(part, dict) and part.get("k") == "file":
            out.append({"type": "blob", "ref": "", "name": _s(part.get("name"), NAME_MAX),
                        "mime": _s(part.get("mime"), 200),
                        "size": _int(part.get("size")) if "size" in part else -1,
                        "status": "in the post: awp get --save DIR writes it"})
        elif isinstance(part, dict):
            out += _parts({"parts": [part]}, None, None)
    return out


def post(p: dict) -> dict:
    """One post of ``/api/topic``."""
    return {
        "hash": _s(p.get("hash"), 64), "id": _s(p.get("id"), 64),
        "author": _s(p.get("author"), 100), "author_name": _s(p.get("author_name"), NAME_MAX),
        "mine": p.get("mine") is True, "at": ts(_int(p.get("ts"))),
        "parent": _s(p.get("parent"), 64), "edited": ts(_int(p.get("edited"))),
        "replies": _int(p.get("replies")), "seq": _int(p.get("seq")),
        "parts": parts(p),
    }


def board(found: dict) -> dict:
    """``/api/board`` from ``/v1/web/board``."""
    rows = found.get("topics") if isinstance(found.get("topics"), list) else []
    return {"topics": [topic(t) for t in rows if isinstance(t, dict)]}


def topic_view(found: dict) -> dict[str, Any]:
    """``/api/topic`` from ``/v1/web/topic``: the topic, its posts oldest first (the
    page puts the newest first), and for a work queue its items' states."""
    t = found.get("topic") if isinstance(found.get("topic"), dict) else {}
    rows = found.get("posts") if isinstance(found.get("posts"), list) else []
    return {"topic": topic(t), "posts": [post(p) for p in rows if isinstance(p, dict)],
            "queue": queue_view(found.get("queue"))}


# -- the queue view -------------------------------------------------------------------------

#: The queue table's columns, in order: the key of each row's value, the heading, and how
#: the page draws it (``text``, ``status``: a badge, ``who``: an agent's name for a key,
#: ``time``: an RFC 3339 time as a clock).  A column added here shows on the page with no
#: change to it.
QUEUE_COLUMNS: tuple[dict[str, str], ...] = (
    {"key": "id", "title": "item", "kind": "text"},
    {"key": "status", "title": "status", "kind": "status"},
    {"key": "holder", "title": "held by", "kind": "who"},
    {"key": "done_by", "title": "done by", "kind": "who"},
    {"key": "until", "title": "lease until", "kind": "time"},
    {"key": "since", "title": "held since", "kind": "time"},
    {"key": "renewals", "title": "renewals", "kind": "text"},
    {"key": "attempts", "title": "attempts", "kind": "text"},
    {"key": "needs", "title": "needs", "kind": "text"},
    {"key": "text", "title": "text", "kind": "text"},
)
QUEUE_STATUSES = ("open", "claimed", "done", "dead")
TEXT_MAX = 200


def _item_text(item: dict) -> str:
    texts = [p.get("text") for p in item.get("parts") or []
             if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return _s(" ".join(texts), TEXT_MAX)


def queue_row(e: dict) -> dict:
    """One item of a work queue: its state, who holds it until when, its attempts."""
    item = e.get("item") if isinstance(e.get("item"), dict) else {}
    status = e.get("status") if e.get("status") in QUEUE_STATUSES else "open"
    return {"hash": _s(item.get("hash"), 64), "id": _s(item.get("id"), 64), "status": status,
            "holder": _s(e.get("holder"), 100) if status == "claimed" else "",
            "until": ts(_int(e.get("until"))) if status == "claimed" else "",
            "since": ts(_int(e.get("since"))) if status == "claimed" and e.get("since") else "",
            "done_by": _s(e.get("done_by"), 100) if status == "done" else "",
            "renewals": _int(e.get("renewals")) if status == "claimed" else 0,
            "attempts": _int(e.get("attempts")),
            "needs": _s(",".join(n for n in e.get("needs") or [] if isinstance(n, str)), 200),
            "text": _item_text(item)}


#: The workers table (as ``awp queue`` prints under the items): one row per key that held
#: an item, drawn like the queue's columns.
WORKER_COLUMNS: tuple[dict[str, str], ...] = (
    {"key": "holder", "title": "worker", "kind": "who"},
    {"key": "holds", "title": "holds", "kind": "text"},
    {"key": "since", "title": "since", "kind": "time"},
    {"key": "renewals", "title": "renewals", "kind": "text"},
    {"key": "done", "title": "done", "kind": "text"},
    {"key": "failed", "title": "failed", "kind": "text"},
    {"key": "expired", "title": "expired", "kind": "text"},
)
STRIKES_COLUMN = {"key": "strikes", "title": "strikes", "kind": "text"}


def worker_row(w: dict) -> dict:
    holds = [h for h in w.get("holds") or [] if isinstance(h, str)]
    row = {"holder": _s(w.get("holder"), 100), "holds": len(holds),
           "since": ts(_int(w.get("since"))) if holds and w.get("since") else "",
           "renewals": _int(w.get("renewals")), "done": _int(w.get("done")),
           "failed": _int(w.get("failed")), "expired": _int(w.get("expired"))}
    if "strikes" in w:
        row["strikes"] = _int(w.get("strikes"))
    return row


def queue_view(q: object) -> dict | None:
    """The queue part of ``/api/topic``: columns, rows (oldest first), counts by status, and
    the workers summary (``workers``, ``worker_columns``; strikes only from the arbiter)."""
    if not isinstance(q, dict):
        return None
    rows = [queue_row(e) for e in q.get("items") or [] if isinstance(e, dict)]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in QUEUE_STATUSES}
    workers = [worker_row(w) for w in q.get("workers") or [] if isinstance(w, dict)]
    wcols = list(WORKER_COLUMNS) + ([STRIKES_COLUMN] if any("strikes" in w for w in workers)
                                    else [])
    return {"columns": list(QUEUE_COLUMNS), "rows": rows, "counts": counts,
            "arbiter": q.get("arbiter") is True, "workers": workers,
            "worker_columns": wcols}
