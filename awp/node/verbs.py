"""The agent's verbs: what the local agent asks the engine to do.

Sending a msg or a state, waiting for an ack, bye, grant, introduce, private
and sharing.  Split from :mod:`awp.node.engine` along the seam between what
peers send us (the engine's connection callbacks) and what our own agent
asks for: each verb queues a line of ours in one transaction and hands it to
the peer's connection in commit order (:meth:`AgentVerbs.hand_over`).

:class:`AgentVerbs` is mixed into :class:`~awp.node.engine.Engine` and uses
its members (``writer``, ``peers``, ``ids``, ``identity``, ``config``,
``mirror``, ``changes``, ``read``); it holds no state of its own.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable

import trio

from ..store import blobs as blobstore
from ..store import bulk as bulkstore
from ..store import grants as grantstore
from ..store import ops
from ..wire.canonical import compact_json
from ..wire.framing import MAX_LINE
from ..wire.grants import make_grant
from ..wire.ids import new_thread_id
from ..wire.messages import default_subject
from ..wire.timefmt import format_ts, now_ms
from .lineout import give_way
from .mime import guess_mime, sniff_file


class AgentVerbs:
    """The engine's verbs for the local agent (mixed into the engine)."""

    written_first = 0  # our lines written before their commit (status: store.written_first)

    def queued_elsewhere(self, key: str) -> None:
        """A line for ``key`` was queued outside commit order: rescan or redial."""
        conn = self.peers.active(key)
        if conn is not None:
            conn.rescan()
        else:
            self.peers.kick(key)

    def hand_over(self, key: str, result: tuple, pushed: dict | None = None,
                  committed: bool = True) -> None:
        """Writer hook, in commit order: give a queued line to ``key``'s connection.

        Our own sends call it twice (see :meth:`_send_hooks`): possibly before
        the commit, while its fsync runs, and again after it; ``pushed`` records
        which connection already has the line so it is handed over once.  A
        redial is only started after the commit, when the line can be found.
        """
        for host, copy in result[4] if len(result) > 4 else ():
            self.hand_over(host, copy, pushed, committed)
        ident = result[1]["id"]
        if ident not in self._ack_waiters and (key, ident) not in self._recent_acks:
            if len(self._ack_waiters) > 10_000:  # lines whose ack nobody awaits
                for stale in list(self._ack_waiters)[:5_000]:
                    del self._ack_waiters[stale]
            self._ack_waiters[ident] = (key, trio.Event())
        conn = self.peers.active(key)
        if conn is not None:
            how, to = pushed.get(key, ("", None)) if pushed is not None else ("", None)
            if to is not conn:
                for seq, t, text in result[3]:
                    conn.push(seq, t, text)
                conn.push(result[0], result[1]["t"], result[2])
                if pushed is not None:
                    pushed[key] = ("pushed", conn)
            elif how == "written":  # written before it was stored: now it has its place
                conn.sent_first(result[0])
        elif committed:
            self.peers.kick(key)

    def _send_first(self, key: str, build: Callable[[str, str], dict], now: int,
                    pushed: dict) -> tuple[str, dict, str] | None:
        """With the store held: write the line now if the connection is idle.

        Returns the id drawn for it with the line and its text, for the job
        to store as they are (None if nothing was drawn).  Synchronous, like
        everything from ``hold`` to the end of ``run_held``: no checkpoint
        comes between a line leaving and its commit, so nothing can cancel
        the one without the other.
        """
        conn = self.peers.active(key)
        if conn is None or not conn.caught_up():
            return None
        ident = self.ids.next()
        line = build(ident, format_ts(now))
        first = (ident, line, compact_json(line))
        data = first[2].encode("utf-8")
        if len(data) > MAX_LINE or not self.writer.may_send_early():
            return first
        if conn.send_first(ident, data + b"\n"):
            pushed[key] = ("written", conn)
        return first

    def _send_hooks(self, key: str) -> dict:
        """Writer hooks for a line we queue: early hand-over, then the committed one.

        ``pushed`` (also returned) maps a peer to how (``"pushed"`` to its send
        queue or ``"written"`` before it was stored) and to which connection
        the line was already handed.
        """
        pushed: dict = {}
        return {"early": lambda r: self.hand_over(key, r, pushed, committed=False),
                "on_commit": lambda r: self.hand_over(key, r, pushed), "pushed": pushed}

    def _mirror_copies(self, c: sqlite3.Connection, key: str, line: dict, now: int) -> list:
        return self.mirror.queue_copies(c, key, line, "out", now) if self.mirror else []

    async def stage_files(self, files: list[dict], key: str = "") -> list[dict]:
        """Copy files to send into the home, so later edits cannot tear them.

        Each item is ``{"path", "name"?, "mime"?}``; returns blob descriptions.
        Refuses (``BlobTooLarge``) before anything is queued.  To a peer that
        takes bulk transfers (awp/node/bulk.py) a large file is not copied but
        read in place, up to ``bulk_bytes``: its description carries its piece
        hashes (``bulk``), which the receiver checks every piece against.
        """
        staged = []
        out_dir = os.path.join(self.blobs_dir, "out")
        bulk = getattr(self, "bulk", None)
        lim = self.config.limits
        use_bulk = bulk is not None and bool(key) and bulk.usable(key)
        for f in files:
            path = f["path"]
            st = await trio.to_thread.run_sync(os.stat, path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{path} is not a regular file")
            big = use_bulk and (st.st_size >= lim.bulk_min or st.st_size > self.config.blob_limit)
            limit = lim.bulk_bytes if big else self.config.blob_limit
            if st.st_size > limit:
                raise blobstore.BlobTooLarge(path, st.st_size, limit,
                                             "limits.bulk_bytes" if big else
                                             "AWP_BLOB_LIMIT / blob_limit")
            ref = "b_" + self.ids.next()
            dest = os.path.join(out_dir, blobstore.safe_name(ref))
            extra = {}
            if big and st.st_size:  # read in place, checked by its piece hashes
                dest, size, extra["bulk"] = await trio.to_thread.run_sync(
                    bulk.hash_in_place, path, limit)
            else:
                size = await trio.to_thread.run_sync(blobstore.copy_private, path, dest, limit)
            name = f.get("name") or os.path.basename(path)
            mime = f.get("mime") or guess_mime(name, await trio.to_thread.run_sync(
                sniff_file, dest))
            staged.append({"ref": ref, "name": name, "mime": mime, "size": size, "path": dest,
                           **extra})
        return staged

    async def send_msg(
        self, key: str, parts: list[dict], *, th: str | None = None,
        subject: str | None = None, re: str | None = None, files: list[dict] | None = None,
        also: Callable[[sqlite3.Connection], None] | None = None,
    ) -> dict:
        """Queue a msg (and its files' chunks) in one transaction.

        ``also`` runs inside that transaction: what must be true exactly when
        the msg is queued (e.g. a served request's row closing).
        """
        new_thread = not th
        th = th or new_thread_id()
        now = now_ms()
        key = self.current_key(key)
        staged = await self.stage_files(files, key) if files else []
        parts = list(parts) + [
            {"k": "blob", "ref": b["ref"], "name": b["name"], "mime": b["mime"], "size": b["size"],
             **({"bulk": b["bulk"]} if "bulk" in b else {})}
            for b in staged]
        subj = subject or (default_subject(parts) if new_thread else "")

        def build(ident: str, ts: str) -> dict:
            line: dict = {"t": "msg", "id": ident, "ts": ts, "th": th}
            if re:
                line["re"] = re
            if subj and (new_thread or subject):
                line["subject"] = subj
            line["parts"] = parts
            return line

        def job(c: sqlite3.Connection, first: tuple | None) -> tuple:
            ops.ensure_peer(c, key, now)
            chunks = [row for b in staged if "bulk" not in b
                      for row in ops.queue_chunks(c, self.ids, key, th, b, now)]
            for b in staged:
                if "bulk" in b:
                    bulkstore.queue_out(c, key, th, b, now)
            res = ops.queue_line(c, self.ids, key, build, now=now, max_bytes=MAX_LINE,
                                 first=first)
            for b in staged:
                c.execute("UPDATE blobs SET msg_id = ? WHERE peer = ? AND dir = 'out' AND ref = ?",
                          (res[1]["id"], key, b["ref"]))
            ops.touch_thread_out(c, key, th, now, subject=subj)
            if also is not None:
                also(c)
            return (*res, chunks, self._mirror_copies(c, key, res[1], now))

        return await self._queue_own(key, build, job, now, direct=not staged)

    async def send_state(self, key: str, th: str, state: str, note: str = "") -> dict:
        now = now_ms()
        key = self.current_key(key)

        def build(ident: str, ts: str) -> dict:
            line = {"t": "state", "id": ident, "ts": ts, "th": th, "state": state}
            if note:
                line["note"] = note
            return line

        def job(c: sqlite3.Connection, first: tuple | None) -> tuple:
            ops.ensure_peer(c, key, now)
            res = ops.queue_line(c, self.ids, key, build, now=now, max_bytes=MAX_LINE,
                                 first=first)
            ops.touch_thread_out(c, key, th, now, state=state, note=note)
            return (*res, [], self._mirror_copies(c, key, res[1], now))

        return await self._queue_own(key, build, job, now)

    async def _queue_own(self, key: str, build: Callable[[str, str], dict],
                         job: Callable[[sqlite3.Connection, tuple | None], tuple], now: int,
                         direct: bool = True) -> dict:
        """Queue a msg or state of ours and get it to the peer as soon as it may go.

        The fast way, when nothing is queued for the store and the connection
        has written everything queued before: hold the store (no other line
        can be queued meanwhile, so this id is next in outbox order too),
        write the line, then store it with a commit that owes its fsync; the
        id reservation and disk checks of ``may_send_early`` make that as
        safe as sending after the commit.  Otherwise the line is queued and
        handed over by the writer's hooks.
        """
        hooks = self._send_hooks(key)
        on_commit, early = hooks["on_commit"], hooks["early"]
        # A line that leaves first commits without blocking on its fsync, so
        # the store is taken whenever nothing is queued, quiet or not.
        if not self.writer.hold(relaxed=direct):
            res = await self.writer.submit_nowait(lambda c: job(c, None), on_commit,
                                                  early=early).wait()
        else:
            # The store is held: what is started here is finished with no
            # checkpoint in between (run_held awaits nothing), so no
            # cancellation can leave a line sent and not stored.
            try:
                first = self._send_first(key, build, now, hooks["pushed"]) if direct else None
            except BaseException:
                self.writer.release()
                raise
            # A line that already left owes its fsync (see awp.store.owed).
            written = hooks["pushed"].get(key, ("",))[0] == "written"
            self.written_first += written
            if written or self.writer.quiet():
                res = await self.writer.run_held(lambda c: job(c, first), on_commit,
                                                 early=early, relaxed=written)
                if written:
                    # A peer on this host may have been woken by the line and
                    # be waiting for this CPU while we stored it: let it run
                    # before the rest of our bookkeeping (see give_way).
                    give_way()
            else:  # a durable commit on a busy store: the writer's thread, in order
                self.writer.release()
                res = await self.writer.submit_nowait(lambda c: job(c, first), on_commit,
                                                      early=early).wait()
        self.changes.publish({"kind": "sent", "peer": key, "th": res[1]["th"], "seq": res[0]})
        return {"id": res[1]["id"], "th": res[1]["th"], "line": res[1]}

    async def wait_ack(self, ident: str, timeout: float, peer: str = "") -> bool:
        """True once the peer our line ``ident`` went to acked it (or had already).

        Lines queued by this process have an event from the moment they were
        committed, so the common case needs no query; ``peer``, when the
        caller knows it, saves one when the ack came first.
        """
        if peer and (peer, ident) in self._recent_acks:
            return True
        waiter = self._ack_waiters.get(ident)
        if waiter is None:
            row = await self.read(lambda c: _out_line_acked(c, ident))
            if row is None or row[1] or (row[0], ident) in self._recent_acks:
                return row is not None
            waiter = self._ack_waiters.setdefault(ident, (row[0], trio.Event()))
        ev = waiter[1]
        with trio.move_on_after(max(0.0, timeout)):
            await ev.wait()
            return True
        return False

    async def bye(self, key: str, reason: str = "") -> bool:
        """Park the peer and say bye if connected; returns whether a bye went out
        (not when the connection stalled or broke: it is dropped instead)."""
        await self.writer.run(lambda c: ops.set_parked(c, key, True, reason))
        conn = self.peers.active(key)
        if conn is None:
            return False
        return await conn.send_bye(reason)

    async def grant(self, key: str, caps: list[str], ttl: float,
                    aud: str | None = None) -> dict:
        """Sign a grant for ``key``, keep it, and hand it over now if connected."""
        now = now_ms()
        g = make_grant(self.identity, key, caps, now + int(ttl * 1000), aud=aud)
        h = await self.writer.run(lambda c: (ops.ensure_peer(c, key, now),
                                             grantstore.put(c, g, "issued", now))[1])
        conn = self.peers.active(key)
        delivered = False
        if conn is not None and conn.established.is_set():
            try:
                await conn.send_grants([g])
                delivered = True
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        return {"hash": h, "grant": g, "delivered": delivered}

    async def introduce(self, to: str, peer: str, caps: list[str], ttl: float,
                        th: str | None = None) -> dict:
        """Send ``to`` the key and address of ``peer`` with a grant bound to ``peer``."""
        now = now_ms()

        def info(c: sqlite3.Connection) -> dict:
            row = c.execute("SELECT name FROM peers WHERE key = ?", (peer,)).fetchone()
            addrs = ops.ranked_addresses(c, peer)
            return {"key": peer, "name": row[0] if row else "",
                    "address": addrs[0]["addr"] if addrs else ""}

        about = await self.read(info)
        g = make_grant(self.identity, to, caps, now + int(ttl * 1000), aud=peer)
        th = th or new_thread_id()
        peer_info = {k: v for k, v in about.items() if v}

        def build(ident: str, ts: str) -> dict:
            return {"t": "introduce", "id": ident, "ts": ts, "th": th, "peer": peer_info,
                    "grant": g}

        def job(c: sqlite3.Connection) -> tuple:
            ops.ensure_peer(c, to, now)
            grantstore.put(c, g, "issued", now)
            res = ops.queue_line(c, self.ids, to, build, now=now, max_bytes=MAX_LINE)
            ops.touch_thread_out(c, to, th, now, subject=f"introduction to {about['name'] or peer}")
            return (*res, [])

        res = await self.writer.run_with_hook(job, lambda r: self.hand_over(to, r))
        return {"id": res[1]["id"], "th": th, "grant": g, "peer": peer_info}

    async def private(self, key: str, th: str) -> None:
        """Keep a thread out of sharing, on both sides, and withdraw hosts' copies."""
        now = now_ms()

        def build(ident: str, ts: str) -> dict:
            return {"t": "private", "id": ident, "ts": ts, "th": th}

        def job(c: sqlite3.Connection) -> tuple:
            c.execute("UPDATE threads SET private = 1 WHERE peer = ? AND th = ?", (key, th))
            res = ops.queue_line(c, self.ids, key, build, log=False, now=now)
            copies = self.mirror.withdraw(c, th, now, key) if self.mirror else []
            return (*res, [], copies)

        await self.writer.run_with_hook(job, lambda r: self.hand_over(key, r))

    async def set_shares(self, hosts: list[str]) -> None:
        """Replace the list of hosts we mirror to (remembered)."""
        self.shares = list(dict.fromkeys(hosts)) or None
        await self.writer.run(lambda c: ops.set_meta(c, "remember.share_with",
                                                      json.dumps(self.shares or [])))


def _out_line_acked(c: sqlite3.Connection, ident: str) -> tuple[str, bool] | None:
    """(peer, acked) of our logged line ``ident``; None when there is none."""
    row = c.execute("SELECT peer, t, acked FROM log WHERE dir = 'out' AND id = ?",
                    (ident,)).fetchone()
    return None if row is None else (row[0], ops.out_acked(c, row[0], ident, row[1], row[2]))
