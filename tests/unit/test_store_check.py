"""The WAL check: what SQLite would drop silently, and what is only a torn tail."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from awp.store import check

COMMITS = 10


@pytest.fixture
def wal_copy(tmp_path):
    """A store whose WAL holds COMMITS committed transactions (as after kill -9)."""
    db = str(tmp_path / "live.db")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA wal_autocheckpoint = 0")
    c.execute("CREATE TABLE x (i INTEGER PRIMARY KEY, v TEXT)")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(COMMITS):
        c.execute("INSERT INTO x (v) VALUES (?)", (f"row {i} " * 40,))
    copy = str(tmp_path / "copy.db")
    shutil.copyfile(db, copy)
    shutil.copyfile(db + "-wal", copy + "-wal")
    c.close()
    return copy


def _flip(path: str, off: int, bit: int = 1) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ bit]))


def _frame(i: int, at: int = 0) -> int:
    return 32 + i * (24 + 4096) + at


def test_an_intact_wal_is_replayed_whole(wal_copy):
    r = check.check_wal(wal_copy)
    assert (r.frames, r.commits, r.damaged, r.dropped) == (COMMITS, COMMITS, False, 0)
    assert check.verify(wal_copy) == ""


def test_a_flipped_bit_in_an_early_frame_is_damage_sqlite_would_hide(wal_copy):
    _flip(wal_copy + "-wal", _frame(2, 24 + 100))
    r = check.check_wal(wal_copy)
    assert r.damaged and r.bad_frame == 2 and r.lost_commits == COMMITS - 3, r
    with pytest.raises(check.StoreDamaged, match="frame 3: 7 committed transactions"):
        check.verify(wal_copy, hint="; run it")
    # what SQLite itself does with it: two rows, and quick_check says ok
    c = sqlite3.connect(wal_copy)
    assert c.execute("SELECT count(*) FROM x").fetchone()[0] == 2
    assert c.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    c.close()


@pytest.mark.parametrize("where", [8, 12, 16])  # salt-1, salt-2, checksum-1 of frame 4
def test_damage_in_a_frame_header_is_seen_past_too(wal_copy, where):
    _flip(wal_copy + "-wal", _frame(4, where))
    r = check.check_wal(wal_copy)
    assert r.damaged and r.bad_frame == 4, r


@pytest.mark.parametrize("cut", [1000, 4096 + 24 + 10, 4096 + 24 - 16 + 3])
def test_a_wal_cut_inside_a_frame_is_damage(wal_copy, cut):
    # Cut inside the last frame's page, inside the one before, and inside a
    # frame header short of its salts: each was written and is now gone.
    size = os.path.getsize(wal_copy + "-wal")
    with open(wal_copy + "-wal", "r+b") as f:
        f.truncate(size - cut)
    r = check.check_wal(wal_copy)
    assert r.damaged and r.lost_commits == 0 and r.cut >= 0, r
    assert r.frames == r.cut < COMMITS, r
    with pytest.raises(check.StoreDamaged, match=f"-wal is cut short inside frame {r.cut + 1}"):
        check.verify(wal_copy, hint="; run it")


def test_a_wal_cut_inside_its_header_is_damage(wal_copy):
    with open(wal_copy + "-wal", "r+b") as f:
        f.truncate(20)
    assert check.check_wal(wal_copy).cut == 0
    with pytest.raises(check.StoreDamaged, match="cut short inside its header"):
        check.verify(wal_copy)


def test_a_frame_header_alone_at_the_end_is_only_a_warning(wal_copy):
    # What a process killed between SQLite's two writes of a frame leaves: a
    # transaction that never committed.
    size = os.path.getsize(wal_copy + "-wal")
    with open(wal_copy + "-wal", "r+b") as f:
        f.truncate(size - 4096)
    r = check.check_wal(wal_copy)
    assert not r.damaged and r.frames == COMMITS - 1 and r.dropped == 1, r
    assert "1 frame(s) that do not check out" in check.verify(wal_copy)


def test_a_bad_last_whole_frame_is_only_a_warning(wal_copy):
    _flip(wal_copy + "-wal", _frame(COMMITS - 1, 24 + 7))  # a torn in-place write looks so
    r = check.check_wal(wal_copy)
    assert not r.damaged and r.dropped == 1, r
    assert "1 frame(s) that do not check out" in check.verify(wal_copy)


def test_frames_left_from_before_a_wal_restart_are_not_damage(tmp_path):
    db = str(tmp_path / "s.db")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA wal_autocheckpoint = 0")
    c.execute("CREATE TABLE x (v TEXT)")
    for i in range(8):
        c.execute("INSERT INTO x VALUES (?)", (str(i) * 300,))
    c.execute("PRAGMA wal_checkpoint(RESTART)")
    c.execute("INSERT INTO x VALUES ('after restart')")  # rewrites the header, new salts
    shutil.copyfile(db, db + ".c")
    shutil.copyfile(db + "-wal", db + ".c-wal")
    c.close()
    r = check.check_wal(db + ".c")
    assert r.frames == 1 and not r.damaged and r.dropped == 0, r


def test_damage_errors_are_told_from_other_sqlite_errors(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database file at all" * 200)
    with pytest.raises(sqlite3.DatabaseError) as e:
        sqlite3.connect(str(bad)).execute("SELECT * FROM sqlite_master").fetchall()
    assert check.is_damage(e.value)
    assert not check.is_damage(sqlite3.OperationalError("database is locked"))
    with pytest.raises(check.StoreDamaged, match="bad.db is damaged"):
        check.verify(str(bad))


def _store(tmp_path, rows: int = 300) -> str:
    db = str(tmp_path / "s.db")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("CREATE TABLE x (v TEXT)")
    c.execute("BEGIN")
    for i in range(rows):
        c.execute("INSERT INTO x VALUES (?)", (f"{i} " * 100,))
    c.execute("COMMIT")
    c.close()  # a clean close: checkpointed, no WAL left
    assert not os.path.exists(db + "-wal")
    return db


def test_a_truncated_store_is_told_by_its_header(tmp_path):
    db = _store(tmp_path)
    assert check.check_header(db) == ""
    size = os.path.getsize(db)
    with open(db, "r+b") as f:
        f.truncate(size - 4096)
    assert "truncated" in check.check_header(db)
    with pytest.raises(check.StoreDamaged, match="truncated"):
        check.verify(db)


def test_a_checkpoint_cut_short_is_not_taken_for_a_truncated_store(tmp_path):
    """kill -9 in a checkpoint: page 1, with the grown page count, is already in
    the file, the pages that grow it are not, and the WAL still holds them all
    (a test daemon killed at the wrong moment was refused as 'truncated')."""
    import struct

    db = str(tmp_path / "live.db")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA wal_autocheckpoint = 0")
    c.execute("CREATE TABLE x (i INTEGER PRIMARY KEY, v TEXT)")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(40):  # the store grows by some 20 pages, all of them in the WAL
        c.execute("INSERT INTO x (v) VALUES (?)", (f"row {i} " * 300,))
    copy = str(tmp_path / "copy.db")
    shutil.copyfile(db, copy)
    shutil.copyfile(db + "-wal", copy + "-wal")
    c.close()
    with open(copy + "-wal", "rb") as f:
        wal = f.read()
    last = 32 + ((len(wal) - 32) // (24 + 4096) - 1) * (24 + 4096)
    grown = struct.unpack(">I", wal[last + 4:last + 8])[0]  # pages after the last commit
    assert grown * 4096 > os.path.getsize(copy)
    with open(copy, "r+b") as f:
        head = bytearray(f.read(100))
        head[28:32] = struct.pack(">I", grown)  # what the checkpoint's page 1 says
        f.seek(0)
        f.write(head)
    assert "truncated" in check.check_header(copy)  # the header alone cannot tell
    assert check.verify(copy) == ""  # the WAL holds the pages: sound
    c = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    assert c.execute("SELECT count(*) FROM x").fetchone()[0] == 40
    c.close()


def test_a_big_store_is_checked_in_full_only_after_an_unclean_stop(tmp_path, monkeypatch):
    db = _store(tmp_path)
    with open(db, "r+b") as f:  # a damaged page in the middle of the table
        f.seek(4096 * 10)
        f.write(b"\xa5" * 64)
    monkeypatch.setattr(check, "QUICK_CHECK_ALWAYS", 0)
    assert check.verify(db) == ""  # clean stop: header and WAL only (reads will tell)
    open(db + "-wal", "wb").close()  # as a crash leaves it
    with pytest.raises(check.StoreDamaged):
        check.verify(db)
    monkeypatch.setattr(check, "QUICK_CHECK_ALWAYS", 1 << 30)
    os.unlink(db + "-wal")
    with pytest.raises(check.StoreDamaged):
        check.verify(db)


def test_eight_bytes_changed_inside_a_row_are_found_though_quick_check_passes(tmp_path):
    db = _store(tmp_path)
    with open(db, "r+b") as f:  # inside the text of a row on a page in the middle
        f.seek(4096 * 10 + 2000)
        f.write(b"\xff" * 8)
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert check.quick_check(c) == ""  # SQLite's structural check sees nothing
    c.close()
    with pytest.raises(check.StoreDamaged, match=r"table x: the row after rowid \d+ cannot be"
                       r" read: text that is not UTF-8 in column 'v'\)") as e:
        check.verify(db)
    assert "\\xff" not in str(e.value) and len(str(e.value)) < 200  # the value is not quoted
    assert check.is_damage(sqlite3.OperationalError(
        "Could not decode to UTF-8 column 'peer' with text 'P\ufffd'"))
