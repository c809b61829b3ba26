"""Dialing one key at several endpoints: happy eyeballs, first to answer as the key wins.

The first endpoint is dialed at once, the next after :data:`STAGGER` or as
soon as an attempt fails, and so on.  An attempt whose peer says another key
in its hello fails there ("key mismatch"), before our auth is written: that
peer gets our hello and nothing else.  The first attempt whose hello names
the key leads; every other attempt is cancelled or, if its own hello comes
later, closed without an auth, so the peer sees exactly one authenticated
connection (two would replace each other at its end).  A leader that then
fails (its auth does not verify, the link drops) gives the others another
round; one the key itself refused (``err`` after its hello: an invite
spent, an allowlist) ends the dial, since every endpoint leads to the same
policy.

The winner's endpoint and how long it took to resume are recorded on its
address row, whose most recent success ranks it first next time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ..store import reach
from ..wire.address import AddressError, parse_address
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.node")

STAGGER = 0.25  # seconds before the next endpoint is tried while one is still dialing
MAX_RACE = 8  # endpoints one dial tries (the best ranked of a peer's addresses)


class DialError(Exception):
    """Could not reach or handshake with a peer; ``refused`` when the peer's key said
    no, ``waking`` when the failure looks like a peer still waking (a sleeping sandbox)."""

    def __init__(self, text: str, refused: bool = False, *, waking: bool = False) -> None:
        super().__init__(text)
        self.refused = refused
        self.waking = waking


def key_check(addr: str, key: str) -> Callable[[str], str]:
    """A handshake ``check_peer`` that refuses any key but ``key`` at ``addr``."""
    def check(answered: str) -> str:
        return "" if answered == key else (
            f"key mismatch: {addr} answered as {answered}, expected {key}")
    return check


class DialFailed(Exception):
    """No endpoint reached the key; ``errors`` says what each one did."""

    def __init__(self, errors: dict[str, str], refused: str = "", waking: bool = False) -> None:
        self.errors = errors
        self.refused = refused
        self.waking = waking  # some endpoint failed as a waking peer does
        text = refused or "; ".join(f"{a}: {e}" for a, e in errors.items()) or "no endpoint"
        super().__init__(text)


@dataclass
class Won:
    """The connection a race produced, which endpoint won and what became of the rest."""

    conn: Connection
    addr: str
    ms: float
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class _Attempt:
    addr: str
    started: float = 0.0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: bool = False
    lost: bool = False  # cancelled or closed because another endpoint led
    error: str = ""
    refused: bool = False
    waking: bool = False
    conn: Connection | None = None
    ms: float = 0.0


class _Round:
    """One round of attempts: who leads, and a wake-up whenever anything changes."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.leader: _Attempt | None = None
        self.attempts: list[_Attempt] = []
        self._changed = trio.Event()

    def poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def changed(self) -> None:
        await self._changed.wait()

    def checker(self, att: _Attempt) -> Callable[[str], str]:
        """The handshake's ``check_peer`` for one attempt."""
        def check(answered: str) -> str:
            if answered != self.key:
                return f"key mismatch: {att.addr} answered as {answered}, expected {self.key}"
            if self.leader is None:
                self.leader = att
                for other in self.attempts:
                    if other is not att and not other.done:
                        other.lost = True
                        other.scope.cancel()
                self.poke()
            return "" if self.leader is att else "another endpoint answered first"
        return check

    def failed(self) -> int:
        return sum(1 for a in self.attempts if a.done and not a.lost)


def dialable(addrs: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split endpoints into those this build can dial and the rest, with why."""
    ok: list[str] = []
    skipped: dict[str, str] = {}
    for a in dict.fromkeys(addrs):
        try:
            parse_address(a)
            ok.append(a)
        except AddressError as e:
            skipped[a] = f"not dialable by this awp ({e})"
    return ok, skipped


async def dial_key(engine: Engine, key: str, addrs: list[str], *, timeout: float | None = None,
                   auth_extra: Callable[[bytes, bytes], dict] | None = None) -> Won:
    """Reach ``key`` through the first of ``addrs`` that answers as it; raise :class:`DialFailed`."""
    todo, errors = dialable(addrs)
    waking = False
    batch = todo[:MAX_RACE]  # the best ranked: a peer's hellos cannot make us dial more
    if len(batch) > 1:
        log.info("dialing %s at %d endpoints, %s first", key[:18], len(batch), batch[0])
    while batch:
        rnd = _Round(key)
        await _run_round(engine, rnd, batch, timeout, auth_extra)
        lead = rnd.leader
        for a in rnd.attempts:
            if a.error and not a.lost:
                errors[a.addr] = a.error
                waking = waking or a.waking
        if lead is not None and lead.conn is not None:
            await _remember(engine, key, lead)
            return Won(lead.conn, lead.addr, lead.ms, errors)
        if lead is not None and lead.refused:
            raise DialFailed(errors, refused=lead.error)
        # Endpoints that only lost to a leader that then failed go again.
        batch = [a.addr for a in rnd.attempts if a.lost]
    raise DialFailed(errors, waking=waking)


async def _run_round(engine: Engine, rnd: _Round, batch: list[str], timeout: float | None,
                     auth_extra: Callable[[bytes, bytes], dict] | None) -> None:
    async with trio.open_nursery() as n:
        for addr in batch:
            if rnd.leader is not None:
                att = _Attempt(addr, lost=True, done=True)
                rnd.attempts.append(att)
                continue
            att = _Attempt(addr, started=trio.current_time())
            rnd.attempts.append(att)
            n.start_soon(_attempt, engine, rnd, att, timeout, auth_extra)
            before = rnd.failed()
            with trio.move_on_after(STAGGER):
                while rnd.leader is None and rnd.failed() == before:
                    await rnd.changed()
        while not all(a.done for a in rnd.attempts):
            await rnd.changed()


async def _attempt(engine: Engine, rnd: _Round, att: _Attempt, timeout: float | None,
                   auth_extra: Callable[[bytes, bytes], dict] | None) -> None:
    try:
        with att.scope:
            att.conn = await engine.dial_and_run(
                att.addr, expect_key=rnd.key, timeout=timeout,
                check_peer=rnd.checker(att), auth_extra=auth_extra)
            att.ms = (trio.current_time() - att.started) * 1000
            if rnd.leader is None:  # simultaneous open: the peer's own connection
                rnd.leader = att
        if att.conn is None:
            att.lost = True
    except DialError as e:
        att.error = str(e)
        att.refused = e.refused
        att.waking = e.waking
    finally:
        att.done = True
        rnd.poke()


async def _remember(engine: Engine, key: str, won: _Attempt) -> None:
    """The winner's handshake time on its address row (its success is recorded on connect)."""
    ms, now = int(won.ms), now_ms()
    try:
        await engine.writer.run(lambda c: reach.address_won(c, key, won.addr, ms, now))
    except Exception as e:  # a record, not the connection
        log.warning("cannot record how %s was reached: %s", key[:18], e)
