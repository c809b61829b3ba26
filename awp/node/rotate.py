"""Key rotation in the engine: our records going out, peers' records coming in.

Going out: our own records (oldest first, from ``identity.json``) travel in
the ``rotation`` field of our ``auth`` line to every peer whose hello lists
the ``rotate`` cap, with the commitment to our next key.  A record is owed
to every peer we knew when we rotated (``rotation_owed``, written at the
daemon's start from the identity file, so a kill at any point loses
nothing); being owed is business, so the daemon dials each such peer until
one connection has carried the record and the peer's ``resume`` came back,
which it sends only after storing the record.

Coming in: the peer's chain is checked (shape, both signatures) on the event
loop, then judged and applied in one transaction (awp/store/rotations.py)
before admission, so the peer is admitted as what it was (its allowlist
entry, its grants, the keys we dialed it at) and its resume is computed from
its threads under the new key.  A hello that later carries a key rotated
away is refused (``err auth``, "KEY rotated to KEY").
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from ..store import rotations as store
from ..wire import board as board_wire
from ..wire import rotation as R
from ..wire.grants import expires_ms, make_grant
from ..wire.timefmt import now_ms

if TYPE_CHECKING:
    from .connection import Connection
    from .engine import Engine
    from .handshake import Handshake

log = logging.getLogger("awp.node")

FIELD = "rotation"  # auth.rotation: {"next": commitment, "chain": [records]}


class RotationOwed:
    """Business: a peer that has not yet taken our newest rotation record."""

    kind, kept = "rotation", False

    def with_peer(self, c: sqlite3.Connection, peer: str, now: int) -> bool:
        return c.execute("SELECT 1 FROM rotation_owed WHERE peer = ?", (peer,)).fetchone() \
            is not None

    def peers(self, c: sqlite3.Connection, now: int) -> set[str]:
        return store.owed(c)


class Rotations:
    """Our chain and commitment, and what we know of peers' rotations."""

    def __init__(self, engine: Engine, chain: list[dict], next_key: str) -> None:
        self.engine = engine
        self.chain = [r for r in chain if isinstance(r, dict)]
        self.commit = R.commitment(next_key)
        self.successors: dict[str, str] = {}  # old key -> the key it moved to
        self.taken = 0  # records of peers applied since start
        self.refused = 0  # records of peers refused since start
        self.conflicts = 0
        engine.business.add(RotationOwed())

    @property
    def seq(self) -> int:
        return int(self.chain[-1].get("seq", 0)) if self.chain else 0

    @property
    def former_keys(self) -> set[str]:
        return {str(r.get("old")) for r in self.chain}

    def _sign(self, g: dict) -> dict:
        """The same grant signed again by us (for a moved subject, or under our new key)."""
        return make_grant(self.engine.identity, g["sub"], list(g["caps"]), expires_ms(g),
                          g.get("aud") or None)

    async def start(self) -> None:
        """Owe our newest record to every peer, once; re-issue our grants; load what we know."""
        eng = self.engine
        seq, me, olds, now = self.seq, eng.identity.key, self.former_keys, now_ms()

        def job(c: sqlite3.Connection) -> tuple[int, int, dict[str, str]]:
            owed = store.owe(c, seq, me) if seq else 0
            regranted = store.reissue_own(c, olds, self._sign, now) if seq else 0
            store.sweep(c, now, self._sign)
            return owed, regranted, store.successors(c)

        owed, regranted, self.successors = await eng.writer.run(job)
        for r in self.chain:  # our own past keys: our topics are named by them
            board_wire.learn_rotation(str(r.get("old")), str(r.get("new")))
        for old, new in self.successors.items():
            board_wire.learn_rotation(old, new)
        if owed or regranted:
            log.info("rotation %d: owed to %d peers, %d grants re-issued under %s",
                     seq, owed, regranted, me)
        self._extend_policy()

    def _extend_policy(self) -> None:
        """A key we allow or trust is allowed or trusted under the keys it rotated to."""
        cfg = self.engine.config
        for keys in (cfg.allow, cfg.trust):
            for old in list(keys):
                cur = self.current(old)
                if cur != old:
                    keys.add(cur)

    def current(self, key: str) -> str:
        seen = {key}
        while (nxt := self.successors.get(key)) and nxt not in seen:
            key = nxt
            seen.add(key)
        return key

    # -- the handshake --------------------------------------------------------------

    def bind(self, hs: Handshake) -> None:
        hs.refuse_key = self.refusal
        hs.rotation = self.auth_field
        hs.max_chain = self.engine.config.limits.rotation_chain

    def refusal(self, key: str) -> str:
        """For a hello: why a key we know was rotated away is refused, else ""."""
        if key in self.successors:
            return f"{key} rotated to {self.current(key)}; this key is retired"
        if key in self.former_keys:
            return "hello carries a key we rotated away from"
        return ""

    def auth_field(self, peer_hello: dict) -> dict | None:
        """What our auth carries to a peer that lists the cap (nothing to others)."""
        caps = peer_hello.get("caps")
        if not isinstance(caps, list) or R.CAP not in caps:
            return None
        out: dict = {"next": self.commit}
        if self.chain:
            out["chain"] = self.chain[-R.MAX_CHAIN:]
        return out

    async def take(self, conn: Connection) -> str:
        """Apply the rotation field of the peer's auth; "" or the reason to refuse."""
        field = getattr(conn.hs, "peer_auth", {}).get(FIELD)
        if not isinstance(field, dict):
            return ""
        nxt = field.get("next")
        commit = nxt if isinstance(nxt, str) and len(nxt) == 43 else ""
        return await self._take(field.get("chain", []), conn.peer_key, commit, "the hello's")

    async def take_relayed(self, chain_in: object, origin: str) -> str:
        """Records a signed document of ``origin`` carried (presence): hosts that never
        met it learn its rotation, and refuse the old key from then on."""
        if not isinstance(chain_in, list) or not chain_in:
            return ""
        if all(isinstance(r, dict) and r.get("old") in self.successors for r in chain_in):
            return ""  # held already: the common case costs no signature check
        return await self._take(chain_in, origin, "", "the document's origin")

    async def _take(self, chain_in: object, key: str, commit: str, whose: str) -> str:
        lim = self.engine.config.limits
        if not isinstance(chain_in, list) or len(chain_in) > lim.rotation_chain:
            return (f"rotation chain must be a list of at most {lim.rotation_chain} records"
                    " (limits.rotation_chain)")
        try:
            chain = [R.check(r) for r in chain_in]
        except R.RotationError as e:
            self.refused += 1
            return f"rotation record refused ({e.kind}): {e.detail}"
        if chain and chain[-1].new != key:
            return f"rotation chain does not end at {whose} key"
        eng, now = self.engine, now_ms()

        def job(c: sqlite3.Connection) -> tuple[list[R.Rotation], str]:
            applied, why = store.take_chain(c, chain, now, self._sign, lim.rotation_conflicts)
            for rot in applied:  # known before any reader can see the commit
                self.successors[rot.old] = rot.new
                board_wire.learn_rotation(rot.old, rot.new)  # its topics follow it
            if not why and commit:
                from ..store import ops

                ops.ensure_peer(c, key, now)
                store.note_commitment(c, key, commit)
            return applied, why

        applied, why = await eng.writer.run(job)
        for rot in applied:
            self.taken += 1
            log.warning("peer %s rotated its key to %s (record seq %d)", rot.old, rot.new, rot.seq)
            self._forget(rot.old)
        if applied:
            self._extend_policy()
        if why:
            self.refused += 1
            if "(conflict)" in why:
                self.conflicts += 1
            log.warning("refused %s: %s", key, why)
        return why

    def _forget(self, old: str) -> None:
        """The old key's link and redial loop are the new key's now."""
        slot = self.engine.peers.slots.get(old)
        if slot is not None:
            if slot.conn is not None:
                slot.conn.close("the peer rotated its key")
            slot.kick.set()  # its loop finds no business under the old key and ends

    # -- delivery -----------------------------------------------------------------------

    async def delivered(self, conn: Connection) -> None:
        """The peer resumed: it stored what our auth carried (or never will read it)."""
        if not self.seq:
            return
        peer, seq = conn.peer_key, self.seq
        await self.engine.writer.run(lambda c: store.paid(c, peer, seq))

    def status(self) -> dict:
        return {"key_seq": self.seq, "former_keys": sorted(self.former_keys),
                "peers_rotated": len(self.successors), "taken": self.taken,
                "refused": self.refused, "conflicts": self.conflicts}
