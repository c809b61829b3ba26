"""Who works a queue: each holder's items, since when, renewals, results (``awp queue``).

Computed from the topic's lease records, which every subscriber holds, so
the owner and any worker show the same table; the owner adds the strikes
its arbiter counts (the market's standing).
"""

from __future__ import annotations

from ..wire.board import Record


def lease_facts(recs: list[Record]) -> dict[str, dict]:
    """Per lease id: ``since`` (when it was claimed, ms) and ``renewals``."""
    out: dict[str, dict] = {}
    for r in sorted(recs, key=lambda r: (r.ts, r.hash)):
        if r.kind != "lease":
            continue
        d = r.doc
        e = out.setdefault(d["lease"], {"since": 0, "renewals": 0})
        if d["state"] == "claimed" and not e["since"]:
            e["since"] = r.ts
        elif d["state"] == "renewed":
            e["renewals"] += 1
    return out


def workers(items: list[dict], recs: list[Record], strikes: dict[str, int] | None) -> list[dict]:
    """One row per key that ever held an item: what it holds now and how it delivered.

    ``items`` are the queue view's rows (``status``, ``holder``, ``since``,
    ``renewals``, ``item.hash``); ``done``/``failed``/``expired`` count that
    holder's leases by how they ended.
    """
    rows: dict[str, dict] = {}

    def row(key: str) -> dict:
        return rows.setdefault(key, {"holder": key, "holds": [], "since": 0, "renewals": 0,
                                     "done": 0, "failed": 0, "expired": 0,
                                     **({"strikes": 0} if strikes is not None else {})})

    for r in recs:
        if r.kind == "lease" and r.doc["state"] in ("done", "failed", "expired"):
            row(r.doc["holder"])[r.doc["state"]] += 1
    for it in items:
        if it.get("status") != "claimed" or not it.get("holder"):
            continue
        w = row(it["holder"])
        w["holds"].append(it["item"]["hash"])
        since = it.get("since") or 0
        w["since"] = min(w["since"], since) if w["since"] else since
        w["renewals"] += it.get("renewals", 0)
    for key, n in (strikes or {}).items():
        row(key)["strikes"] = n
    return sorted(rows.values(), key=lambda w: (-len(w["holds"]), w["holder"]))

