"""How a peer's key is reached: the endpoint that won a dial, and the endpoints its hello lists.

Addresses are hints and keys are identity (SPEC.md section 8): each
``addresses`` row is one way to one key, ranked by :func:`ops.ranked_addresses`
(most recent success first within its source), so the endpoint that won the
last dial is the one tried first on the next.
"""

from __future__ import annotations

import sqlite3

from . import ops

# Endpoints of one key learnt from its hellos that never worked, kept at most.
MAX_HELLO_ADDRS = 16


def address_won(c: sqlite3.Connection, peer: str, addr: str, ms: int, now: int) -> None:
    """``addr`` won a dial to ``peer`` after ``ms`` milliseconds (dial to the peer's resume)."""
    ops.address_result(c, peer, addr, now)
    c.execute("UPDATE addresses SET hs_ms = ? WHERE peer = ? AND addr = ?", (ms, peer, addr))


def add_endpoints(c: sqlite3.Connection, peer: str, addrs: list[str], source: str,
                  now: int) -> None:
    """Remember every endpoint of a multi-endpoint address, or of a hello's ``addrs``.

    Endpoints from hellos are the peer's word about itself: those that never
    worked and that its latest hello no longer lists are forgotten, and at
    most :data:`MAX_HELLO_ADDRS` are kept, so a peer cannot grow the table by
    changing its list on every connection.
    """
    for a in addrs:
        ops.add_address(c, peer, a, source, now)
    if source != "hello":
        return
    listed = set(addrs)
    unproven = [r[0] for r in c.execute(
        "SELECT addr FROM addresses WHERE peer = ? AND source = 'hello' AND last_success = 0"
        " ORDER BY added_at DESC, addr", (peer,))]
    stale = [a for a in unproven if a not in listed]
    stale += [a for a in unproven if a in listed][MAX_HELLO_ADDRS:]
    for a in stale:
        c.execute("DELETE FROM addresses WHERE peer = ? AND addr = ?", (peer, a))
