"""The board's feed serves waiters exactly what reading the store would (awp/daemon/board_feed.py).

A real SQLite file with two connections, as in the daemon: records are
written on the writer's and announced with the hint ``Board.take`` publishes;
waiters read on the event loop's reader.
"""

from __future__ import annotations

import json

import trio

from awp.daemon.board_feed import FEED_POSTS, MAX_STORED, Arrivals, Feed
from awp.node.events import Broadcaster
from awp.store import board as sb
from awp.store.db import connect, migrate
from awp.wire import board as b
from awp.wire.canonical import compact_json
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
TOPIC = f"{OWNER.key}/ops"
OTHER = f"{OWNER.key}/dev"


class _Engine:
    """What the feed uses of the engine: a reader on the loop, hints, our key."""

    def __init__(self, path: str, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.writer = connect(path)
        migrate(self.writer)
        self.reader = connect(path)
        self.changes = Broadcaster()
        self.identity = OWNER
        self.waiting = 0
        for topic in (TOPIC, OTHER):
            sb.put_topic(self.writer, b.make_topic(OWNER, topic.split("/")[1], 1, T0), T0)
            sb.subscribe(self.writer, topic, T0)

    def spawn(self, make) -> None:
        self.nursery.start_soon(make)

    def read_sync(self, fn):
        return fn(self.reader)

    async def read(self, fn):
        return fn(self.reader)

    def store(self, *recs: b.Record, hint: bool = True) -> None:
        """Store records in one commit, then hint each as Board.take does."""
        self.writer.execute("BEGIN")
        seqs = [sb.put_record(self.writer, r, T0) for r in recs]
        self.writer.execute("COMMIT")
        for r, seq in zip(recs, seqs, strict=True):
            self.changes.publish({"kind": "board", "topic": r.topic, "hash": r.hash,
                                  "rec": r.kind, "seq": seq,
                                  **({"record": r} if hint else {})})


def _shape(c, p: sb.Post, names: dict) -> dict:
    return {"hash": p.shown.hash, "text": p.shown.parts[0]["text"], "ts": p.shown.ts,
            "edited": p.shown.edited, "replies": p.replies, "seq": p.seq}


def _post(text: str, ts: int, topic: str = TOPIC, who: Identity = ALICE, **kw) -> b.Record:
    return b.make_post(who, topic, [{"k": "text", "text": text}], ts, **kw)


def _from_store(eng: _Engine, after: int, topics: list[str], mine: bool = False) -> list[dict]:
    """What a waiter reading the store itself gets past ``after``."""
    return [_shape(eng.reader, p, {}) for p in sb.posts_after(
        eng.reader, topics, after, OWNER.key, mine)]


def _texts(lines: list[bytes]) -> list[str]:
    return [p["text"] for line in lines for p in json.loads(line)["posts"]]


def _run(tmp_path, body) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            eng = _Engine(str(tmp_path / "awp.db"), nursery)
            feed = Feed(eng, _shape)  # type: ignore[arg-type]
            await body(eng, feed)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_waiter_that_keeps_up_gets_the_same_bytes_as_from_the_store(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        w = Arrivals(feed, [TOPIC], sb.last_seq(eng.reader), mine=False)
        feed.join(w, w.place)
        assert await w.look() == []  # the first look reads the store
        start = w.place
        eng.store(_post("one", T0), _post("mine", T0 + 1, who=OWNER),
                  _post("elsewhere", T0 + 2, topic=OTHER))
        reads = feed.reads
        got = await w.look()
        assert feed.reads == reads + 1  # one read for the daemon
        assert got == [compact_json(p).encode() for p in _from_store(eng, start, [TOPIC])]
        assert _texts([w.answer(got)]) == ["one"]
        assert w.place == sb.last_seq(eng.reader)
        assert await w.look() == []  # nothing new: no read at all
        assert feed.reads == reads + 1

    _run(tmp_path, body)


def test_every_waiter_shares_one_read_and_takes_its_own_scope(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        top = sb.last_seq(eng.reader)
        ops, dev, both = (Arrivals(feed, [TOPIC], top, mine=True), Arrivals(feed, [OTHER], top,
                          mine=False), Arrivals(feed, [TOPIC, OTHER], top, mine=False))
        for w in (ops, dev, both):
            feed.join(w, w.place)
            await w.look()
        eng.store(_post("a", T0), _post("b", T0 + 1, topic=OTHER), _post("c", T0 + 2, who=OWNER))
        reads = feed.reads
        assert _texts([ops.answer(await ops.look())]) == ["a", "c"]
        assert _texts([dev.answer(await dev.look())]) == ["b"]
        assert _texts([both.answer(await both.look())]) == ["a", "b"]
        assert feed.reads == reads + 1

    _run(tmp_path, body)


def test_a_post_deleted_before_a_waiter_takes_it_is_not_served(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        top = sb.last_seq(eng.reader)
        quick, slow = Arrivals(feed, [TOPIC], top, False), Arrivals(feed, [TOPIC], top, False)
        for w in (quick, slow):
            feed.join(w, w.place)
            await w.look()
        p, q = _post("gone", T0), _post("stays", T0 + 1)
        eng.store(p, q)
        assert _texts([quick.answer(await quick.look())]) == ["gone", "stays"]
        # Deleted and edited after the feed read it, before the slow waiter looked.
        eng.store(b.make_delete(ALICE, p, T0 + 2), b.make_edit(
            ALICE, q, [{"k": "text", "text": "edited"}], T0 + 3), hint=False)
        assert _texts([slow.answer(await slow.look())]) == ["edited"]
        assert await quick.look() == []

    _run(tmp_path, body)


async def _following(eng: _Engine, feed: Feed) -> Arrivals:
    """A waiter on TOPIC from the store's newest seq, joined to the feed, that has looked once."""
    w = Arrivals(feed, [TOPIC], sb.last_seq(eng.reader), False)
    feed.join(w, w.place)
    await w.look()
    return w


def test_a_post_named_before_it_came_is_read_back_as_readers_see_it(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        w = await _following(eng, feed)
        p = _post("first text", T0)
        reply = _post("a reply", T0 + 2, parent=p.hash)
        eng.store(b.make_edit(ALICE, p, [{"k": "text", "text": "second text"}], T0 + 1), reply)
        assert _texts([w.answer(await w.look())]) == ["a reply"]
        eng.store(p)  # out of order: its edit and a reply are already held
        [got] = json.loads(w.answer(await w.look()))["posts"]
        assert (got["text"], got["replies"], got["edited"]) == ("second text", 1, T0 + 1)

    _run(tmp_path, body)


def test_a_waiter_behind_the_feed_reads_the_store_and_then_keeps_up(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        start = sb.last_seq(eng.reader)
        ahead = Arrivals(feed, [TOPIC], start, False)
        feed.join(ahead, ahead.place)
        await ahead.look()
        for i in range(3):
            eng.store(_post(f"p{i}", T0 + i))
            await ahead.look()
        late = Arrivals(feed, [TOPIC], start, False)  # a cursor from before all three
        feed.join(late, late.place)
        assert _texts([late.answer(await late.look())]) == ["p0", "p1", "p2"]
        eng.store(_post("p3", T0 + 3))
        assert _texts([late.answer(await late.look())]) == ["p3"]
        assert _texts([ahead.answer(await ahead.look())]) == ["p3"]

    _run(tmp_path, body)


def test_a_stream_ends_with_the_cursor_to_go_on_from_and_the_feed_is_let_go(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        short, long = (Arrivals(feed, [TOPIC], sb.last_seq(eng.reader), False) for _ in "ab")
        lines: dict[str, list[bytes]] = {"short": [], "long": []}
        ended: dict[str, float] = {}

        async def follow(name: str, w: Arrivals, timeout: float) -> None:
            t0 = trio.current_time()
            async for line in w.stream(timeout):
                lines[name].append(line)
            ended[name] = trio.current_time() - t0

        with trio.fail_after(10):  # a stream its deadline never woke would hang here
            async with trio.open_nursery() as n:
                n.start_soon(follow, "long", long, 1.5)
                n.start_soon(follow, "short", short, 0.6)
                await trio.sleep(0.2)
                eng.store(_post("live", T0))
        for name in ("short", "long"):  # each ends at its own time, not the other's
            got = lines[name]
            assert [json.loads(x)["timed_out"] for x in got] == [False, True]
            assert _texts(got) == ["live"]
            assert json.loads(got[-1])["cursor"] == sb.last_seq(eng.reader)
        assert 0.6 <= ended["short"] < 1.2 and ended["long"] >= 1.5
        assert feed.places == {} and feed.ends == {} and eng.changes._subs == {}
        assert eng.waiting == 0
        await trio.sleep(0.05)
        assert feed._alarm is None  # the feed's timer task ended with its last waiter

    _run(tmp_path, body)


def test_records_kept_from_hints_are_bounded_while_no_waiter_looks(tmp_path):
    async def body(eng: _Engine, feed: Feed) -> None:
        w = await _following(eng, feed)
        posts = [_post(f"p{i}", T0 + i) for i in range(MAX_STORED + 10)]
        for p in posts:  # a waiter stuck writing to its client never looks
            eng.store(p)
            assert len(feed.stored) <= MAX_STORED
        got = _texts([w.answer(await w.look())])
        while w.more:
            got += _texts([w.answer(await w.look())])
        assert got == [f"p{i}" for i in range(len(posts))]

    _run(tmp_path, body)


def test_a_post_past_a_full_read_of_other_topics_comes_without_another_record(tmp_path):
    # One batch: more posts of another topic than the feed reads at once, then ours.
    async def body(eng: _Engine, feed: Feed) -> None:
        for wait in ("stream", "once"):
            w = Arrivals(feed, [TOPIC], sb.last_seq(eng.reader), False)
            got: list[tuple[float, bytes]] = []

            async def follow(w: Arrivals = w, wait: str = wait, got: list = got) -> None:
                if wait == "once":
                    got.append((trio.current_time(), await w.once(5)))
                    return
                async for line in w.stream(5):
                    got.append((trio.current_time(), line))
                    break

            with trio.fail_after(10):
                async with trio.open_nursery() as n:
                    n.start_soon(follow)
                    await trio.sleep(0.1)
                    t0 = trio.current_time()
                    eng.store(*[_post(f"{wait} other {i}", T0 + i, topic=OTHER)
                                for i in range(FEED_POSTS + 5)], _post(f"{wait} ours", T0))
            at, line = got[0]
            assert _texts([line]) == [f"{wait} ours"] and at - t0 < 2

    _run(tmp_path, body)
