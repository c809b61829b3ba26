"""How we say we can be reached, and how we reach a key named with its endpoints.

``hello.addr`` stays one string (the reference peer reads it as one
address): the primary endpoint.  ``hello.addrs`` (ours) lists every
endpoint, and a peer that reads it stores them all as that key's
addresses.  Connecting to an ``awp:`` address or an invite reaches its key
through :func:`awp.node.dialer.dial_key` and remembers every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store import ops, reach
from ..wire.address import Address, AddressError
from ..wire.multiaddr import MAX_ENDPOINTS, check_endpoint
from ..wire.timefmt import now_ms
from .dialer import Won, dial_key

if TYPE_CHECKING:
    import sqlite3

    from .connection import Connection
    from .engine import Engine


def endpoints(engine: Engine) -> list[str]:
    """Every endpoint we advertise, the primary (``hello.addr``) first, at most 8.

    An explicit ``--advertise`` is the only one; otherwise every listener,
    tailcat first, with a wildcard TCP or ws listener replaced by the host's
    addresses when the daemon handed in a way to list them (``engine.expand``).
    """
    adv = engine.config.advertise
    if adv is not None:
        return [] if adv.strip().lower() in ("", "none") else [adv]
    expand: Callable[[Address], list[str]] | None = getattr(engine, "expand", None)
    out: list[str] = []
    for a in sorted(engine.listen_addrs, key=lambda a: a.kind != "tailcat"):
        if ep := a.endpoint():
            out.append(ep)
        elif expand is not None:
            out += expand(a)
    first = engine.advertised()
    if first:
        out.insert(0, first)
    return list(dict.fromkeys(out))[:MAX_ENDPOINTS]


def hello_addrs(engine: Engine) -> list[str] | None:
    """``hello.addrs``: sent only when there is more than one endpoint to tell."""
    found = endpoints(engine)
    return found if len(found) > 1 else None


def peer_endpoints(hello: dict) -> list[str]:
    """The endpoints a peer's hello lists (``addrs``, then ``addr``), checked and bounded."""
    raw = hello.get("addrs")
    items = raw[:MAX_ENDPOINTS] if isinstance(raw, list) else []
    if isinstance(hello.get("addr"), str):
        items = [hello["addr"], *items]
    out = []
    for e in items:
        try:
            out.append(check_endpoint(e))
        except AddressError:
            continue
    return list(dict.fromkeys(out))[:MAX_ENDPOINTS + 1]


def store_hello_endpoints(c: sqlite3.Connection, conn: Connection, now: int) -> None:
    """Writer thread, recording a hello: every endpoint it lists, as the key's addresses."""
    if isinstance(conn.hs.peer.get("addrs"), list):
        reach.add_endpoints(c, conn.peer_key, peer_endpoints(conn.hs.peer), "hello", now)


async def connect_key(engine: Engine, key: str, addrs: list[str], *, timeout: float | None,
                      auth_extra: Callable[[bytes, bytes], dict] | None = None
                      ) -> tuple[Won | None, dict[str, str]]:
    """Reach ``key`` at any of ``addrs``; ``(None, {})`` when it is connected already.

    On success every endpoint is remembered as the key's address (source
    ``connect``: the user handed them over), also those this build cannot
    dial yet; the answer's dict says what became of the others.
    """
    if engine.peers.active(key) is not None:
        await engine.business.unpark(key)
        return None, {}
    known = [a for a, _src in await engine.dial_addresses(key)]
    # What won before goes first: the key's addresses in rank order, then the rest as given.
    ordered = [a for a in known if a in addrs] + [a for a in addrs if a not in known]
    won = await dial_key(engine, key, ordered, timeout=timeout, auth_extra=auth_extra)
    now = now_ms()

    def job(c: sqlite3.Connection) -> None:
        reach.add_endpoints(c, key, list(dict.fromkeys(addrs)), "connect", now)
        ops.address_result(c, key, won.addr, now)

    await engine.writer.run(job)
    return won, won.errors
