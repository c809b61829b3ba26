"""Bulk transfer (cap ``bulk``): big files beside the line protocol.

The sender's msg names the file by its root hash, size and piece hashes
(:mod:`awp.wire.bulk`) and is acked like any other; the receiver then opens a
side connection to the sender (:mod:`awp.node.bulk_side`) and asks for the
pieces it lacks, one at a time: ``want`` i, then ``piece`` i and its raw
bytes.  Each piece is hashed and written at its offset off the event loop,
and its bit is set in the commit that follows, so at most the piece in flight
is lost to a ``kill -9`` of either side.  A piece whose hash does not match
is asked for again; so is a piece ``verify`` finds damaged on disk.

The receiver dials because the receiver knows what it lacks, and so the
sender only uses the bulk way when it has an address to be dialed at; a peer
without the cap gets the in-band chunks, as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import time
from typing import TYPE_CHECKING

import trio

from ..store import bulk as store
from ..store import ops
from ..store.blobs import BlobTooLarge, part_path
from ..wire import bulk as wire
from ..wire.timefmt import now_ms
from .bulk_side import Side, SideClosed, dial
from .extension import Extension

if TYPE_CHECKING:
    import sqlite3

    from .connection import Connection
    from .engine import Engine

log = logging.getLogger("awp.bulk")

_ROUNDS = 4  # times one piece may fail its check in one fetch before we stop
PUSH_WAIT = 60.0  # how long a receiver that asked the sender to dial it waits
PUSH_MAX = 4  # pushes one peer may have us dialing for at once (more asks are dropped)


class Live:
    """A transfer in progress in this process: what ``awp blobs`` turns into a rate."""

    __slots__ = ("started", "bytes", "last")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.bytes = 0
        self.last = self.started


class Bulk(Extension):
    """The bulk extension: sender's staging, receiver's fetches, the sender's serving."""

    sides = (wire.SIDE, wire.PUSH_SIDE)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.live: dict[tuple[str, str, str], Live] = {}
        self._running: set[tuple[str, str]] = set()
        self._pushing: set[tuple[str, str]] = set()  # sender: pushes we are dialing for
        self._pushed: dict[tuple[str, str], trio.Event] = {}  # receiver: pushes asked for

    # -- sender -----------------------------------------------------------------

    def usable(self, key: str) -> bool:
        """Whether files to ``key`` may go the bulk way: it lists the cap, and one of
        us can dial the other (it dials our advertised address, or we dial the
        address we reached it at and push)."""
        conn = self.engine.peers.active(key)
        return (conn is not None and wire.CAP in conn.peer_caps
                and (self.engine.advertised() is not None or conn.outbound))

    @staticmethod
    def hash_in_place(src: str, limit: int) -> tuple[str, int, dict]:
        """Thread: the path, size and ``bulk`` field of a file to send, read where it is.

        A bulk file is not copied into the home (a copy of 16 GiB would cost
        as much disk again, and minutes): its piece hashes, taken now, are in
        the msg, so a piece changed before it crossed is refused by the
        receiver's check instead of arriving changed.
        """
        path = os.path.realpath(src)
        with open(path, "rb") as fi:
            size = os.fstat(fi.fileno()).st_size
            if size > limit:
                raise BlobTooLarge(src, size, limit, "limits.bulk_bytes")
            piece = wire.piece_size(size)
            hashes = wire.hash_file(fi.fileno(), size, piece)
        return path, size, wire.describe(size, piece, hashes)

    async def serve_side(self, conn: Connection, rest: bytes) -> None:
        """A peer's side connection to us: it wants pieces of files we sent it
        (``bulk``), or it is a sender we asked to dial us, pushing (``bulk-push``)."""
        side, key = Side(conn.stream, rest), conn.peer_key
        conn.close_reason = "side connection"
        if conn.hs.peer.get("side") == wire.PUSH_SIDE:
            return await self._take_push(side, key)
        await self._serve(side, key)

    async def _serve(self, side: Side, key: str) -> None:
        """Answer ``want`` lines with pieces of the files we sent ``key``."""
        files: dict[str, tuple[int, wire.Description]] = {}
        counted = 0  # of side.wire_out, already added to a row's wire bytes
        try:
            while True:
                req = await side.line()
                ref = req.get("ref")
                if not isinstance(ref, str):
                    return
                if req.get("t") == "done":
                    w, counted = side.wire_out - counted, side.wire_out
                    await self.engine.writer.run(
                        lambda c, r=ref, w=w: store.delivered(c, key, r, w, now_ms()))
                    continue
                if req.get("t") != "want":
                    return
                if ref not in files:
                    found = await self.engine.read(lambda c, r=ref: _out_file(c, key, r))
                    if found is None:
                        await side.send_line({"t": "err", "code": "blob_refused", "ref": ref,
                                              "detail": "no such bulk file for you"})
                        return
                    files[ref] = (os.open(found[0], os.O_RDONLY), found[1])
                fd, desc = files[ref]
                try:
                    i = wire.check_index(req.get("i"), desc.count)
                except wire.BulkError as e:
                    await side.send_line({"t": "err", "code": "bad_frame", "detail": str(e)})
                    return
                off, n = wire.piece_span(desc.size, desc.piece, i)
                before = side.wire_out
                head = {"t": "piece", "ref": ref, "i": i, "n": n}
                # Counted before it leaves, so a kill -9 here cannot hide a re-sent piece;
                # the bytes written so far (the piece before, seal records and all) with it.
                w, counted = side.wire_out - counted, side.wire_out
                await self.engine.writer.run_relaxed(
                    lambda c, r=ref, w=w: store.served(c, key, r, w, now_ms()))
                await side.send_line(head)
                await side.send_file(fd, off, n)
                live = self.live.setdefault((key, "out", ref), Live())
                live.bytes += side.wire_out - before
                live.last = time.monotonic()
        except SideClosed:
            pass
        finally:
            for fd, _d in files.values():
                os.close(fd)

    # -- receiver ---------------------------------------------------------------

    def stored_inbound(self, c: sqlite3.Connection, conn: Connection, line: dict, seq: int,
                       now: int) -> list:
        if line.get("t") != "msg" or not isinstance(line.get("parts"), list):
            return []
        lim = self.engine.config.limits
        out: list = []
        for p in line["parts"]:
            if not (isinstance(p, dict) and p.get("k") == "blob" and "bulk" in p
                    and isinstance(p.get("ref"), str) and p["ref"]):
                continue
            refusal, fetch = store.offer_in(c, self.engine.blobs_dir, conn.peer_key, line, p,
                                            lim.bulk_bytes, lim.peer_bulk_bytes, now)
            if refusal is not None:
                err = {"t": "err", "code": "blob_refused", "ref": refusal.ref,
                       "detail": refusal.detail}
                if refusal.re:
                    err["re"] = refusal.re
                out.append(err)
            elif fetch:
                out.append(lambda k=conn.peer_key, r=p["ref"]: self.fetch(k, r))
        return out

    async def on_start(self) -> None:
        for key, ref in await self.engine.read(store.fetching):
            self.start(key, ref)

    async def on_established(self, conn: Connection, prev: dict) -> None:
        key = conn.peer_key
        for peer, ref in await self.engine.read(lambda c: store.fetching(c, key)):
            self.start(peer, ref)

    def start(self, key: str, ref: str) -> None:
        if (key, ref) not in self._running:
            self.engine.spawn(lambda: self.fetch(key, ref))

    async def fetch(self, key: str, ref: str) -> None:
        """Fetch what we lack of ``ref`` from ``key``; retried while its link is up."""
        if (key, ref) in self._running:
            return
        self._running.add((key, ref))
        wait = 1.0
        try:
            while True:
                try:
                    await self._fetch(key, ref)
                    return
                except SideClosed as e:
                    log.info("bulk %s from %s interrupted: %s", ref, key[:18], e)
                if self.engine.peers.active(key) is None:
                    return  # the next established link starts us again
                await trio.sleep(wait)
                wait = min(wait * 2, 30.0)
        finally:
            self._running.discard((key, ref))

    async def _fetch(self, key: str, ref: str) -> None:
        eng = self.engine
        r = await eng.read(lambda c: _in_file(c, eng.blobs_dir, key, ref))
        if r is None:
            return
        path, desc, have = r
        todo = store.missing(have, desc.count)
        if not todo:
            await self._finish(key, ref)
            return
        try:
            side = await dial(eng, key)
        except SideClosed as e:
            if not await self._ask_push(key, ref, str(e)):
                raise
            r = await eng.read(lambda c: _in_file(c, eng.blobs_dir, key, ref))
            if r is not None and store.missing(r[2], r[1].count):
                raise SideClosed(f"{e}; the sender's push ended with pieces missing") from None
            return
        try:
            await self._pieces(side, key, ref, path, desc, todo)
        finally:
            await side.aclose()

    # -- when the receiver cannot dial the sender ---------------------------------

    async def _ask_push(self, key: str, ref: str, why: str) -> bool:
        """Ask the sender, over the link, to dial us and push; wait for that to end.
        False when there is no link to ask on (the caller retries later)."""
        conn = self.engine.peers.active(key)
        if conn is None or wire.CAP not in conn.peer_caps:
            return False
        done = self._pushed[(key, ref)] = trio.Event()
        log.info("bulk %s: cannot dial %s (%s); asking it to dial us", ref, key[:18], why)
        try:
            await conn.send_raw_line(conn.session.line({"t": wire.DIAL_LINE, "ref": ref}))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return False
        with trio.move_on_after(PUSH_WAIT):
            await done.wait()
        if self._pushed.get((key, ref)) is done:
            del self._pushed[(key, ref)]
        if not done.is_set():
            raise SideClosed(f"{why}; asked to dial us instead, it did not within {PUSH_WAIT:.0f}s")
        return True

    async def on_line(self, conn: Connection, line: dict, raw: bytes) -> bool:
        """Sender: ``bulk-dial`` (the receiver cannot reach us: we dial and push).
        Receiver: ``bulk-dial-failed`` (nor could the sender reach us)."""
        t, ref, key = line.get("t"), line.get("ref"), conn.peer_key
        if t not in (wire.DIAL_LINE, wire.DIAL_FAILED_LINE):
            return False
        if not isinstance(ref, str) or not ref or len(ref) > 200:
            return True
        if t == wire.DIAL_FAILED_LINE:
            detail = str(line.get("detail") or "")[:200]
            await self.engine.writer.run(lambda c: store.note_error(
                c, key, ref, f"neither side could dial the other: {detail}", now_ms()))
            done = self._pushed.get((key, ref))
            if done is not None:
                done.set()
        elif ((key, ref) not in self._pushing
              and sum(k == key for k, _r in self._pushing) < PUSH_MAX):
            self._pushing.add((key, ref))
            self.engine.spawn(lambda: self._push(conn, key, ref))
        return True

    async def _push(self, conn: Connection, key: str, ref: str) -> None:
        """Sender: dial ``key`` and serve ``ref`` on that side connection."""
        try:
            if await self.engine.read(lambda c: _out_file(c, key, ref)) is None:
                return
            try:
                side = await dial(self.engine, key, side=wire.PUSH_SIDE)
            except SideClosed as e:
                with trio.move_on_after(10):
                    await conn.send_raw_line(conn.session.line(
                        {"t": wire.DIAL_FAILED_LINE, "ref": ref, "detail": str(e)[:300]}))
                return
            try:
                await side.send_line({"t": "push", "ref": ref})
                await self._serve(side, key)
            finally:
                await side.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            log.info("bulk push of %s to %s ended: %s", ref, key[:18], e)
        finally:
            self._pushing.discard((key, ref))

    async def _take_push(self, side: Side, key: str) -> None:
        """Receiver: the sender dialed us because we asked; fetch on its connection."""
        first = await side.line()
        ref = first.get("ref")
        done = self._pushed.get((key, ref)) if isinstance(ref, str) else None
        if first.get("t") != "push" or done is None:
            return  # not a push we asked for
        try:
            r = await self.engine.read(lambda c: _in_file(c, self.engine.blobs_dir, key, ref))
            if r is not None:
                path, desc, have = r
                await self._pieces(side, key, ref, path, desc, store.missing(have, desc.count))
        finally:
            done.set()

    async def _pieces(self, side: Side, key: str, ref: str, path: str,
                      desc: wire.Description, todo: list[int]) -> None:
        eng = self.engine
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        live = self.live.setdefault((key, "in", ref), Live())
        failures: dict[int, int] = {}
        try:
            while todo:
                bad = []
                for i in todo:
                    off, n = wire.piece_span(desc.size, desc.piece, i)
                    await side.send_line({"t": "want", "ref": ref, "i": i})
                    head = await side.line()
                    if head.get("t") == "err":
                        await self._given_up(key, ref, f"the sender refused: {head.get('detail')}")
                        return
                    if head.get("t") != "piece" or head.get("i") != i or head.get("n") != n:
                        raise SideClosed(f"expected piece {i} of {n} bytes, got {head}")
                    ok = await _receive_piece(side, fd, off, n, desc.hash_of(i))
                    await eng.writer.run_relaxed(
                        lambda c, i=i, ok=ok, n=n: store.mark(c, key, ref, i, ok, n if ok else 0,
                                                             n + 64, now_ms()))
                    live.bytes += n
                    live.last = time.monotonic()
                    if not ok:
                        failures[i] = failures.get(i, 0) + 1
                        if failures[i] >= _ROUNDS:
                            await self._given_up(key, ref, f"piece {i} failed its check"
                                                 f" {_ROUNDS} times")
                            return
                        bad.append(i)
                todo = bad
            await trio.to_thread.run_sync(os.fsync, fd)
        finally:
            os.close(fd)
        await self._finish(key, ref)
        try:
            await side.send_line({"t": "done", "ref": ref})
        except SideClosed:
            pass

    async def _finish(self, key: str, ref: str) -> None:
        eng = self.engine

        def job(c: sqlite3.Connection) -> str:
            dest = store.finish_in(c, eng.blobs_dir, key, ref, now_ms())
            r = c.execute("SELECT th FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                          (key, ref)).fetchone()
            ops.add_notice(c, eng.ids, key, "blob", f"file {os.path.basename(dest)} from"
                           f" {key[:18]} is complete (bulk, every piece verified): {dest}",
                           now_ms(), th=r[0] if r else "", data={"path": dest})
            return dest

        dest = await eng.writer.run(job)
        eng.changes.publish({"kind": "blob", "peer": key, "ref": ref, "path": dest})
        self.live.pop((key, "in", ref), None)

    async def _given_up(self, key: str, ref: str, why: str) -> None:
        def job(c: sqlite3.Connection) -> None:
            c.execute("UPDATE blobs SET status = 'refused', error = ?, updated = ?"
                      " WHERE peer = ? AND dir = 'in' AND ref = ?", (why[:300], now_ms(), key, ref))
        await self.engine.writer.run(job)
        log.warning("bulk %s from %s given up: %s", ref, key[:18], why)

    async def verify(self, key: str, ref: str) -> dict:
        """Recheck a received file's pieces on disk; damaged ones are fetched again."""
        eng = self.engine
        r = await eng.read(lambda c: _in_file(c, eng.blobs_dir, key, ref))
        if r is None:
            return {"ref": ref, "error": "no such bulk file"}
        path, desc, have = r
        bad = await trio.to_thread.run_sync(_damaged, path, desc, have)
        if bad:
            await eng.writer.run(lambda c: store.unmark(c, key, ref, bad, desc.piece, desc.size,
                                                        now_ms()))
            self.start(key, ref)
        return {"ref": ref, "pieces": desc.count, "bad": bad}


def annotate(bulk: Bulk | None, c: sqlite3.Connection, rows: list[dict]) -> list[dict]:
    """Add the bulk figures to ``awp blobs`` rows: percent, rate, ETA, pieces, refetches."""
    figures = store.progress(c)
    now = time.monotonic()
    for b in rows:
        f = figures.get((b["peer"], b["dir"], b["ref"]))
        if f is None:
            continue
        size = max(1, b["size"])
        if b["dir"] == "in":
            done = size if b["status"] == "complete" else f["done"]
        else:
            done = size if f["state"] == "delivered" else min(size, f["served"] * f["piece"])
        live = bulk.live.get((b["peer"], b["dir"], b["ref"])) if bulk is not None else None
        rate = 0.0
        if live is not None and live.bytes and now - live.last < 5 and live.last > live.started:
            rate = live.bytes / (live.last - live.started)
        b.update({"bulk": True, "root": f["root"], "piece": f["piece"], "pieces": f["pieces"],
                  "done": done, "percent": round(100.0 * done / size, 1),
                  "rate": round(rate), "eta_s": round((size - done) / rate, 1) if rate else None,
                  "served": f["served"], "refetched": f["refetched"], "wire_bytes": f["wire"],
                  "bulk_state": f["state"] or ("verified" if b["status"] == "complete" else "")})
    return rows


def _out_file(c: sqlite3.Connection, key: str, ref: str) -> tuple[str, wire.Description] | None:
    f = c.execute("SELECT path, status FROM blobs WHERE peer = ? AND dir = 'out' AND ref = ?",
                  (key, ref)).fetchone()
    r = store.row(c, key, "out", ref)
    # A file the receiver refused whole is still served: it may ask for ranges of it.
    if f is None or r is None or not f[0]:
        return None
    return f[0], store.description(r)


def _in_file(c: sqlite3.Connection, blobs_dir: str, key: str,
             ref: str) -> tuple[str, wire.Description, bytes] | None:
    r = store.row(c, key, "in", ref)
    f = c.execute("SELECT status FROM blobs WHERE peer = ? AND dir = 'in' AND ref = ?",
                  (key, ref)).fetchone()
    if r is None or f is None or f[0] not in ("fetching", "complete"):
        return None
    path = store.data_path(c, blobs_dir, key, ref)
    return path or part_path(blobs_dir, key, ref), store.description(r), bytes(r["have"])


_BLOCK = 1 << 20  # a piece is received, hashed and written in blocks of this size


async def _receive_piece(side: Side, fd: int, off: int, n: int, want: bytes) -> bool:
    """Read one piece and check it: each block is hashed and written at its offset
    in a thread while the next is read, so the event loop only moves bytes.  The
    bytes written before the check do not count: the piece's bit is set (by the
    caller) only when the whole piece matches."""
    h = hashlib.sha256()
    sock = side.plain_socket()
    if sock is not None:  # a plain socket: the whole piece in one thread, no copies on the loop
        head = side.take_buffered(n)
        try:
            await trio.to_thread.run_sync(_recv_piece, sock.fileno(), head, h, fd, off, n,
                                          abandon_on_cancel=False)
        except OSError as e:
            raise SideClosed(str(e)) from None
        return h.digest() == want
    send, recv = trio.open_memory_channel[tuple[int, bytearray] | None](2)

    async def consume() -> None:
        async with recv:
            async for item in recv:
                if item is None:
                    return
                await trio.to_thread.run_sync(_hash_write, h, fd, item[1], item[0])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        async with send:
            done = 0
            while done < n:
                k = min(_BLOCK, n - done)
                await send.send((off + done, await side.exactly(k)))
                done += k
            await send.send(None)
    return h.digest() == want


def _recv_piece(sock: int, head: bytes, h, fd: int, off: int, n: int) -> None:
    """Thread: read ``n`` bytes of a piece from a plain socket (``head`` already read),
    hashing and writing each block at its offset."""
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    if head:
        _hash_write(h, fd, bytearray(head), off)
    got = len(head)
    while got < n:
        fill = 0
        want = min(_BLOCK, n - got)
        while fill < want:
            try:
                k = os.readv(sock, [view[fill:want]])
            except BlockingIOError:
                select.select([sock], [], [], 30.0)
                continue
            if not k:
                raise OSError("side connection closed inside a piece")
            fill += k
        _hash_write(h, fd, view[:want], off + got)
        got += want


def _hash_write(h, fd: int, data: bytearray | memoryview, off: int) -> None:
    """Thread: add a block to the piece's hash and write it at its offset."""
    h.update(data)
    view, start = memoryview(data), off
    while view:
        k = os.pwrite(fd, view, off)
        view, off = view[k:], off + k
    if hasattr(os, "posix_fadvise"):
        # Start writing the block back now (Linux does, for DONTNEED), so the
        # fsync at the end waits for the last blocks only, not for the file.
        os.posix_fadvise(fd, start, len(data), os.POSIX_FADV_DONTNEED)


def _damaged(path: str, desc: wire.Description, have: bytes) -> list[int]:
    """Thread: the pieces held as verified whose bytes on disk no longer match."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return [i for i in range(desc.count) if store.has(have, i)]
    bad = []
    try:
        for i in range(desc.count):
            if not store.has(have, i):
                continue
            off, n = wire.piece_span(desc.size, desc.piece, i)
            if wire.piece_hash(os.pread(fd, n, off)) != desc.hash_of(i):
                bad.append(i)
    finally:
        os.close(fd)
    return bad
