"""A follower's posts pushed by the code that stored them (awp/daemon/board_feed.py, Feed._push).

As in test_board_feed.py: a real SQLite file with a writer and a reader
connection.  Records are stored and hinted as ``Board.take`` does it: one
commit, then one hint a record carrying the whole commit (``taken``) and the
posts a stored record names, asked in the same transaction (``named``).
A follower's stream yields what it sends itself; what the feed pushes goes
through its outlet.  Either way its lines must be what reading the store
gives.
"""

from __future__ import annotations

import json

import trio
from test_board_feed import ALICE, OTHER, OWNER, T0, TOPIC, _Engine, _from_store, _post, _shape

from awp.daemon.board_feed import Arrivals, Feed
from awp.store import board as sb
from awp.wire import board as b
from awp.wire.canonical import compact_json


class _Board:
    followed = None


class _Outlet:
    """A stream's outlet: takes a piece whole, or (``full``) none of it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.full = False
        self.unsent = False

    def write_now(self, data: bytes) -> bool:
        if self.full:
            return False
        self.lines.append(data)
        return True


def _store(eng: _Engine, *recs: b.Record, named: bool = True) -> list[int]:
    """One commit, hinted as Board.take hints it: which posts the followers follow are
    plain, asked in the transaction (``named`` False: a take that began before the
    followers came, which does not say)."""
    w = eng.writer
    w.execute("BEGIN")
    seqs = [sb.put_record(w, r, T0) for r in recs]
    want = eng.board.followed  # type: ignore[attr-defined]
    asked = [r for r in recs if r.kind == "post" and want is not None and want(r)]
    found = {r.hash for r in asked} - sb.named(w, asked) if named else None
    w.execute("COMMIT")
    taken = sb.Taken(new=list(recs), seqs={r.hash: s for r, s in zip(recs, seqs, strict=True)})
    for r, s in zip(recs, seqs, strict=True):
        eng.changes.publish({"kind": "board", "topic": r.topic, "hash": r.hash, "rec": r.kind,
                             "seq": s, "record": r, "taken": taken, "plain": found})
    return seqs


class _Follower:
    """A stream of Arrivals run in a task: what it yielded, what was pushed, how often
    its task looked."""

    def __init__(self, feed: Feed, eng: _Engine, topics: list[str], mine: bool = False) -> None:
        self.w = Arrivals(feed, topics, sb.last_seq(eng.reader), mine)
        self.start = self.w.place
        self.out = _Outlet()
        self.yielded: list[bytes] = []
        self.looks = 0

    async def run(self) -> None:
        look = self.w.look

        async def counted() -> list[bytes]:
            self.looks += 1
            return await look()

        self.w.look = counted  # type: ignore[method-assign]
        async for line in self.w.stream(60, self.out):
            if line:
                self.yielded.append(line)

    def lines(self) -> list[bytes]:
        return self.out.lines + self.yielded

    def posts(self) -> list[dict]:
        """Every post sent, pushed or yielded, in the order of the store."""
        return sorted((p for line in self.lines() for p in json.loads(line)["posts"]),
                      key=lambda p: p["seq"])


async def _parked(*fs: _Follower) -> None:
    with trio.fail_after(5):
        while not all(f.w.parked for f in fs):
            await trio.sleep(0.01)


async def _started(feed: Feed, eng: _Engine, nursery: trio.Nursery,
                   *scopes: list[str]) -> list[_Follower]:
    """A follower of each scope, started and parked: what most tests begin with."""
    fs = [_Follower(feed, eng, scope) for scope in scopes]
    for f in fs:
        nursery.start_soon(f.run)
    await _parked(*fs)
    return fs


async def _following(feed: Feed, eng: _Engine, nursery: trio.Nursery) -> _Follower:
    return (await _started(feed, eng, nursery, [TOPIC]))[0]


def _run(tmp_path, body) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            eng = _Engine(str(tmp_path / "awp.db"), nursery)
            board = eng.board = _Board()  # type: ignore[attr-defined]
            feed = Feed(eng, _shape, board)  # type: ignore[arg-type]
            await body(eng, feed, board, nursery)
            nursery.cancel_scope.cancel()

    trio.run(main)


def _encoded(posts: list[dict]) -> list[bytes]:
    return [compact_json(p).encode() for p in posts]


def test_parked_followers_are_pushed_the_store_s_bytes_without_their_task_waking(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        ops, both, mine = (_Follower(feed, eng, [TOPIC]), _Follower(feed, eng, [TOPIC, OTHER]),
                           _Follower(feed, eng, [TOPIC], mine=True))
        for f in (ops, both, mine):
            nursery.start_soon(f.run)
        await _parked(ops, both, mine)
        want = board.followed  # the takes now ask which of the posts they follow are plain
        assert want is not None and want(_post("x", T0)) and want(_post("y", T0, who=OWNER))
        assert want(_post("z", T0, topic=OTHER)) and not want(_post("w", T0, OTHER, OWNER))
        looks = [f.looks for f in (ops, both, mine)]
        _store(eng, _post("a", T0), _post("b", T0 + 1, topic=OTHER))
        _store(eng, _post("c", T0 + 2, who=OWNER))
        _store(eng, _post("d", T0 + 3))
        await trio.sleep(0.05)
        assert [f.looks for f in (ops, both, mine)] == looks  # nobody's task woke
        assert not any(f.yielded for f in (ops, both, mine))
        for f, topics, own in ((ops, [TOPIC], False), (both, [TOPIC, OTHER], False),
                               (mine, [TOPIC], True)):
            assert [compact_json(p).encode() for p in f.posts()] == _encoded(
                _from_store(eng, f.start, topics, own))
            assert f.w.place == sb.last_seq(eng.reader)
        assert [json.loads(x)["cursor"] for x in ops.lines()] == [
            p["seq"] for p in ops.posts()]  # a line a commit with posts in scope
        assert len(mine.lines()) == 3 and len(both.lines()) == 2  # the owner's own: no line
        assert feed.pushed == 7

    _run(tmp_path, body)


def test_a_commit_naming_its_own_post_is_read_back_not_pushed(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        f = await _following(feed, eng, nursery)
        p = _post("first", T0)
        _store(eng, p, b.make_edit(ALICE, p, [{"k": "text", "text": "second"}], T0 + 1),
               _post("a reply", T0 + 2, parent=p.hash))
        q = _post("gone", T0 + 3)
        _store(eng, q, b.make_delete(ALICE, q, T0 + 4))
        await trio.sleep(0.05)
        assert f.out.lines == []
        assert [(x["text"], x["edited"], x["replies"]) for x in f.posts()] == [
            ("second", T0 + 1, 1), ("a reply", 0, 0)]
        assert f.posts() == _from_store(eng, f.start, [TOPIC])

    _run(tmp_path, body)


def test_a_post_named_before_it_came_is_read_back_not_pushed(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        f = await _following(feed, eng, nursery)
        p = _post("first", T0)
        _store(eng, b.make_edit(ALICE, p, [{"k": "text", "text": "second"}], T0 + 1))
        await trio.sleep(0.05)
        _store(eng, p)  # out of order: its edit is held already
        await trio.sleep(0.05)
        assert f.out.lines == []
        [got] = f.posts()
        assert (got["text"], got["edited"]) == ("second", T0 + 1)

    _run(tmp_path, body)


def test_records_stored_without_the_feed_knowing_are_read_not_skipped(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        f = await _following(feed, eng, nursery)
        eng.writer.execute("BEGIN")  # a commit whose hint has not come yet
        sb.put_record(eng.writer, _post("unhinted", T0), T0)
        eng.writer.execute("COMMIT")
        _store(eng, _post("hinted", T0 + 1))  # past a gap: not pushed
        _store(eng, _post("named not asked", T0 + 2), named=False)
        await trio.sleep(0.05)
        assert f.out.lines == []
        assert [x["text"] for x in f.posts()] == ["unhinted", "hinted", "named not asked"]
        _store(eng, _post("pushed again", T0 + 3))
        await trio.sleep(0.05)
        assert [x["text"] for x in f.posts()] == [
            "unhinted", "hinted", "named not asked", "pushed again"]
        assert len(f.out.lines) == 1

    _run(tmp_path, body)


def test_a_follower_whose_outlet_takes_nothing_sends_the_same_line_itself(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        f, g = await _started(feed, eng, nursery, [TOPIC], [TOPIC])
        f.out.full = True  # a client that stopped reading; g's keeps up
        _store(eng, _post("one", T0), _post("two", T0 + 1))
        await trio.sleep(0.05)
        assert f.out.lines == [] and f.yielded == g.out.lines
        f.out.full = False
        await _parked(f)
        _store(eng, _post("three", T0 + 2))
        await trio.sleep(0.05)
        assert f.out.lines == g.out.lines[-1:]

    _run(tmp_path, body)


def test_the_feed_lets_go_of_a_follower_that_ends(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        f = _Follower(feed, eng, [TOPIC])
        async with trio.open_nursery() as n:
            n.start_soon(f.run)
            await _parked(f)
            assert board.followed is not None
            n.cancel_scope.cancel()  # the client hung up
        assert board.followed is None and feed.followers == {} and feed.places == {}
        assert feed.known == -1 and eng.changes._subs == {}
        _store(eng, _post("after", T0))  # nobody follows: nothing pushed
        assert feed.pushed == 0

    _run(tmp_path, body)


def test_a_post_not_asked_about_is_read_by_its_follower_while_the_others_are_pushed(tmp_path):
    async def body(eng: _Engine, feed: Feed, board: _Board, nursery: trio.Nursery) -> None:
        ops, dev = await _started(feed, eng, nursery, [TOPIC], [OTHER])
        board.followed = lambda r: r.topic == OTHER  # a take that did not ask about ops' post
        _store(eng, _post("ops", T0), _post("dev", T0 + 1, topic=OTHER))
        await trio.sleep(0.05)
        assert [x["text"] for x in ops.posts()] == ["ops"] and ops.out.lines == []
        assert dev.yielded == [] and [x["text"] for x in dev.posts()] == ["dev"]

    _run(tmp_path, body)
