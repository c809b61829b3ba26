"""A take starts from the last take's topic shapes (``sb.Shapes``) only while they hold.

A relay or leaf takes posts one a line, and reading the topic's shape (count,
bytes, time span, document) was a fifth of each take.  The shapes a take
ends with are kept for the next, on the same connection, and used only when
nothing was written since (the connection's ``total_changes``) and no other
connection committed (``data_version``).  These tests feed the same records
to a host that keeps shapes and one that does not, with every kind of write
between takes, and require the same outcome; and they show the shapes are
used when they may be, and not when a ban came in between.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from awp.store import board as sb
from awp.store.db import connect, migrate
from awp.wire import board as b
from awp.wire.keys import Identity

T0 = 1_790_000_000_000
OWNER = Identity(b"\x01" * 32)
ALICE = Identity(b"\x02" * 32)
BOB = Identity(b"\x05" * 32)
TOPIC = f"{OWNER.key}/ops"
READ = sb._Shape.read  # what a take reads, as it is before a test counts it


def _host(path: str, doc: b.Record) -> sqlite3.Connection:
    c = connect(path)
    migrate(c)
    sb.put_topic(c, doc, T0)
    sb.subscribe(c, TOPIC, T0)
    return c


def _stamped(who: Identity, texts: range, t: int) -> list[list[str]]:
    """Posts with the owner's stamps, one ``[stamp, record]`` a post, 1 s apart."""
    out = []
    for i in texts:
        rec = b.make_post(who, TOPIC, [{"k": "text", "text": f"{who.key[8:12]} {i}"}], t + i)
        out.append([b.make_stamp(OWNER, TOPIC, rec.hash, i + 1, t + i * 1000).raw, rec.raw])
    return out


def _take(c: sqlite3.Connection, line: list[str], now: int,
          shapes: sb.Shapes | None) -> sb.Taken:
    """One take in its own transaction, kept after the commit as the daemon does."""
    c.execute("BEGIN IMMEDIATE")
    got = sb.take(c, line, now, via="peer", hops=1, subs={TOPIC}, shapes=shapes)
    c.execute("COMMIT")
    if shapes is not None:
        shapes.keep(got)
    return got


class Reads(list):
    """Each time a take read a topic's shape from the store: the connection it used."""

    def on(self, c: sqlite3.Connection) -> int:
        return sum(1 for x in self if x is c)


@pytest.fixture
def reads(monkeypatch) -> Reads:
    seen = Reads()
    real = sb._Shape.read.__func__

    def counted(cls, c, *a):
        seen.append(c)
        return real(cls, c, *a)

    monkeypatch.setattr(sb._Shape, "read", classmethod(counted))
    return seen


def test_takes_one_after_another_read_the_shape_once(tmp_path, reads):
    doc = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=6000)
    c, shapes = _host(str(tmp_path / "a.db"), doc), sb.Shapes()
    for line in _stamped(ALICE, range(20), T0):
        assert len(_take(c, line, T0 + 60_000, shapes).new) == 1
    assert len(reads) == 1
    again = _stamped(ALICE, range(3), T0)[1]  # held: known without a verification
    assert _take(c, again, T0 + 60_000, shapes).known == 1 and len(reads) == 1
    # any write between takes on the connection (here another table) and the shape is read
    sb.subscribe(c, f"{OWNER.key}/other", T0)
    _take(c, _stamped(ALICE, range(20, 21), T0)[0], T0 + 60_000, shapes)
    assert len(reads) == 2


def _kept_as_stored(c: sqlite3.Connection, shapes: sb.Shapes) -> None:
    """Every shape kept for the next take is what the store holds, while it may be used."""
    if shapes.state is None:
        return
    (changes, version), topics = shapes.state
    if (changes, version) != (c.total_changes, c.execute(
            "SELECT data_version FROM pragma_data_version").fetchone()[0]):
        return
    for topic, sh in topics.items():
        fresh = READ(c, topic)
        assert (sh.n, sh.size, sh.oldest, sh.newest, sh.doc) == (
            fresh.n, fresh.size, fresh.oldest, fresh.newest, fresh.doc), topic


@pytest.mark.parametrize("other_connection", [False, True])
def test_a_ban_stored_between_two_takes_holds_for_the_next(tmp_path, reads, other_connection):
    path = str(tmp_path / "a.db")
    doc = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open")
    c, shapes = _host(path, doc), sb.Shapes()
    lines = _stamped(ALICE, range(3), T0)
    assert len(_take(c, lines[0], T0 + 10_000, shapes).new) == 1
    ban = b.make_topic(OWNER, "ops", 2, T0 + 5, post="open", read="open", banned=[ALICE.key])
    writer = connect(path) if other_connection else c  # the API, or a peer's board-topic
    writer.execute("BEGIN IMMEDIATE")
    assert sb.put_topic(writer, ban, T0 + 6) == "newer"
    writer.execute("COMMIT")
    got = _take(c, lines[1], T0 + 10_000, shapes)
    assert got.refused == ["author is banned from this topic"] and not got.new
    assert len(reads) == 2  # read again, with the new document


def test_the_same_records_with_writes_between_end_the_same_with_kept_shapes(tmp_path, reads):
    """Out of order arrivals, retention cutting in, a new document lowering keep, the
    minute's sweep, a rolled back take: a host keeping shapes ends as one that reads."""
    doc = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open", rate=20, keep=60)
    kept = _host(str(tmp_path / "kept.db"), doc)
    plain = _host(str(tmp_path / "plain.db"), doc)
    shapes = sb.Shapes()
    lines = _stamped(ALICE, range(90), T0) + _stamped(BOB, range(40), T0 + 500)
    rng = random.Random(7)
    rng.shuffle(lines[60:])  # the first 60 in order, the rest in any order
    lower = b.make_topic(OWNER, "ops", 2, T0 + 1, post="open", read="open", rate=20, keep=40)
    now = T0 + 200_000
    for i, line in enumerate(lines):
        if i == 70:  # a newer document comes in a line of its own (no shapes passed)
            for c in (kept, plain):
                c.execute("BEGIN IMMEDIATE")
                assert [r.hash for r in sb.take(c, [lower.raw], now).new] == [lower.hash]
                c.execute("COMMIT")
        if i == 100:  # the minute's sweep
            for c in (kept, plain):
                sb.enforce_retention(c, TOPIC, sb.policy(c, TOPIC), now)
        if i == 110:  # a take that fails after its writes: rolled back, nothing kept
            kept.execute("BEGIN IMMEDIATE")
            sb.take(kept, line, now, via="peer", hops=1, subs={TOPIC}, shapes=shapes)
            kept.execute("ROLLBACK")
            shapes.forget()
        a, z = _take(kept, line, now, shapes), _take(plain, line, now, None)
        assert ([r.hash for r in a.new], a.refused, a.known) == (
            [r.hash for r in z.new], z.refused, z.known), i
        assert sb.holdings(kept, TOPIC).hashes() == sb.holdings(plain, TOPIC).hashes(), i
        _kept_as_stored(kept, shapes)
    assert len(sb.holdings(kept, TOPIC)) == 40
    # retention ran in many of these takes (nothing kept of the topic then), yet the
    # kept shapes spared a good part of the reads
    assert reads.on(kept) < 0.75 * reads.on(plain)


def test_our_post_back_with_its_stamp_is_counted_once(tmp_path):
    """Ours waits for the owner's stamp, then is stored again in place: not one more."""
    doc = b.make_topic(OWNER, "ops", 1, T0, post="open", read="open")
    c, shapes = _host(str(tmp_path / "a.db"), doc), sb.Shapes()
    for i in range(3):
        mine = b.make_post(ALICE, TOPIC, [{"k": "text", "text": f"mine {i}"}], T0 + i)
        c.execute("BEGIN IMMEDIATE")
        got = sb.take(c, [mine], T0 + 10, subs={TOPIC}, shapes=shapes)
        c.execute("COMMIT")
        shapes.keep(got)
        assert got.waiting == {mine.hash}
        _kept_as_stored(c, shapes)
        st = b.make_stamp(OWNER, TOPIC, mine.hash, i + 1, T0 + 20 + i)
        assert [r.hash for r in _take(c, [st.raw, mine.raw], T0 + 30, shapes).new] == [
            mine.hash]
        _kept_as_stored(c, shapes)
    assert c.execute("SELECT n FROM board_usage").fetchone()[0] == 3
