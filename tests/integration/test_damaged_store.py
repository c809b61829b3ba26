"""A damaged store: the daemon says so in one line and loses nothing silently.

Real daemons in temp homes; the damage is done to the real files between
runs (or, for a page going bad at run time, under a running daemon): a
truncated awp.db, a page of the log table overwritten, a bit flipped in a
committed WAL frame.  ``awp repair`` then moves the files aside and keeps
what can be read.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import subprocess
import sys

import pytest
from nodes import ROOT, Node, wait_for

from awp.localapi.client import ApiFailure

MSGS = 120
TEXT = "x" * 700  # about five log rows to a 4 KiB page


def _fill(make_node) -> tuple[Node, Node]:
    """``b`` holds MSGS inbound messages from ``a``; both still running."""
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    th = a.send(b.key, "first", subject="damage")["th"]
    for i in range(MSGS - 1):
        a.send(b.key, f"{i} {TEXT}", th=th, wait_ack=0)
    wait_for(lambda: len(b.inbound(peer=a.key)) >= MSGS, 60, "every message at b")
    return a, b


def _log_lines(node: Node) -> list[str]:
    with open(node.log_path, errors="replace") as f:
        return f.read().splitlines()


def _start_fails(node: Node) -> str:
    """Start the daemon, expect it to refuse; the one line it printed."""
    before = len(_log_lines(node))
    node.start(wait=False)
    assert node.proc is not None
    rc = node.proc.wait(30)
    node.proc = None
    lines = _log_lines(node)[before:]
    assert rc != 0
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0] and "Group" not in lines[0], lines
    return lines[0]


def _repair(node: Node, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AWP_HOME", None)
    return subprocess.run([sys.executable, "-m", "awp", "repair", "--home", node.home, *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def _page_size(db: str) -> int:
    with open(db, "rb") as f:
        head = f.read(100)
    size = struct.unpack(">H", head[16:18])[0]
    return 65536 if size == 1 else size


def _leaf_of(db: str, name: str, where: float = 0.5) -> int:
    """A leaf page (1-based number) of the B-tree of table or index ``name``: the one
    at ``where`` (0 the first, 0.5 the middle) among each interior page's children."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                           (name,)).fetchone()[0]
    finally:
        con.close()
    size = _page_size(db)
    with open(db, "rb") as f:
        while True:
            f.seek((page - 1) * size)
            data = f.read(size)
            if data[0] in (0x0D, 0x0A):  # a table leaf, an index leaf
                return page
            assert data[0] in (0x05, 0x02), data[0]  # a table or index interior page
            n = struct.unpack(">H", data[3:5])[0]
            k = int(n * where)
            cell = struct.unpack(">H", data[12 + 2 * k:14 + 2 * k])[0]
            page = struct.unpack(">I", data[cell:cell + 4])[0]


def _leaf_of_log(db: str, where: float = 0.5) -> int:
    return _leaf_of(db, "log", where)


def _smash(db: str, page: int) -> None:
    size = _page_size(db)
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * 64)


def test_a_truncated_store_refuses_to_start_in_one_line_and_repair_keeps_the_rest(make_node):
    a, b = _fill(make_node)
    b.stop()  # the messages are checkpointed into awp.db
    b.start()
    b.kill()  # kill -9: the WAL holds what this run wrote at its start
    db = os.path.join(b.home, "awp.db")
    size, page = os.path.getsize(db), _page_size(db)
    first = _leaf_of_log(db, 0)  # keep the log's first leaves, lose the rest of the file
    cut = max(first, (first + size // page) // 2) * page
    with open(db, "r+b") as f:
        f.truncate(cut)
    line = _start_fails(b)
    assert line.startswith("awp daemon: awp.db is damaged"), line
    assert f"awp repair --home {b.home}" in line, line
    assert os.path.getsize(db) == cut  # nothing moved or rewritten

    r = _repair(b, "--check")
    assert r.returncode == 1 and r.stderr.startswith("awp repair: awp.db is damaged"), r.stderr
    r = _repair(b)
    assert r.returncode == 0, r.stderr
    aside = [n for n in os.listdir(b.home) if n.startswith("awp.db.damaged-") and "-" not in
             n[len("awp.db.damaged-"):]]
    assert len(aside) == 1, os.listdir(b.home)
    assert os.path.getsize(os.path.join(b.home, aside[0])) == cut
    b.start()  # sound again
    kept = len(b.inbound(peer=a.key))
    assert 0 < kept < MSGS, (kept, r.stdout)  # the rows before the cut still read
    r = _repair(b)
    assert r.returncode == 1 and "stop it first (awp down)" in r.stderr, r.stderr
    b.stop()
    r = _repair(b, "--check")
    assert r.returncode == 0 and "sound" in r.stdout, (r.stdout, r.stderr)


def test_a_damaged_page_is_found_at_start_and_repair_skips_only_that_page(make_node):
    a, b = _fill(make_node)
    b.stop()
    db = os.path.join(b.home, "awp.db")
    _smash(db, _leaf_of_log(db))
    line = _start_fails(b)
    assert line.startswith("awp daemon: awp.db is damaged ("), line
    assert "awp repair" in line, line

    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert "log: 1 unreadable stretch skipped" in r.stdout, r.stdout
    b.start()
    kept = len(b.inbound(peer=a.key))
    assert MSGS - 20 <= kept < MSGS, (kept, r.stdout)  # one page's rows lost, no more


def test_a_page_going_bad_under_a_running_daemon_gives_a_clear_error(make_node):
    a, b = _fill(make_node)
    b.stop()
    db = os.path.join(b.home, "awp.db")
    leaf = _leaf_of_log(db)
    b.start()
    a.connect(b)
    _smash(db, leaf)
    # A commit makes every reader of b drop its page cache (which may hold
    # the page from before): the next read goes to the file.
    a.send(b.key, "after the damage", wait_ack=30)
    with pytest.raises(ApiFailure) as e:
        b.api("POST", "/v1/read", {"n": 1_000_000, "mark": False})
    assert e.value.status == 500 and e.value.code == "store_damaged", e.value
    assert "awp repair" in e.value.message, e.value.message
    lines = _log_lines(b)
    assert any("store damaged" in x for x in lines), lines[-5:]
    assert not any("Traceback" in x for x in lines), lines[-20:]
    with pytest.raises(ApiFailure) as e:  # and again: the daemon keeps running
        b.api("POST", "/v1/read", {"n": 1_000_000, "mark": False})
    assert e.value.code == "store_damaged" and b.proc is not None and b.proc.poll() is None


def test_a_flipped_bit_in_a_committed_wal_frame_is_reported_at_start(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    b.stop()  # the WAL starts empty at b's next start
    b.start()
    a.connect(b)
    th = a.send(b.key, "first", subject="wal")["th"]
    for i in range(30):
        a.send(b.key, f"{i} {TEXT}", th=th, wait_ack=5)
    wal = os.path.join(b.home, "awp.db-wal")
    b.kill()  # kill -9: the committed frames stay in the WAL
    from awp.store.check import check_wal

    report = check_wal(os.path.join(b.home, "awp.db"))
    assert report.commits >= 30 and not report.damaged, report
    size = os.path.getsize(wal)
    page = _page_size(os.path.join(b.home, "awp.db"))
    with open(wal, "r+b") as f:  # one bit in the page of the second frame
        off = 32 + (24 + page) + 24 + 50
        f.seek(off)
        byte = f.read(1)[0]
        f.seek(off)
        f.write(bytes([byte ^ 0x10]))
    line = _start_fails(b)
    assert "awp.db-wal is damaged at frame 2" in line, line
    assert "committed transactions after it" in line and "awp repair" in line, line
    assert os.path.getsize(wal) == size  # the WAL is left as it was

    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert "committed transaction(s) after its damaged frame" in r.stdout, r.stdout
    kept_wal = [n for n in os.listdir(b.home) if n.startswith("awp.db.damaged-")
                and n.endswith("-wal")]
    assert kept_wal and os.path.getsize(os.path.join(b.home, kept_wal[0])) == size
    b.start()


def _rows_sqlite_reads(home: str, peer: str) -> int:
    """Inbound rows from ``peer`` that SQLite itself reads from a copy of the
    store and its WAL as they are (the copy, so nothing is checkpointed)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            shutil.copyfile(os.path.join(home, "awp.db" + suffix),
                            os.path.join(tmp, "c.db" + suffix))
        con = sqlite3.connect(os.path.join(tmp, "c.db"))
        try:
            return con.execute("SELECT count(*) FROM log WHERE peer = ? AND dir = 'in'",
                               (peer,)).fetchone()[0]
        finally:
            con.close()


def _rows_live(home: str, peer: str) -> int:
    """Inbound rows from ``peer`` as a reader beside the running daemon sees them."""
    con = sqlite3.connect(f"file:{os.path.join(home, 'awp.db')}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT count(*) FROM log WHERE peer = ? AND dir = 'in'",
                           (peer,)).fetchone()[0]
    finally:
        con.close()


def test_a_wal_cut_short_after_acked_messages_refuses_to_start_and_repair_keeps_what_reads(
        make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    b.stop()  # the WAL starts empty at b's next start
    b.start()
    a.connect(b)
    th = a.send(b.key, "first", subject="cut")["th"]
    for i in range(40):
        assert a.send(b.key, f"{i} {TEXT}", th=th, wait_ack=10)["acked"]
    # An ack can come once the line is in the intake journal, before SQLite has
    # it; this test is about the WAL, so let every line reach it first.
    wait_for(lambda: _rows_live(b.home, a.key) == 41, 20, "all 41 lines in SQLite")
    b.kill()  # kill -9: every acked message is in the WAL
    db, wal = os.path.join(b.home, "awp.db"), os.path.join(b.home, "awp.db-wal")
    whole = _rows_sqlite_reads(b.home, a.key)
    assert whole == 41, whole
    page = _page_size(db)
    frames = (os.path.getsize(wal) - 32) // (24 + page)
    cut = 32 + (frames // 2) * (24 + page) + 24 + page // 2  # inside a page, halfway along
    with open(wal, "r+b") as f:
        f.truncate(cut)
    readable = _rows_sqlite_reads(b.home, a.key)
    assert 0 < readable < whole, readable  # SQLite alone would start without the rest

    line = _start_fails(b)
    assert f"awp.db-wal is cut short inside frame {frames // 2 + 1}" in line, line
    assert f"awp repair --home {b.home}" in line, line
    assert os.path.getsize(wal) == cut  # left as it was

    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert f"cut short inside frame {frames // 2 + 1}" in r.stdout, r.stdout
    b.start()
    assert len(b.inbound(peer=a.key)) >= readable


def _eight_bytes_in_a_row(db: str) -> None:
    """Eight bytes changed inside the text of a row on a log leaf page (its
    message's line): SQLite's B-tree stays sound."""
    size = _page_size(db)
    page = _leaf_of_log(db)
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        data = f.read(size)
        at = data.index(TEXT[:64].encode(), size // 2)
        f.seek((page - 1) * size + at + 8)
        f.write(b"\xfe" * 8)


def test_eight_bytes_changed_in_a_row_are_found_at_start_and_repair_keeps_the_rest(make_node):
    a, b = _fill(make_node)
    b.stop()
    db = os.path.join(b.home, "awp.db")
    _eight_bytes_in_a_row(db)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert con.execute("PRAGMA quick_check").fetchall() == [("ok",)]  # SQLite sees nothing
    con.close()
    line = _start_fails(b)
    assert line.startswith("awp daemon: awp.db is damaged (table log: the row after"), line
    assert "awp repair" in line and len(line) < 400, line

    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert "log: 1 unreadable stretch skipped" in r.stdout, r.stdout
    b.start()
    kept = len(b.inbound(peer=a.key))
    assert MSGS - 2 <= kept < MSGS, (kept, r.stdout)  # the damaged row, no more
    threads = b.api("GET", "/v1/threads")
    assert threads, threads


def test_eight_bytes_changed_in_a_row_under_a_running_daemon_are_store_damaged(make_node):
    a, b = _fill(make_node)
    b.stop()
    db = os.path.join(b.home, "awp.db")
    b.start()
    a.connect(b)
    _eight_bytes_in_a_row(db)
    a.send(b.key, "after the damage", wait_ack=30)  # readers drop their page cache
    with pytest.raises(ApiFailure) as e:
        b.api("POST", "/v1/read", {"n": 1_000_000, "mark": False})
    assert e.value.status == 500 and e.value.code == "store_damaged", e.value
    assert "not UTF-8" in e.value.message and "awp repair" in e.value.message, e.value.message
    assert len(e.value.message) < 400, e.value.message  # the damaged value is not quoted
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AWP_HOME", None)
    cli = subprocess.run([sys.executable, "-m", "awp", "read", "--home", b.home, "-n", "1000"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert cli.returncode != 0 and "awp repair" in cli.stderr, (cli.stdout, cli.stderr)
    assert "Traceback" not in cli.stderr, cli.stderr
    lines = _log_lines(b)
    assert any("store damaged" in x for x in lines), lines[-5:]
    assert not any("Traceback" in x for x in lines), lines[-20:]
    assert b.proc is not None and b.proc.poll() is None


def _leaf_of_index(db: str, name: str) -> int:
    return _leaf_of(db, name)


def _flip_a_key_of(db: str, index: str, peer: str) -> None:
    """Eight bytes flipped inside a key of a leaf of ``index`` (in the text
    of ``peer``): the B-tree stays well formed, its keys no longer match."""
    size = _page_size(db)
    page = _leaf_of_index(db, index)
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        data = f.read(size)
        at = data.index(peer.encode(), size // 3)
        f.seek((page - 1) * size + at + 10)
        f.write(bytes(b ^ 0xFF for b in data[at + 10:at + 18]))


def _count_by_thread(db: str, peer: str) -> tuple[int, int]:
    """Inbound rows from ``peer`` found through the index, and by a table scan."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        ths = [r[0] for r in con.execute("SELECT DISTINCT th FROM log NOT INDEXED"
                                          " WHERE peer = ?", (peer,))]
        via = sum(con.execute("SELECT count(*) FROM log INDEXED BY log_thread WHERE peer = ?"
                              " AND th = ?", (peer, th)).fetchone()[0] for th in ths)
        scan = con.execute("SELECT count(*) FROM log NOT INDEXED WHERE peer = ?",
                           (peer,)).fetchone()[0]
        return via, scan
    finally:
        con.close()


def test_a_damaged_index_refuses_to_start_and_repair_keeps_every_row(make_node):
    a, b = _fill(make_node)
    b.stop()  # a clean stop: no WAL, the rows are in awp.db
    db = os.path.join(b.home, "awp.db")
    _flip_a_key_of(db, "log_thread", a.key)
    via, scan = _count_by_thread(db, a.key)
    assert via < scan, (via, scan)  # lookups through the index miss rows
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert con.execute("PRAGMA quick_check").fetchall() == [("ok",)]  # SQLite's quick look sees nothing
    con.close()

    line = _start_fails(b)
    assert line.startswith("awp daemon: awp.db is damaged ("), line
    assert "log_thread" in line and f"awp repair --home {b.home}" in line, line
    r = _repair(b, "--check")
    assert r.returncode == 1 and "log_thread" in r.stderr, (r.stdout, r.stderr)

    r = _repair(b)
    assert r.returncode == 0, r.stderr
    assert "unreadable" not in r.stdout, r.stdout  # an index is rebuilt, no row lost
    via, scan = _count_by_thread(db, a.key)
    assert via == scan == MSGS, (via, scan)
    b.start()
    assert len(b.inbound(peer=a.key)) == MSGS
    b.stop()
    r = _repair(b, "--check")
    assert r.returncode == 0 and "sound" in r.stdout, (r.stdout, r.stderr)


def _grow(db: str, peer: str, n: int) -> None:
    """``n`` more inbound rows from ``peer`` in one thread, written straight
    into the stopped store (so a repair takes long enough to be killed)."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        th = con.execute("SELECT th FROM log WHERE peer = ? LIMIT 1", (peer,)).fetchone()[0]
        con.execute("BEGIN")
        for i in range(n):
            mid = f"01ZZ{i:022d}"
            line = json.dumps({"t": "msg", "id": mid, "ts": "2026-12-07T00:00:00.000Z",
                               "th": th, "parts": [{"k": "text", "text": f"{i} {TEXT}"}]})
            con.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line, acked)"
                        " VALUES (?, 'in', 'msg', ?, ?, ?, ?, ?, 1)",
                        (peer, mid, th, 1_800_000_000_000 + i, 1_800_000_000_000 + i, line))
        con.execute("COMMIT")
    finally:
        con.close()


def test_a_repair_killed_mid_way_keeps_the_daemon_off_until_repair_finishes(make_node):
    a, b = _fill(make_node)
    b.stop()
    db = os.path.join(b.home, "awp.db")
    _grow(db, a.key, 60_000)
    total = MSGS + 60_000
    _flip_a_key_of(db, "log_thread", a.key)
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AWP_HOME", None)
    proc = subprocess.Popen([sys.executable, "-m", "awp", "repair", "--home", b.home],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=ROOT)
    try:
        # Mid-way: the files moved aside, the new store half made.
        wait_for(lambda: os.path.exists(db + ".repair-new") and proc.poll() is None
                 or proc.poll() is not None, 60, "the repair copying rows", interval=0.002)
        assert proc.poll() is None, "the repair finished before it could be killed"
        proc.kill()
    finally:
        proc.wait(10)
    assert os.path.exists(db + ".repairing")

    line = _start_fails(b)
    assert "a repair was stopped before it finished" in line, line
    assert f"awp repair --home {b.home}" in line, line
    r = _repair(b, "--check")
    assert r.returncode == 1 and "a repair was stopped" in r.stderr, (r.stdout, r.stderr)

    r = _repair(b)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert not os.path.exists(db + ".repairing") and not os.path.exists(db + ".repair-new")
    aside = [n for n in os.listdir(b.home) if n.startswith("awp.db.damaged-")
             and not n.endswith(("-wal", "-shm"))]
    assert len(aside) == 1, os.listdir(b.home)  # the damaged file, kept once
    b.start()
    assert len(b.inbound(peer=a.key)) == total
