"""What ``/v1/board/wait`` answers from: the posts a host has just stored, shaped once.

Every client following the board (a stream, or a long poll) is woken when
records are stored.  Each used to read the store again, shape the post
objects and encode its answer on every wake-up, which on a host whose clients
keep up cost about as much CPU per post as taking the post from its peer.  The
:class:`Feed` does that once per daemon: the first waiter to wake reads the
posts stored past the feed's top (every topic, one query) and encodes each post
object once; every waiter then takes what is in its scope past its own place
and joins the bytes into its answer.  A waiter that fell behind the feed, and
every waiter's first look, reads the store itself, as before.

What a waiter gets is exactly what reading the store would give it at that
moment: the feed's posts are read again whenever anything was committed since
they were read (SQLite's ``data_version``: an edit, a delete, a reply, a
retention drop, a stamp all change it), so no deleted or stale post is served
from it.  The answers are the same bytes as before.

A client that follows the board with a stream is pushed its posts by the
code that stored them (:meth:`Feed._push`): at the first hint of a commit,
the feed takes the commit's new records, and when they are all the store
holds past what it knew (seqs never go back, so no gap means nothing else
came in between), it shapes each post that no stored record names (the
store says so in the same transaction, :func:`awp.store.board.named`, for
the posts some follower follows) from its record, without a read, and
writes each parked follower its line straight to the socket
(:meth:`~awp.localapi.h11serve.HttpConnection.write_now`).  Such a
follower's task is not woken at all; one that cannot be pushed (it is
writing, behind, the socket is full, the commit holds something else) is
woken and looks as any waiter does.  A host's own posts cost its follower
(which is not sent them) next to nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import trio

from ..board import view
from ..node.engine import Engine
from ..store import board as sb
from ..wire.board import Record
from ..wire.canonical import compact_json

log = logging.getLogger("awp.daemon.board_feed")

LIVE_POSTS = 32  # a waiter reads up to this many posts on the event loop; more on a reader thread
CATCH_UP_POSTS = 500  # posts in one answer of a waiter that is far behind
FEED_POSTS = 64  # the feed reads at most this many posts at once
MAX_STORED = 256  # records kept from hints until a waiter looks (past it: read back)
NAMES_S = 10.0  # names shown (authors, topic labels) are looked up again after this long

if TYPE_CHECKING:
    from ..localapi.h11serve import Outlet
    from ..node.board import Board

Shape = Callable[[sqlite3.Connection | None, sb.Post, dict[str, str]], dict]


class Entry(NamedTuple):
    """A post in the feed: where it arrived, its scope, and its object, encoded."""

    seq: int
    topic: str
    mine: bool
    data: bytes


class Feed:
    """The posts stored lately, read and encoded once for every waiter of a daemon.

    ``entries`` hold every post readers see with ``floor < seq <= top``, as
    the store held them at ``version``.  A waiter whose place (every record up
    to it looked at) lies in that range takes its posts from here.  The
    floor is the lowest place of a waiter still taking from the feed, so one
    that is a wake-up behind the others is not sent to the store.
    """

    def __init__(self, engine: Engine, shape: Shape, board: Board | None = None) -> None:
        self.engine, self.shape, self.board = engine, shape, board
        self.entries: list[Entry] = []
        self.floor = self.top = 0
        self.version = -1  # -1: not read since the first waiter came
        self.more = False  # the last read stopped at FEED_POSTS: there are more past top
        self.changed = trio.Event()  # set (and replaced) when a board record is stored
        self.places: dict[int, int] = {}  # a waiter (its id) -> its place
        self.names: dict[str, str] = {}
        self._names_since = 0.0
        self.stored: dict[int, Record] = {}  # seq -> a post just stored, from its hint
        self._hints: contextlib.ExitStack | None = None
        self.ends: dict[int, float] = {}  # a waiter (its id) -> when its wait ends
        self._alarm: trio.CancelScope | None = None  # _ring's sleep, until the next end
        self.reads = 0  # how often the feed read the store (status of the bench)
        # Pushing (see the module's doc): every record up to ``known`` is in the store
        # and known to the feed (read, or pushed); -1 before the first read.
        self.known = -1
        self.followers: dict[int, Arrivals] = {}  # streams pushed their posts, by id
        self._taken: object = None  # the commit pushed last (its other hints: nothing new)
        self.pushed = 0  # lines written to followers by a push (status of the bench)

    # -- waiters ------------------------------------------------------------------------

    def join(self, waiter: object, place: int, until: float = math.inf) -> None:
        """A waiter starts: at ``place``, waiting until ``until`` (trio time) at the latest."""
        if self._hints is None:
            self._hints = contextlib.ExitStack()
            self._hints.enter_context(self.engine.changes.calling(self._hint, kinds=("board",)))
        self.places[id(waiter)] = place
        if until < math.inf:
            self.ends[id(waiter)] = until
            if self._alarm is None:
                self._alarm = trio.CancelScope(deadline=until)
                self.engine.spawn(self._ring)
            elif until < self._alarm.deadline:
                self._alarm.deadline = until

    def follow(self, waiter: Arrivals) -> None:
        """A joined stream is pushed its posts from now on (see :meth:`_push`)."""
        self.followers[id(waiter)] = waiter
        self._scope()

    def _scope(self) -> None:
        """Tell the board which posts the followers follow: a take asks the store which
        of those are plain.  Immutable sets, as a take may ask on the writer's thread."""
        if self.board is None:
            return
        if not self.followers:
            self.board.followed = None
            return
        me = self.engine.identity.key
        anyone = frozenset(t for w in self.followers.values() for t in w.wanted)
        own = frozenset(t for w in self.followers.values() if w.mine for t in w.wanted)
        self.board.followed = lambda r: r.topic in own or (r.topic in anyone and r.author != me)

    def leave(self, waiter: object) -> None:
        self.places.pop(id(waiter), None)
        self.ends.pop(id(waiter), None)
        if self.followers.pop(id(waiter), None) is not None:
            self._scope()
        if not self.places and self._hints is not None:
            self._hints.close()
            self._hints = None
            self.entries, self.version, self.more, self.stored = [], -1, False, {}
            self.known, self._taken = -1, None
        if not self.ends and self._alarm is not None:
            self._alarm.deadline = -math.inf  # _ring ends

    async def _ring(self) -> None:
        """Wake every waiter when one's time is up (it sees so and ends; the others wait
        on): one task for all, where a cancel scope per waiter and wake-up cost as much
        as the rest of a stream's wake-up."""
        while True:
            alarm = self._alarm
            assert alarm is not None
            with alarm:
                await trio.sleep_forever()
            if not self.ends:
                self._alarm = None
                return
            self._wake()
            now = trio.current_time()
            self._alarm = trio.CancelScope(
                deadline=min((t for t in self.ends.values() if t > now), default=math.inf))

    def _wake(self) -> None:
        """Wake every waiter: each looks (at the feed, or the store)."""
        self._wake_waiters()
        for w in self.followers.values():
            w.wake.set()

    def _wake_waiters(self) -> None:
        """Wake the waiters that are not pushed their posts."""
        self.changed.set()
        self.changed = trio.Event()

    def _hint(self, event: dict) -> None:
        """A board record was stored (and committed): wake every waiter once.

        The hint of a record :meth:`Board.take` stored carries it (``record``,
        never sent out of the process): a post nothing names yet is shaped
        from it, without reading it back and parsing it again.  It carries
        the whole commit too (``taken``, and ``plain``: its posts followers
        follow that no stored record names, when they were there to ask): at
        its first hint the followers are pushed its posts (:meth:`_push`).
        """
        rec, seq = event.get("record"), event.get("seq")
        if isinstance(rec, Record) and rec.kind == "post" and isinstance(seq, int) and seq:
            if len(self.stored) >= MAX_STORED:  # no waiter has looked for long: read back
                self.stored.clear()
            self.stored[seq] = rec
        taken = event.get("taken")
        if taken is None:
            self._wake()
            return
        if taken is self._taken:
            return  # the commit's first hint did it all
        self._taken = taken
        self._wake_waiters()
        if self.followers:
            try:
                self._push(taken, event.get("plain"))
            except Exception:  # a bug here must not fail the take that stored the records
                log.exception("board feed: pushing posts to followers failed")
                self._wake()

    def _push(self, taken: sb.Taken, plain: set[str] | None) -> None:
        """Write each parked follower the posts of one commit in its scope, or wake it.

        Pushed only when the commit's new records are all the store holds
        past ``known`` (their seqs follow it without a gap: seqs never go
        back, so no other commit has records in between), and only plain
        posts (no stored record names them: each is then shaped as its
        author wrote it, with no replies, as reading it back would).  A
        follower is pushed when it has looked at every record up to
        ``known`` and waits; the others are woken to look themselves.
        """
        seqs = taken.seqs
        new = sorted(((seqs.get(r.hash, 0), r) for r in taken.new
                      if seqs.get(r.hash, 0) > self.known), key=lambda x: x[0])
        if (plain is None or self.known < 0
                or any(s != self.known + 1 + i for i, (s, _r) in enumerate(new))):
            for w in self.followers.values():
                w.wake.set()
            return
        posts = [(s, r) for s, r in new if r.kind == "post"]
        top = new[-1][0] if new else self.known
        me = self.engine.identity.key
        shaped: dict[int, bytes] = {}
        for w in list(self.followers.values()):
            if not w.parked or w.place != self.known:
                w.wake.set()
                continue
            got = [(s, r) for s, r in posts if r.topic in w.wanted and (w.mine or r.author != me)]
            if any(r.hash not in plain for _s, r in got):
                w.wake.set()  # its store read shapes them
                continue
            data = []
            for s, r in got:
                if s not in shaped:
                    shaped[s] = self._shaped(s, r)
                data.append(shaped[s])
            if not w.pushed(data, got[-1][0] if got else 0, top):
                w.wake.set()
        self.known = top

    def _shaped(self, seq: int, rec: Record) -> bytes:
        """A plain post's object, encoded, from its record (a read only for a name not
        looked up lately)."""
        p = _plain(seq, rec)
        names = self._names()
        if rec.author in names and rec.topic in names:
            return compact_json(self.shape(None, p, names)).encode()
        return self.engine.read_sync(lambda c: compact_json(self.shape(c, p, names)).encode())

    def _names(self) -> dict[str, str]:
        """Names shown (authors, topic labels), forgotten every ``NAMES_S``."""
        now = time.monotonic()
        if now - self._names_since > NAMES_S or len(self.names) > 1024:
            self.names, self._names_since = {}, now
        return self.names

    # -- reading --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read what was stored past ``top``, if the store changed since the last read."""
        self.engine.read_sync(self._read)

    def _read(self, c: sqlite3.Connection) -> None:
        # The newest seq before the posts: anything stored after is read next time.
        version, last = sb.version_and_last(c)
        if version == self.version and not self.more:
            return
        self.known = max(self.known, last)
        if self.version == -1:
            self.floor = self.top = last  # waiters before it read the store themselves
            self.version, self.entries, self.stored = version, [], {}
            return
        # Read again from the lowest waiter still taking from here; one that far behind
        # would make this read full is let go (it reads the store, as a catch-up).
        pinned = [p for p in self.places.values() if self.floor <= p < self.top]
        floor = min(pinned, default=self.top)
        found = sb.plain_posts(c, floor, last, FEED_POSTS)
        if len(found) == FEED_POSTS and floor < self.top:
            floor = self.top
            found = sb.plain_posts(c, floor, last, FEED_POSTS)
        self.more = len(found) == FEED_POSTS
        posts = self._posts(c, found)
        names = self._names()
        me = self.engine.identity.key
        self.entries = [Entry(p.seq, p.topic, p.shown.author == me,
                              compact_json(self.shape(c, p, names)).encode())
                        for p in posts]
        self.floor, self.top = floor, found[-1][0] if self.more else last
        self.version = version
        self.stored = {s: r for s, r in self.stored.items() if s > self.floor}
        self.reads += 1

    def _posts(self, c: sqlite3.Connection, found: list[tuple[int, bool]]) -> list[sb.Post]:
        """The posts readers see among ``found``: a plain one from the record stored, any
        other (edited, replied to, gone, or stored without a hint) read back."""
        posts, others = [], []
        for seq, plain in found:
            rec = self.stored.get(seq)
            if plain and rec is not None:
                posts.append(_plain(seq, rec))
            else:
                others.append(seq)
        if others:
            posts = sorted(posts + sb.posts_at(c, others), key=lambda p: p.seq)
        return posts


def _plain(seq: int, rec: Record) -> sb.Post:
    """A post nothing names, as readers see it: as its author wrote it, no replies."""
    return sb.Post(view.Shown(hash=rec.hash, author=rec.author, ts=rec.ts, parent=rec.parent,
                              parts=rec.doc["parts"], edited=0), rec.topic, seq, 0)


class Arrivals:
    """Posts in scope that arrived after a cursor, as one answer or as a stream.

    Both wake when the board stores records and take everything past their
    place at once, from the feed while they keep up with it: records stored
    together (one line, one batch) come back together.  The stream is how a
    client that follows a topic pays one request for every post instead of a
    request per post.
    """

    def __init__(self, feed: Feed, topics: list[str], after: int, mine: bool) -> None:
        self.feed, self.topics, self.mine = feed, topics, mine
        self.wanted = set(topics)
        self.after = after  # the cursor: the seq of the last post returned
        self.place = after  # every record up to here was looked at (where a wait goes on)
        self.more = False  # the last look may have left posts behind
        self.names: dict[str, str] = {}  # authors and topics shown, kept for a stream
        self.wake = feed.changed  # what wakes it: its own event while it is pushed posts
        self.parked = False  # waiting for a wake-up (nothing of its stream under way)
        self.out: Outlet | None = None  # where a push writes (a followed stream)

    def _store(self, c: sqlite3.Connection, limit: int) -> tuple[list[bytes], int, int]:
        """Posts past the place read from the store, encoded; how many; the newest seq."""
        # The newest seq first: every post up to it is then seen by the query after it.
        last = sb.last_seq(c)
        me = self.feed.engine.identity.key
        posts = sb.posts_after(c, self.topics, self.place, me, self.mine, limit)
        if posts:
            self.after = posts[-1].seq
        if len(self.names) > 1024:
            self.names.clear()
        return [compact_json(self.feed.shape(c, p, self.names)).encode() for p in posts], \
            len(posts), last

    async def look(self) -> list[bytes]:
        """What is new past the place (which moves past it), each post encoded."""
        feed = self.feed
        feed.refresh()
        if feed.floor <= self.place:
            got = [e for e in feed.entries if e.seq > self.place and e.topic in self.wanted
                   and (self.mine or not e.mine)]
            self.place = max(self.place, feed.top)
            feed.places[id(self)] = self.place
            self.more = feed.more
            if got:
                self.after = got[-1].seq
            return [e.data for e in got]
        # Behind the feed (the first look, or a waiter that fell behind): the store.
        # Read right here while it is a few posts (a reader thread's two hand-overs
        # cost more CPU than the query); when there may be more, on a reader thread.
        engine, limit = feed.engine, LIVE_POSTS
        out, n, last = engine.read_sync(lambda c: self._store(c, LIVE_POSTS))
        if n >= LIVE_POSTS:
            limit = CATCH_UP_POSTS
            out, n, last = await engine.read(lambda c: self._store(c, CATCH_UP_POSTS))
        self.more = n >= limit
        self.place = self.after if self.more else max(self.place, self.after, last)
        feed.places[id(self)] = self.place
        return out

    def pushed(self, posts: list[bytes], last: int, top: int) -> bool:
        """Posts of a commit written to the stream by the feed (none: only the place
        moves); False, with nothing written or moved, when they must wait for a look."""
        if posts:
            if self.out is None or not self.out.write_now(self.answer(posts, last) + b"\n"):
                return False
            self.after = last
            self.feed.pushed += 1
        self.place = self.feed.places[id(self)] = top
        return True

    def answer(self, posts: list[bytes], cursor: int | None = None) -> bytes:
        """The answer object, as ``compact_json`` would write it, from encoded posts
        (the cursor: ``after``, unless given)."""
        return b'{"posts":[%b],"cursor":%d,"timed_out":false}' % (
            b",".join(posts), self.after if cursor is None else cursor)

    def timed_out(self) -> bytes:
        # The place, not the newest seq now: a post in scope stored since the last
        # look would be skipped by a wait starting there.
        return b'{"posts":[],"cursor":%d,"timed_out":true}' % self.place

    async def once(self, timeout: float) -> bytes:
        engine, feed = self.feed.engine, self.feed
        engine.waiting += 1
        feed.join(self, self.place)
        try:
            with trio.move_on_after(timeout):
                while True:
                    changed = feed.changed  # taken first: a record stored meanwhile wakes it
                    posts = await self.look()
                    if posts:
                        return self.answer(posts)
                    if self.more:  # a full read left posts past it: no record will say so
                        await trio.lowlevel.checkpoint()
                        continue
                    await changed.wait()
        finally:
            feed.leave(self)
            engine.waiting -= 1
        return self.timed_out()

    async def stream(self, timeout: float, out: Outlet | None = None) -> Any:
        """One line a wake-up with posts, as :meth:`once` answers; after ``timeout`` a
        last one with ``timed_out`` and the cursor to go on from.

        ``out``: the stream's outlet, through which the feed writes the lines
        of posts it pushes while this waits (the same lines); ``b""`` is
        yielded to have what a push wrote only in part go out.

        No cancel scope per wake-up: the feed wakes every waiter when one's
        time is up, and each looks at the clock."""
        engine, feed = self.feed.engine, self.feed
        engine.waiting += 1
        deadline = trio.current_time() + timeout
        feed.join(self, self.place, deadline)
        if out is not None:
            self.out = out
            feed.follow(self)
        try:
            while True:
                if out is not None:
                    self.wake = trio.Event()  # taken first: a record stored meanwhile wakes it
                else:
                    self.wake = feed.changed
                wake = self.wake
                posts = await self.look()
                if posts:
                    yield self.answer(posts) + b"\n"
                elif out is not None and out.unsent:
                    yield b""
                if self.more:  # a full read left posts past it: no record will say so
                    await trio.lowlevel.checkpoint()
                    continue
                if trio.current_time() >= deadline:
                    break
                self.parked = True
                try:
                    await wake.wait()
                finally:
                    self.parked = False
        finally:
            feed.leave(self)
            engine.waiting -= 1
        yield self.timed_out() + b"\n"
