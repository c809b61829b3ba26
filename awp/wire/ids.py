"""Message ids: ULIDs that increase strictly per sender.

Resume compares ids as strings, so a sender must never emit an id that sorts
at or below one it emitted before: not within one millisecond, not after the
clock steps back, not after a restart.  The generator therefore remembers the
last id and, whenever the fresh time-based id would not be larger, issues the
previous id plus one (as a 128-bit number).  The store seeds it with the
largest id ever sent and allocates inside the queuing transaction.
"""

from __future__ import annotations

import os
import secrets
import threading

from .timefmt import now_ms

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(ALPHABET)}
_MAX = (1 << 128) - 1


# Every pair of characters, indexed by the 10 bits it spells.
_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]
_PAIR_SHIFTS = range(120, -1, -10)


def encode_ulid(value: int) -> str:
    """26 Crockford base32 characters for a 128-bit integer (130 bits, the top two 0).

    Ten bits a table look-up: five times faster than a character at a time,
    and an id is drawn for every ack.
    """
    if not 0 <= value <= _MAX:
        raise ValueError("a ULID is a 128-bit unsigned integer")
    pairs = _PAIRS
    return "".join([pairs[(value >> s) & 1023] for s in _PAIR_SHIFTS])


_LOW_BITS = 40  # the last four pairs (eight characters) of an id


def encode_run(first: int, n: int) -> list[str]:
    """:func:`encode_ulid` of ``first`` .. ``first + n - 1``.

    Ids of a run differ in their low bits only (unless a carry crosses bit
    40), so the first 18 characters are spelled once and each id adds four
    pairs: the acks of a stored run draw one id each.
    """
    last = first + n - 1
    if n <= 0:
        return []
    if first >> _LOW_BITS != last >> _LOW_BITS or last > _MAX:
        return [encode_ulid(v) for v in range(first, last + 1)]
    head = encode_ulid(first)[:18]
    p = _PAIRS
    low = first & ((1 << _LOW_BITS) - 1)
    return [head + p[v >> 30 & 1023] + p[v >> 20 & 1023] + p[v >> 10 & 1023] + p[v & 1023]
            for v in range(low, low + n)]


def decode_ulid(text: str) -> int:
    """The 128-bit value of a ULID string (case-insensitive)."""
    if len(text) != 26:
        raise ValueError("a ULID has 26 characters")
    value = 0
    for c in text.upper():
        try:
            value = (value << 5) | _DECODE[c]
        except KeyError:
            raise ValueError(f"bad ULID character {c!r}") from None
    if value > _MAX:
        raise ValueError("ULID overflows 128 bits")
    return value


def is_ulid(text: object) -> bool:
    if not isinstance(text, str) or len(text) != 26:
        return False
    try:
        decode_ulid(text)
    except ValueError:
        return False
    return text == text.upper()


def ulid_time_ms(text: str) -> int:
    return decode_ulid(text) >> 80


_POOL_IDS = 256  # ids' worth of random bits drawn from the kernel at once


class IdGenerator:
    """Strictly increasing ULIDs, seeded with the last id issued."""

    __slots__ = ("_last", "_clock", "_lock", "_pool", "_at")

    def __init__(self, last: str | None = None, clock=now_ms) -> None:
        self._last = decode_ulid(last) if last else 0
        self._clock = clock
        # The event loop (acks, pings) and the store's writer thread both draw ids.
        self._lock = threading.Lock()
        # Random bits are read from the kernel for many ids at once: each
        # os.urandom call lets go of the GIL, and under load the event loop
        # then waited for the writer thread to hand it back once per ack.
        self._pool = b""
        self._at = 0

    def seed(self, last: str | None) -> None:
        """Never go below ``last`` (e.g. the largest id found in the store)."""
        if last:
            self._last = max(self._last, decode_ulid(last))

    @property
    def last(self) -> str | None:
        return encode_ulid(self._last) if self._last else None

    @property
    def last_value(self) -> int:
        """The last id as its 128-bit number (0: none yet), without spelling it:
        asked before every line that may leave ahead of its commit."""
        return self._last

    def next_run(self, n: int) -> list[str]:
        """``n`` ids in a row, as ``n`` calls of :meth:`next` within one
        millisecond give them: one fresh draw, then each the one before plus
        one (the acks of a stored run take one each)."""
        if n <= 1:
            return [self.next()] if n == 1 else []
        with self._lock:
            fresh = self._fresh()
            if fresh + n - 1 > _MAX:
                raise OverflowError("ULID space exhausted")
            self._last = fresh + n - 1
        return encode_run(fresh, n)

    def _fresh(self) -> int:
        """The next id's value (the lock held): the clock and random bits, or
        the last id plus one when that would not be larger."""
        if self._at >= len(self._pool):
            self._pool, self._at = os.urandom(10 * _POOL_IDS), 0
        rnd = self._pool[self._at:self._at + 10]
        self._at += 10
        fresh = (self._clock() << 80) | int.from_bytes(rnd, "big")
        return fresh if fresh > self._last else self._last + 1

    def next(self) -> str:
        with self._lock:
            fresh = self._fresh()
            if fresh > _MAX:
                raise OverflowError("ULID space exhausted")
            self._last = fresh
        return encode_ulid(fresh)


_THREAD_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


def new_thread_id() -> str:
    """``thr_`` and eight characters from an unambiguous alphabet."""
    return "thr_" + "".join(secrets.choice(_THREAD_ALPHABET) for _ in range(8))


def new_blob_ref(gen: IdGenerator) -> str:
    return "b_" + gen.next()
