"""What the stop hook tells an idle agent about queues it works (no typer, httpx or trio).

An agent that took items from a queue (its host held a lease there) is told,
when it is about to stop, how many items still wait on each such queue and
how to take one; a queue it never worked is not its business.
"""

from __future__ import annotations


def waiting_text(topics: list) -> str:
    """``""`` when nothing waits; else one line a queue and how to take an item."""
    rows = [t for t in topics if isinstance(t, dict) and isinstance(t.get("open"), int)
            and t["open"] > 0]
    if not rows:
        return ""
    lines = ["Items wait on work queues you have taken items from:"]
    for t in rows[:10]:
        label = str(t.get("label") or t.get("topic") or "?")[:120]
        lines.append(f"  {label}: {t['open']} open")
    first = str(rows[0].get("label") or rows[0].get("topic") or "")[:120]
    lines.append(f"If you are free, take one with awp_claim topic={first} (or awp claim {first});"
                 " otherwise finish as you meant to.")
    return "\n".join(lines)
