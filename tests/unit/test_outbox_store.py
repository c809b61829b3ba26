"""The outbox since migration 9: a logged line's text lives in the log alone,
and an ack writes nothing to the log (``ops._ACKED_SQL``).

An old store upgrades with its queued lines sent exactly as they were, in
the same order, and each line shown as acked or not as before; a line whose log row was lost (a repaired store) is not sent
as an empty line; the start-up check for unreadable lines still reads the
text from the log.
"""

from __future__ import annotations

import sqlite3

from awp.store import ops
from awp.store.db import _split, migrate, open_store
from awp.store.schema import MIGRATIONS
from awp.wire.canonical import compact_json

A = "ed25519:" + "A" * 43
TH = "thr_upgrade1"


def _old_store(path: str) -> sqlite3.Connection:
    """A store as awp left it before migration 9 (schema version 8)."""
    c = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:8]:
        for stmt in _split(script):
            c.execute(stmt)
    c.execute("PRAGMA user_version = 8")
    return c


def _queue_old_way(c: sqlite3.Connection, n: int, t: str = "msg", *, log: bool = True,
                   text: str = "") -> tuple[str, str]:
    """What queue_line wrote before migration 9: the text in the outbox and the log."""
    ident = f"01M8RGR02DWWHR0Y7Z1XQHH{n:03d}"
    line = compact_json({"t": t, "id": ident, "th": TH, "parts": [
        {"k": "text", "text": text or f"line {n}"}]})
    c.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES (?, ?, ?, ?, ?, 1)",
              (A, ident, t, TH, line))
    if log:
        c.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line, read) VALUES"
                  " (?, 'out', ?, ?, ?, 1, 1, ?, 1)", (A, t, ident, TH, line))
    return ident, line


def test_an_old_store_upgrades_and_sends_its_queued_lines_as_they_were(tmp_path):
    path = str(tmp_path / "awp.db")
    old = _old_store(path)
    msgs = [_queue_old_way(old, n) for n in range(3)]
    chunk = _queue_old_way(old, 3, "chunk", log=False)  # never logged: keeps its text
    last = _queue_old_way(old, 4)
    # Two lines that left the outbox before: one acked, one dropped unacked.
    acked, _line = _queue_old_way(old, 5)
    swept, _line = _queue_old_way(old, 6)
    old.execute("DELETE FROM outbox WHERE id IN (?, ?)", (acked, swept))
    old.execute("UPDATE log SET acked = 1 WHERE id = ?", (acked,))
    old.close()

    c = open_store(path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) >= 9
    indexes = {r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox'")}
    assert "outbox_created" not in indexes and "outbox_peer_th_t" not in indexes
    assert "outbox_cumulative" in indexes
    kept = dict(c.execute("SELECT id, line FROM outbox").fetchall())
    assert kept[chunk[0]] == chunk[1]
    assert all(kept[i] == "" for i, _line in msgs + [last])

    want = msgs + [chunk, last]
    assert [(r[1], r[3]) for r in ops.fetch_outbox(c, A, 0)] == want
    assert ops.fetch_outbox_ids(c, A, [last[0], msgs[1][0]]) == [msgs[1], last]
    # Acking the last msg drops the chunk below it in its thread too, and
    # the log says acked.
    assert ops.apply_acks(c, A, [(TH, last[0])]) == [last[0]]
    assert [r[1] for r in ops.fetch_outbox(c, A, 0)] == [i for i, _line in msgs]
    shown = {i: ops.out_acked(c, A, i, "msg", a) for i, a in c.execute(
        "SELECT id, acked FROM log")}
    assert shown == {msgs[0][0]: False, msgs[1][0]: False, msgs[2][0]: False, last[0]: True,
                     acked: True, swept: False}
    c.close()


def test_a_new_line_is_queued_narrow_and_sent_whole(tmp_path):
    from awp.wire.ids import IdGenerator

    c = open_store(str(tmp_path / "awp.db"))
    ops.ensure_peer(c, A, 1)
    _seq, line, text = ops.queue_line(c, IdGenerator(), A, lambda i, ts: {
        "t": "msg", "id": i, "ts": ts, "th": TH, "parts": [{"k": "text", "text": "hi"}]})
    assert c.execute("SELECT line FROM outbox").fetchone()[0] == ""
    assert [tuple(r)[1:] for r in ops.fetch_outbox(c, A, 0)] == [(line["id"], "msg", text)]
    c.close()


def test_a_queued_line_whose_log_row_is_gone_is_not_sent_empty(tmp_path):
    path = str(tmp_path / "awp.db")
    old = _old_store(path)
    lost, _line = _queue_old_way(old, 0)
    kept = _queue_old_way(old, 1)
    old.close()
    c = open_store(path)
    c.execute("DELETE FROM log WHERE id = ?", (lost,))  # as a salvaged store may lack it
    assert [(r[1], r[3]) for r in ops.fetch_outbox(c, A, 0)] == [kept]
    assert ops.fetch_outbox_ids(c, A, [lost, kept[0]]) == [kept]
    c.close()


def test_unreadable_lines_are_found_in_the_log_text(tmp_path):
    """A NaN an older awp let into a logged line is found though the outbox row is narrow."""
    path = str(tmp_path / "awp.db")
    old = _old_store(path)
    ident = "01M8RGR02DWWHR0Y7Z1XQHH000"
    bad = '{"t":"msg","id":"' + ident + '","th":"' + TH + '","data":{"a":NaN}}'
    old.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES (?, ?, 'msg', ?, ?, 1)",
                (A, ident, TH, bad))
    old.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line, read) VALUES"
                " (?, 'out', 'msg', ?, ?, 1, 1, ?, 1)", (A, ident, TH, bad))
    good = _queue_old_way(old, 1)
    old.close()
    c = open_store(path)
    assert c.execute("SELECT line FROM outbox WHERE id = ?", (ident,)).fetchone()[0] == ""
    assert ops.drop_unreadable(c) == [(A, ident)]
    assert [(r[1], r[3]) for r in ops.fetch_outbox(c, A, 0)] == [good]
    migrate(c)  # nothing left to do: already at the last version
    c.close()
