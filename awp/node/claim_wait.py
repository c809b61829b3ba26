"""A claim that waits: the long poll behind ``awp work`` (``/v1/board/claim`` with ``wait``).

A worker with nothing to do asks once and is answered when an item may be
free for it, not on a timer: the daemon retries the claim when the topic
gets a new item (a top-level post) or an item comes back (a lease record
``released``, ``failed`` or ``expired``), and otherwise only every
:data:`FALLBACK_S` (a hint lost to a slow subscriber is the only reason to
look without one).  A claim on a queue whose owner is not connected waits
for the owner the same way, retried every :data:`NO_OWNER_S`.  One waiting
worker therefore costs the owner one request per chance of work, however
long it waits.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import trio

from ..board.market import Bid
from ..board.queue import Decision
from .board_queue import BoardQueue, NoOwner

FREEING = ("released", "failed", "expired")  # lease states that give an item back
FALLBACK_S = 15.0
NO_OWNER_S = 2.0

ReadRaw = Callable[[str], Awaitable[list[str]]]


class ClaimAsk:
    """One claimant's claim, asked again whenever the topic may have work for it."""

    def __init__(self, queue: BoardQueue, topic: str, req: str, offers: tuple[str, ...],
                 bid: Bid, timeout: float) -> None:
        self.queue = queue
        self.topic = topic
        self.req = req  # the same on every retry: a lost answer is given again
        self.offers = offers
        self.bid = bid
        self.timeout = timeout

    async def until_given(self, wait: float, read_raw: ReadRaw) -> Decision:
        """The first answer that is not "empty", or "empty" once ``wait`` seconds passed.

        Raises what :meth:`BoardQueue.request` raises; :class:`NoOwner` only
        when the owner stayed away for the whole wait.
        """
        deadline = trio.current_time() + wait
        with self.queue.engine.changes.subscribe() as events:
            while True:
                try:
                    d, _rec = await self.queue.request(
                        self.topic, "claim", req=self.req, timeout=self.timeout,
                        offers=self.offers, bid=self.bid)
                except NoOwner:
                    if trio.current_time() >= deadline:
                        raise
                    with trio.move_on_at(min(deadline, trio.current_time() + NO_OWNER_S)):
                        await events.receive()  # a new link may be the owner's
                        await trio.sleep(0.1)  # let the board exchange subscriptions first
                    continue
                if d.state != "empty" or trio.current_time() >= deadline:
                    return d
                with trio.move_on_at(min(deadline, trio.current_time() + FALLBACK_S)):
                    await self._until_freed(events, read_raw)

    async def _until_freed(self, events: trio.MemoryReceiveChannel, read_raw: ReadRaw) -> None:
        """Return once the topic gets an item or one of its items comes back."""
        while True:
            ev = await events.receive()
            if ev.get("kind") != "board" or ev.get("topic") != self.topic:
                continue
            if ev.get("rec") not in ("post", "lease") or not isinstance(ev.get("hash"), str):
                continue
            raws = await read_raw(ev["hash"])
            if not raws:
                continue
            doc = json.loads(raws[0])
            if doc.get("k") == "post" and not doc.get("parent"):
                return
            if doc.get("k") == "lease" and doc.get("state") in FREEING:
                return
