"""A read of several statements sees one snapshot of the store (store.db.in_one_snapshot)."""

from __future__ import annotations

from awp.store.db import connect, in_one_snapshot


def test_a_commit_between_two_statements_is_not_seen_by_the_second(tmp_path):
    path = str(tmp_path / "s.db")
    writer = connect(path)
    writer.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, v TEXT)")
    writer.execute("INSERT INTO log (v) VALUES ('a')")
    reader = connect(path)

    def rows_then_max(c):
        rows = [r[0] for r in c.execute("SELECT seq FROM log ORDER BY seq")]
        writer.execute("INSERT INTO log (v) VALUES ('b')")  # lands between the two reads
        return rows, c.execute("SELECT max(seq) FROM log").fetchone()[0]

    assert in_one_snapshot(reader, rows_then_max) == ([1], 1)
    # Without the snapshot the second statement sees the new row: the race
    # /v1/web/log had (its log_max below a record it returned, or above the rows).
    assert rows_then_max(reader) == ([1, 2], 3)
    assert not reader.in_transaction


def test_the_snapshot_ends_when_the_read_fails(tmp_path):
    reader = connect(str(tmp_path / "s.db"))

    def bad(c):
        c.execute("SELECT 1")
        raise ValueError("boom")

    try:
        in_one_snapshot(reader, bad)
    except ValueError:
        pass
    assert not reader.in_transaction
