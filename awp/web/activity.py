"""Activity items for the dashboard's feed: pure functions, no I/O.

Each builds one item from what the daemon holds (a log record, a line shared
with this host, a board record), a change hint, or the difference between two
States (:func:`awp.web.model.build_state`).
"""

from __future__ import annotations

from typing import Any

from .model import _s, ts

#: Longest text in an activity item.
ACTIVITY_TEXT = 300


def _text_of(line: dict) -> str:
    texts = []
    for p in line.get("parts") if isinstance(line.get("parts"), list) else []:
        if not isinstance(p, dict):
            continue
        if p.get("k") in ("text", "code") and isinstance(p.get("text"), str):
            texts.append(p["text"])
        elif p.get("k") == "blob":
            texts.append(f"[file {_s(p.get('name'), 200)}]")
        elif p.get("k") == "data":
            texts.append(f"[data {_s(p.get('mime'), 100)}]")
    text = " ".join(" ".join(texts).split())
    return text[:ACTIVITY_TEXT - 1] + "…" if len(text) > ACTIVITY_TEXT else text


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text[:ACTIVITY_TEXT - 1] + "…" if len(text) > ACTIVITY_TEXT else text


def activity_from_record(rec: dict, self_key: str, subject: str = "") -> dict | None:
    """One activity item (without ``seq``) for a local log record, or None."""
    line = rec.get("line") if isinstance(rec.get("line"), dict) else {}
    t = rec.get("t", "")
    direction = rec.get("dir", "")
    peer = rec.get("peer", "")
    src, dst = (self_key, peer) if direction == "out" else (peer, self_key)
    at = rec.get("at") or rec.get("ts")
    item: dict[str, Any] = {"at": ts(at), "kind": "", "from": src, "to": dst,
                            "th": rec.get("th", ""), "subject": subject, "local": True,
                            "peer": peer}
    if t == "msg":
        item["kind"] = "thread" if isinstance(line.get("subject"), str) else "msg"
        if line.get("subject") and not subject:
            item["subject"] = _s(line["subject"], 200)
        item["text"] = _text_of(line)
    elif t == "state":
        item["kind"] = "state"
        item["state"] = _s(line.get("state"), 40)
        item["text"] = _clip(_s(line.get("note"), 2000))
    elif t == "grant":
        g = line.get("grant") if isinstance(line.get("grant"), dict) else {}
        caps = g.get("caps") if isinstance(g.get("caps"), list) else []
        item["kind"] = "grant"
        item["text"] = ", ".join(c for c in caps if isinstance(c, str))[:200]
    elif t == "introduce":
        item["kind"] = "introduce"
        item["text"] = _s(line.get("name"), 200) or _s(line.get("key"), 100)
    elif t == "err":
        item["kind"] = "error"
        item["text"] = _clip(f"{_s(line.get('code'), 40)}: {_s(line.get('detail'), 500)}")
    elif t == "notice":
        kind = line.get("kind")
        mapped = {"bye": "bye", "blob": "blob", "refused": "error", "private": "thread",
                  "sharing": "thread"}.get(kind if isinstance(kind, str) else "")
        if mapped is None:
            return None
        item["kind"] = mapped
        item["from"], item["to"] = peer, self_key
        item["text"] = _clip(_s(line.get("text"), 2000))
    else:
        return None
    return item


def activity_from_mirror(row: dict) -> dict | None:
    """An activity item for a line shared with this host (``local`` false)."""
    line = row.get("line") if isinstance(row.get("line"), dict) else {}
    t = line.get("t")
    sharer, of = row.get("sharer", ""), row.get("of", "")
    src, dst = (sharer, of) if row.get("dir") == "out" else (of, sharer)
    item: dict[str, Any] = {"at": ts(row.get("at")), "kind": "", "from": src, "to": dst,
                            "th": row.get("th", ""), "subject": _s(row.get("subject"), 200),
                            "local": False, "peer": sharer, "shared_by": sharer}
    if t == "msg":
        item["kind"] = "thread" if isinstance(line.get("subject"), str) else "msg"
        item["text"] = _text_of(line)
    elif t == "state":
        item["kind"] = "state"
        item["state"] = _s(line.get("state"), 40)
        item["text"] = _clip(_s(line.get("note"), 2000))
    else:
        return None
    return item


def activity_from_hint(hint: dict, state: dict | None, now_ms: int) -> dict | None:
    """connected / disconnected / joined / left from a daemon change hint."""
    kind = hint.get("kind")
    self_key = (state or {}).get("self", "")
    if kind == "peer" and isinstance(hint.get("peer"), str):
        up = hint.get("up") is True
        return {"at": ts(now_ms), "kind": "connected" if up else "disconnected",
                "from": hint["peer"], "to": self_key, "th": "", "subject": "", "local": True}
    if kind == "presence" and isinstance(hint.get("origin"), str):
        if hint.get("left") is True:
            k = "left"
        elif hint.get("joined") is True:
            k = "joined"
        else:
            return None
        return {"at": ts(now_ms), "kind": k, "from": hint["origin"], "to": "", "th": "",
                "subject": "", "local": False}
    return None


def activity_from_diff(old: dict | None, new: dict, now_ms: int) -> list[dict]:
    """State changes learned from gossip: threads started, states changed."""
    if not old:
        return []
    before = {t["id"]: t for t in old.get("threads") or []}
    out = []
    for t in new.get("threads") or []:
        if t.get("local") or t.get("shared_by"):
            continue  # these come first-hand, from the log or the mirrored lines
        prev = before.get(t["id"])
        base = {"at": t.get("updated") or ts(now_ms), "th": t["th"],
                "subject": t.get("subject", ""), "local": False}
        if prev is None:
            out.append({**base, "kind": "thread", "from": t["a"], "to": t["b"], "text": ""})
            continue
        for side, other, key in (("a", "b", "a_state"), ("b", "a", "b_state")):
            if t.get(key) != prev.get(key):
                out.append({**base, "kind": "state", "from": t[side], "to": t[other],
                            "state": t.get(key, ""), "text": ""})
    return out


def activity_from_board(row: dict) -> dict | None:
    """A ``post`` or ``queue`` item for a board record the daemon holds (``local`` true:
    this host holds the record itself, whoever wrote it)."""
    topic = _s(row.get("topic"), 300)
    label = _s(row.get("label"), 300) or topic
    base: dict[str, Any] = {"at": ts(row.get("ts") if isinstance(row.get("ts"), int) else None),
                            "th": "", "subject": label, "local": True, "topic": topic,
                            "to": ""}
    kind = row.get("kind")
    if kind in ("post", "edit"):
        text = _clip(_s(row.get("text"), 2000))
        if row.get("parent"):
            text = "reply: " + text
        elif kind == "edit":
            text = "edited: " + text
        return {**base, "kind": "post", "from": _s(row.get("author"), 100), "text": text}
    if kind == "lease" and isinstance(row.get("state"), str):
        state = _s(row["state"], 40)
        return {**base, "kind": "queue", "from": _s(row.get("holder"), 100), "state": state,
                "text": f"{state} item {_s(row.get('of'), 64)[:10]}"}
    return None
