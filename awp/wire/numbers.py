"""Which numbers from a peer we can hold.

JSON integers have no bound, SQLite's are signed 64-bit and Python's ``bool``
is an ``int``.  A count, size or sequence number a peer sends is accepted
only as a real integer in ``[0, 2**63)``: anything else would overflow the
row it is stored in, failing the whole transaction around it.
"""

from __future__ import annotations

INT64_MAX = 2 ** 63 - 1


def is_count(v: object) -> bool:
    """True for an ``int`` (not a ``bool``) in ``[0, 2**63)``."""
    return type(v) is int and 0 <= v <= INT64_MAX
