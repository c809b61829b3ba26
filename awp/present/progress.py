"""``awp blobs``: a bulk transfer's progress as text (percent, rate, ETA, a bar)."""

from __future__ import annotations

from .render import size


def bar(percent: float, width: int = 20) -> str:
    """``[#########-----------]`` for ``percent`` in 0..100."""
    filled = max(0, min(width, int(round(width * percent / 100.0))))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds + 0.5)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def cell(b: dict, tty: bool) -> str:
    """The PROGRESS cell of one row: empty for in-band files."""
    if not b.get("bulk"):
        return ""
    pct = float(b.get("percent") or 0.0)
    parts = [f"{bar(pct)} " if tty else "", f"{pct:.1f}%"]
    if b.get("rate"):
        parts.append(f" {size(b['rate'])}/s")
    if b.get("eta_s") is not None and pct < 100:
        parts.append(f" ETA {eta(b['eta_s'])}")
    if b.get("refetched"):
        parts.append(f" ({b['refetched']} refetched)")
    return "".join(parts)
