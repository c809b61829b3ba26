"""Key links on the engine (cap ``keys``): carrying ours, taking the peers'.

We carry, in our auth to peers that list the cap, the whole statements that
list our key; a peer's statements are kept when they list the key it
authenticated with (a peer cannot vouch for links of other keys), and a
statement that lists our key too, signed by every key, becomes one we carry.
``awp peers`` then shows a peer's linked keys as one identity.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..store import keylinks as store
from ..wire import keylink as K
from ..wire.timefmt import now_ms
from .extension import Extension

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine
    from .handshake import Handshake

log = logging.getLogger("awp.node")


class KeyLinks(Extension):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.carried: list[dict] = []
        self.taken = 0  # statements of peers kept since start
        self.refused = 0

    async def on_start(self) -> None:
        self.carried = await self.engine.read(store.carried)

    # -- the handshake ----------------------------------------------------------------

    def bind(self, hs: Handshake) -> None:
        hs.keylinks = self.auth_field

    def auth_field(self, peer_hello: dict) -> list[dict] | None:
        caps = peer_hello.get("caps")
        if not isinstance(caps, list) or K.CAP not in caps or not self.carried:
            return None
        return self.carried

    async def on_established(self, conn: Connection, prev: dict) -> None:
        field = getattr(conn.hs, "peer_auth", {}).get(K.FIELD)
        if not isinstance(field, list) or not field:
            return
        me, key, links = self.engine.identity.key, conn.peer_key, []
        for st in field[:K.MAX_CARRIED]:
            try:
                link = K.check(st)
            except K.KeyLinkError as e:
                self.refused += 1
                log.info("key link from %s refused: %s", key[:18], e.detail)
                continue
            if key in link.keys:
                links.append(link)
        if not links:
            return
        now = now_ms()

        def job(c) -> bool:
            kept = [store.keep(c, lk, me in lk.keys, now) for lk in links]
            self.taken += sum(kept)
            return any(k and me in lk.keys for k, lk in zip(kept, links, strict=True))

        if await self.engine.writer.run(job):
            self.carried = await self.engine.read(store.carried)

    # -- the local API ----------------------------------------------------------------

    async def start_link(self, others: list[str]) -> dict:
        """A statement linking our key and ``others``, signed by us: the others co-sign."""
        return K.make(self.engine.identity, others, now_ms())

    async def install(self, st: dict) -> dict:
        """Co-sign ``st`` if it lacks our signature; keep it once every key signed it.
        Returns the statement and the keys whose signature it still lacks."""
        me = self.engine.identity.key
        if me not in K.missing(st) and me not in st["keys"]:
            raise K.KeyLinkError(f"the statement does not list our key {me}")
        if me in K.missing(st):
            st = K.cosign(st, self.engine.identity)
        lacking = K.missing(st)
        if not lacking:
            link = K.check(st)
            await self.engine.writer.run(lambda c: store.keep(c, link, True, now_ms()))
            self.carried = await self.engine.read(store.carried)
        return {"statement": st, "missing": lacking}
