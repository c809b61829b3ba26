"""Go-style durations (``30s``, ``1h30m``, ``500ms``, ``168h``) as seconds.

Every duration the docs show (flags, config keys, environment variables)
uses this form, so the CLI and the daemon parse it the same way.
"""

from __future__ import annotations

from .echo import echo

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
          "d": 86400.0}
_PART_RE = r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)"
_part = None  # compiled on first use: ``re`` is not imported on the CLI's fast path
# Longer than any wait, lease or time to live means anything for: past it a
# duration is a mistake (or ``inf``), and times computed from it in
# milliseconds would no longer be integers.
MAX_SECONDS = 100 * 365 * 86400.0


def _one_unit(s: str) -> float | None:
    """``5m``, ``30s``, ``1.5h``: one number and one unit, parsed without ``re``."""
    for unit in ("ms", "us", "µs", "ns", "s", "m", "h", "d"):
        if s.endswith(unit):
            num = s[: -len(unit)]
            if num and all(c.isdigit() or c == "." for c in num) and num.count(".") <= 1 \
                    and num != ".":
                return float(num) * _UNITS[unit]
            return None
    return None


def parse_duration(text: str | int | float) -> float:
    """Seconds for a duration; a bare number means seconds.  ``ValueError`` otherwise,
    and for NaN or anything over :data:`MAX_SECONDS` (100 years)."""
    try:
        v = _parse(text)
    except OverflowError:  # an integer of hundreds of digits
        v = float("inf")
    if not 0 <= v <= MAX_SECONDS:  # NaN fails this too
        raise ValueError(f"duration {echo(text)} is over 100 years" if v > MAX_SECONDS
                         else f"invalid duration {echo(text)}")
    return v


def _parse(text: str | int | float) -> float:
    if isinstance(text, bool):
        raise ValueError("not a duration")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError("duration must not be negative")
        return float(text)
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    if s == "0":
        return 0.0
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if v < 0:
            raise ValueError("duration must not be negative")
        return v
    one = _one_unit(s)
    if one is not None:
        return one
    global _part
    if _part is None:
        import re

        _part = re.compile(_PART_RE)
    pos, total = 0, 0.0
    for m in _part.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"invalid duration {echo(text)} (use forms like 30s, 5m, 1h30m)")
    return total


def format_duration(seconds: float) -> str:
    """Short human form: ``47s``, ``12m``, ``2h``, ``3d``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
