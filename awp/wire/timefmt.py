"""Wire timestamps: RFC 3339 UTC with milliseconds out, any RFC 3339 in."""

from __future__ import annotations

import re
import time
from datetime import date
from functools import lru_cache

# re.ASCII: \d must not match other scripts' digits; \Z: "$" would let a trailing
# newline through.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z",
    re.ASCII,
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class RisingClock:
    """Milliseconds that never repeat: each reading is past the last one.

    For signed statements whose signature names them: Ed25519 is
    deterministic, so two equal statements signed in one millisecond are one
    signature, and a host that drops what it has met would drop the second.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0

    def next(self, now: int | None = None) -> int:
        self.last = max(now_ms() if now is None else now, self.last + 1)
        return self.last


_last_second: tuple[int, str] = (-1, "")  # (Unix second, its formatted prefix)


def format_ts(ms: int) -> str:
    """``2026-09-25T17:03:11.123Z`` for a Unix time in milliseconds.

    Every line we build carries one; the date part only changes once a
    second, so it is kept (one tuple, swapped whole, safe across threads).
    """
    global _last_second
    secs, frac = divmod(ms, 1000)
    last, prefix = _last_second
    if secs != last:
        t = time.gmtime(secs)
        prefix = (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
                  f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.")
        _last_second = (secs, prefix)
    return f"{prefix}{frac:03d}Z"


def format_ts_seconds(ms: int) -> str:
    """RFC 3339 with whole seconds, the form grant ``exp`` uses."""
    t = time.gmtime(ms // 1000)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}Z"
    )


# The seconds part of the last stamp in our own form (``...T17:03:11.123Z``)
# and its Unix ms: the lines of a burst share it, so they skip the full parse.
_last_parsed: tuple[str, int] = ("\0", 0)

_EPOCH_DAY = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=1024)
def _day_ms(year: int, mon: int, day: int) -> int:
    """Unix milliseconds at the start of a UTC day (``ValueError`` for no such day).

    Every record a relay takes has its time parsed, and records of one day
    share the date: it is worked out once, not through a ``datetime`` each time.
    """
    return (date(year, mon, day).toordinal() - _EPOCH_DAY) * 86_400_000


def parse_ts(text: str) -> int:
    """Parse any RFC 3339 timestamp into Unix milliseconds.

    Raises ``ValueError`` for anything else.  Fractions beyond milliseconds
    (nanoseconds, as Go writes them) are truncated.
    """
    global _last_parsed
    if type(text) is str and len(text) == 24 and text[19] == "." and text[23] == "Z":
        prefix, base = _last_parsed
        frac = text[20:23]
        if text.startswith(prefix) and frac.isascii() and frac.isdigit():
            return base + int(frac)
    if not isinstance(text, str):
        raise ValueError("timestamp is not a string")
    m = _RFC3339.match(text)
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    g = m.groups()
    hh, mm, ss = int(g[3]), int(g[4]), int(g[5])
    frac = g[6]
    ms = int((frac[1:] + "000")[:3]) if frac else 0
    zone = g[7]
    if ss == 60:  # leap second: clamp, as most implementations do
        ss = 59
    if hh > 23 or mm > 59 or ss > 59:
        raise ValueError(f"not a time of day: {text!r}")
    epoch_ms = _day_ms(int(g[0]), int(g[1]), int(g[2])) + ((hh * 60 + mm) * 60 + ss) * 1000 + ms
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        offset = (int(zone[1:3]) * 60 + int(zone[4:6])) * 60_000
        epoch_ms -= sign * offset
    elif len(text) == 24 and text[19] == "." and zone == "Z":
        _last_parsed = (text[:19], epoch_ms - ms)
    return epoch_ms
