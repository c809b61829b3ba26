"""``--json`` output under the field names the reference implementation uses.

Scripts written against the Go reference (and its interop test, which drives
a peer through its CLI) read ``threads[].their_state``, ``read``'s
``events[].type`` and ``.msg``, ``grants[].role`` and ``peers[].connected``.
Our local API keeps its own names, which our clients and docs use; the CLI
adds the reference's names beside them, so a script written for either
works.  docs/cli-json.md lists every shape.
"""

from __future__ import annotations


def peers(rows: list) -> list:
    out = []
    for p in rows:
        if not isinstance(p, dict):
            continue
        state = str(p.get("state") or "")
        aliases = p.get("aliases") or []
        out.append({**p, "connected": state.startswith("connected"),
                    "outbound": state == "connected (out)", "outbox": p.get("queued", 0),
                    "alias": aliases[0] if aliases else "",
                    "addrs": p.get("addresses") or []})
    return out


def threads(rows: list) -> list:
    return [{**t, "my_state": t.get("mine", ""), "their_state": t.get("theirs", "")}
            for t in rows if isinstance(t, dict)]


def grants(rows: list) -> list:
    return [{**g, "role": g.get("kind", ""), "audience": g.get("aud", "")}
            for g in rows if isinstance(g, dict)]


def with_events(res: dict) -> dict:
    """``res`` (read, wait, tail) plus ``events`` and ``cursor``, the reference's names.

    Each event is one of our records plus ``type`` (the line's ``t``) and
    ``msg`` (the wire object, which we call ``line``).  ``records`` and the
    rest of ``res`` stay for scripts written against our own output.
    """
    events = []
    for r in res.get("records") or []:
        if not isinstance(r, dict):
            continue
        line = r.get("line") if isinstance(r.get("line"), dict) else {}
        events.append({**r, "type": r.get("t") or line.get("t", ""), "msg": line})
    cursor = max((e.get("seq") or 0 for e in events), default=0)
    return {"events": events, "cursor": cursor, **res, "records": res.get("records") or []}
