"""awp.store.salvage on real SQLite files: it finishes on any damage, and a
repair stopped at any point is picked up again without losing a row."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys

from awp.store import check, salvage
from awp.store.db import open_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(path: str, n: int) -> None:
    """A store with ``n`` log rows of 60-1500 bytes and outbox rows that come and
    go (so freed pages are reused and the tables' pages interleave)."""
    con = open_store(path)
    rnd = random.Random(1)
    try:
        for start in range(0, n, 500):
            con.execute("BEGIN")
            for i in range(start, min(n, start + 500)):
                line = json.dumps({"t": "msg", "id": f"{i:026d}", "text": "y" * rnd.randint(60, 1500)})
                con.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
                            " (?, 'in', 'msg', ?, ?, ?, ?, ?)",
                            (f"p{i % 5}", f"{i:026d}", f"th{i % 13}", i, i, line))
                if i % 2:
                    con.execute("INSERT INTO outbox (peer, id, t, line, created) VALUES"
                                " (?, ?, 'msg', ?, ?)", (f"p{i % 5}", f"{i:026d}", line, i))
            con.execute("DELETE FROM outbox WHERE seq % 3 != 0 AND created < ?", (start,))
            con.execute("COMMIT")
    finally:
        con.close()


def _rows(path: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM log").fetchone()[0]
    finally:
        con.close()


def test_repair_finishes_when_damaged_pages_send_seeks_backwards(tmp_path):
    # One page in a hundred overwritten: damaged interior pages answer a seek
    # past rowid N with rows before N, and following them went round for good.
    db = str(tmp_path / "awp.db")
    _build(db, 12_000)
    pages = os.path.getsize(db) // 4096
    with open(db, "r+b") as f:
        for page in random.Random(5).sample(range(2, pages), pages // 100):
            f.seek((page - 1) * 4096 + 8)
            f.write(b"\xa5" * 64)
    code = ("import sys; from awp.store import salvage; r = salvage.repair(sys.argv[1]);"
            " print(sum(r.kept.values()))")
    r = subprocess.run([sys.executable, "-c", code, db], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 6_000, r.stdout
    assert check.verify(db) == ""  # the new store is sound


def _stopped_at(db: str, step: str) -> str:
    """The files a repair of ``db`` killed at ``step`` leaves; the aside base."""
    base = db + ".damaged-20261207T000000Z"
    con = sqlite3.connect(db)  # leaves a WAL beside the store, as a killed daemon does
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA wal_autocheckpoint = 0")
    con.execute("INSERT INTO meta (k, v) VALUES ('in the wal', '1')")
    con.commit()
    with open(db + "-wal", "rb") as f:
        wal = f.read()
    con.close()
    with open(db + "-wal", "wb") as f:
        f.write(wal)
    with open(salvage.state_path(db), "w") as f:
        json.dump({"aside": base}, f)
    if step == "recorded":
        return base
    os.rename(db + "-wal", base + "-wal")
    if step == "wal moved":
        return base
    os.rename(db, base)
    if step == "moved":
        return base
    with open(db + ".repair-new", "wb") as f:
        f.write(b"SQLite format 3\0" + b"\0" * 200)  # half written
    return base


def test_a_repair_stopped_at_any_step_is_finished_by_the_next_and_keeps_every_row(tmp_path):
    for step in ("recorded", "wal moved", "moved", "copying"):
        home = tmp_path / step.replace(" ", "_")
        home.mkdir()
        db = str(home / "awp.db")
        _build(db, 2_000)
        base = _stopped_at(db, step)
        assert salvage.interrupted(db) == base
        result = salvage.repair(db)
        assert not salvage.interrupted(db), step
        assert not os.path.exists(db + ".repair-new"), step
        assert _rows(db) == 2_000 and result.kept["log"] == 2_000, (step, result.kept)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        assert con.execute("SELECT v FROM meta WHERE k = 'in the wal'").fetchone() == ("1",), step
        con.close()
        assert os.path.exists(base) and os.path.exists(base + "-wal"), os.listdir(home)
        assert check.verify(db) == ""


def test_a_repair_stopped_after_the_new_store_was_in_place_only_clears_its_record(tmp_path):
    db = str(tmp_path / "awp.db")
    _build(db, 300)
    base = db + ".damaged-20261207T000000Z"
    with open(salvage.state_path(db), "w") as f:
        json.dump({"aside": base}, f)
    _build(base, 10)  # the damaged files, moved aside
    salvage.repair(db)
    assert _rows(db) == 300  # the store in place was the finished new one: kept as it is
    assert not salvage.interrupted(db)


def test_a_record_cut_short_by_the_kill_counts_as_a_repair_under_way(tmp_path):
    db = str(tmp_path / "awp.db")
    _build(db, 100)
    with open(salvage.state_path(db), "w") as f:
        f.write('{"aside": "')
    assert salvage.interrupted(db) == "?"
    assert "awp repair --home H" in check.interrupted_message(db, "?", "H")
    salvage.repair(db)  # nothing had moved: a repair from the start
    assert not salvage.interrupted(db) and _rows(db) == 100


def test_an_autoincrement_counter_past_the_kept_rows_does_not_go_back(tmp_path):
    db = str(tmp_path / "awp.db")
    _build(db, 600)
    con = sqlite3.connect(db, isolation_level=None)
    top = con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()[0]
    con.execute("DELETE FROM outbox WHERE seq > ?", (top - 50,))  # the newest rows, acked
    con.close()
    salvage.repair(db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone() == (top,)
    con.close()


def test_a_damaged_record_after_the_files_moved_still_repairs_from_them(tmp_path):
    db = str(tmp_path / "awp.db")
    _build(db, 150)
    base = _stopped_at(db, "moved")
    with open(salvage.state_path(db), "w") as f:
        f.write("\xff not json")
    salvage.repair(db)
    assert _rows(db) == 150 and os.path.exists(base)
    assert not salvage.interrupted(db)
