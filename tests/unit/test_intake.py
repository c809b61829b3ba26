"""The intake journal: record format, rounds, torn writes, recovery into a store."""

from __future__ import annotations

import json
import os
import stat

import pytest

from awp.node.intake import FILENAME, Intake
from awp.store import intake as ij
from awp.store import ops
from awp.store.db import open_store
from awp.store.intake import IntakeJournal, Record, decode_all, encode

PEER = "ed25519:" + "A" * 43
OTHER = "ed25519:" + "B" * 43


def _msg(ident: str, text: str = "hello", th: str = "thr_aaaaaaaa", **extra) -> str:
    line = {"t": "msg", "id": ident, "ts": "2026-11-30T03:00:00.000Z", "th": th,
            "parts": [{"k": "text", "text": text}], **extra}
    return json.dumps(line, separators=(",", ":"))


def _id(n: int) -> str:
    return f"01M8N8{n:020d}"


@pytest.fixture(params=[True, False], ids=["direct", "buffered"])
def journal(tmp_path, request):
    """A journal whose appends bypass the page cache (where the file system
    allows) and one whose appends go through it: both keep the same file."""
    j = IntakeJournal.open(str(tmp_path / FILENAME), direct=request.param)
    yield j
    j.close()


def _direct_io_works(path) -> bool:
    try:
        fd = os.open(str(path), os.O_WRONLY | getattr(os, "O_DIRECT", 0))
    except OSError:
        return False
    os.close(fd)
    return hasattr(os, "O_DIRECT")


def test_appends_bypass_the_page_cache_where_the_file_system_allows(tmp_path):
    j = IntakeJournal.open(str(tmp_path / FILENAME))
    try:
        assert j.direct == _direct_io_works(j.path)
    finally:
        j.close()
    j = IntakeJournal.open(str(tmp_path / FILENAME), direct=False)
    try:
        assert not j.direct
    finally:
        j.close()


def test_records_across_block_boundaries_read_back_and_older_rounds_stay_hidden(journal):
    """Records of every size in one round cross the 4 KiB blocks a direct
    write covers; each write keeps the round's earlier bytes in its first
    block, and a new round reads back alone over a longer old one."""
    recs = [Record(PEER, i, _msg(_id(i), "z" * (37 * i % 1500))) for i in range(40)]
    for r in recs:
        assert journal.append(r, rewind=False)
    assert journal.recover().records == recs
    with open(journal.path, "rb") as f:
        assert decode_all(f.read()).records == recs  # what another reader sees
    for _ in recs:
        journal.stored()
    fresh = Record(OTHER, 1, _msg(_id(99)))
    assert journal.append(fresh)
    assert journal.recover().records == [fresh]
    again = IntakeJournal.open(journal.path)
    try:
        assert again.recover().records == [fresh]
    finally:
        again.close()


def test_a_name_swapped_between_the_two_opens_gets_no_direct_writes(tmp_path):
    """The direct descriptor is opened by name after the first one: a file or a
    symlink put in the journal's place meanwhile must not take the appends."""
    first = tmp_path / "first"
    first.write_bytes(bytes(ij.SIZE))
    other = tmp_path / "other"
    other.write_bytes(bytes(ij.SIZE))
    fd = os.open(str(first), os.O_RDWR)
    try:
        assert ij._open_direct(str(other), fd) == -1  # another file under the name
        (tmp_path / "link").symlink_to(first)
        assert ij._open_direct(str(tmp_path / "link"), fd) == -1  # never through a symlink
        if _direct_io_works(first):
            same = ij._open_direct(str(first), fd)
            assert same >= 0
            os.close(same)
    finally:
        os.close(fd)


def test_a_refused_direct_write_goes_through_the_page_cache_from_then_on(tmp_path, monkeypatch):
    """A direct write refused with EINVAL (alignment, or a file system that took
    the flag at open only) leaves the journal working, buffered from then on.
    The second descriptor here is a plain one, so this runs on any file system."""
    path = str(tmp_path / FILENAME)
    IntakeJournal.open(path, direct=False).close()  # created, zero-filled
    j = IntakeJournal(os.open(path, os.O_RDWR), path, os.open(path, os.O_WRONLY))
    assert j.direct
    real = ij._write_all
    refused = []

    def write_all(fd, data, off):
        if fd == j._direct:
            refused.append(fd)
            raise OSError(22, "Invalid argument")
        real(fd, data, off)

    monkeypatch.setattr(ij, "_write_all", write_all)
    try:
        first, second = Record(PEER, 1, _msg(_id(1))), Record(PEER, 2, _msg(_id(2)))
        assert j.append(first, rewind=False) and j.append(second, rewind=False)
        assert len(refused) == 1 and not j.direct and not j.broken
        assert j.recover().records == [first, second]
    finally:
        j.close()


def _pair(serial: int, rec: Record) -> bytes:
    """A record as the journal writes it: twice in a row."""
    return encode(serial, rec) * 2


def test_records_round_trip_in_order():
    recs = [Record(PEER, 1000 + i, _msg(_id(i), f"text {i} \u00e9\u4e2d")) for i in range(5)]
    data = b"".join(_pair(41 + i, r) for i, r in enumerate(recs)) + bytes(100)
    scan = decode_all(data)
    assert scan.records == recs and scan.last == 45 and not scan.lost
    # one copy per record (what an older awp wrote) reads the same
    assert decode_all(b"".join(encode(41 + i, r) for i, r in enumerate(recs))).records == recs


def test_a_torn_last_record_ends_the_round_and_is_counted():
    recs = [Record(PEER, i, _msg(_id(i))) for i in range(3)]
    whole = b"".join(_pair(7 + i, r) for i, r in enumerate(recs))
    one = len(whole) // 6
    cut = whole[:-one - 5]  # the last write cut short inside its first copy
    for data in (cut + bytes(100), cut):  # ... before the file's end, or at it
        scan = decode_all(data)
        assert scan.records == recs[:2] and (scan.damaged, scan.torn, scan.lost) == (0, 1, ())
    scan = decode_all(whole[:-5] + bytes(100))  # cut short in its second copy: read whole
    assert scan.records == recs and not scan.lost
    assert decode_all(whole + bytes(100)) == (recs, 9, 0, 0, ())


def test_every_single_flipped_bit_loses_nothing():
    """A flipped bit anywhere in the written records: every line still reads
    from its other copy, and no line is reported lost."""
    recs = [Record(PEER, i, _msg(_id(i))) for i in range(3)]
    data = b"".join(_pair(7 + i, r) for i, r in enumerate(recs)) + bytes(64)
    for pos in range(len(data) - 64):
        for bit in (0x01, 0x80):
            flipped = bytearray(data)
            flipped[pos] ^= bit
            scan = decode_all(bytes(flipped))
            assert scan.records == recs and not scan.lost and not scan.torn, (pos, bit, scan)


@pytest.mark.parametrize("which", [0, 1, 3])  # the first, a middle and the last record
def test_a_record_with_both_copies_damaged_is_named_as_lost(which):
    recs = [Record(PEER if i % 2 else OTHER, i, _msg(_id(i))) for i in range(4)]
    pairs = [_pair(7 + i, r) for i, r in enumerate(recs)]
    data = bytearray(b"".join(pairs) + bytes(64))
    start = sum(len(x) for x in pairs[:which])
    one = len(pairs[which]) // 2
    data[start + one - 3] ^= 0x01  # the end of the first copy's text
    data[start + one + ij._HEADER.size + 2] ^= 0x01  # the peer key of the second copy
    scan = decode_all(bytes(data))
    assert scan.records == [r for i, r in enumerate(recs) if i != which], scan
    assert [(x.serial, x.peer, x.id) for x in scan.lost] == [(7 + which, recs[which].peer,
                                                                _id(which))]


def test_a_serial_that_does_not_follow_ends_the_round():
    a, b = Record(PEER, 1, _msg(_id(1))), Record(PEER, 2, _msg(_id(2)))
    assert decode_all(_pair(10, a) + _pair(9, b))[0] == [a]  # an older round's leftover


def test_journal_file_is_private_zero_filled_and_refuses_a_symlink(tmp_path):
    path = tmp_path / FILENAME
    IntakeJournal.open(str(path)).close()
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == ij.SIZE
    assert IntakeJournal.open(str(path)).recover().records == []
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    link = tmp_path / "linked.journal"
    link.symlink_to(target)
    with pytest.raises(OSError):
        IntakeJournal.open(str(link))
    assert target.read_bytes() == b""


def test_appended_lines_are_recovered_until_stored(tmp_path, journal):
    recs = [Record(PEER, i, _msg(_id(i))) for i in range(3)]
    assert all(journal.append(r) for r in recs)
    assert journal.pending == 3
    reopened = IntakeJournal.open(journal.path)
    assert reopened.recover().records == recs
    reopened.close()


def test_a_new_round_starts_at_the_beginning_and_hides_the_old_one(journal):
    old = [Record(PEER, i, _msg(_id(i), "an older, longer line " * 3)) for i in range(3)]
    for r in old:
        assert journal.append(r)
        journal.stored()
    assert journal.pending == 0
    new = Record(OTHER, 99, _msg(_id(50), "new"))
    assert journal.append(new)
    assert journal.recover().records == [new]
    # the same length as the record it overwrites: the next old record's
    # serial is lower than the new one's, so it is not read as a follower
    for _ in range(2):
        journal.stored()
    same = Record(PEER, 0, _msg(_id(0), "an older, longer line " * 3))
    assert journal.append(same)
    assert journal.recover().records == [same]


def test_a_round_goes_on_while_stored_lines_are_not_synced_yet(journal):
    """Lines stored by a commit that owes its fsync (rewind False) keep their
    records: the next line goes after them, in the same round, and a start
    reads them all; once the sync is paid, a new round starts at 0."""
    old = [Record(PEER, i, _msg(_id(i))) for i in range(2)]
    for r in old:
        assert journal.append(r, rewind=False)
        journal.stored()
    assert journal.pending == 0
    nxt = Record(OTHER, 7, _msg(_id(7)))
    assert journal.fits(len(nxt.text), rewind=False) and journal.append(nxt, rewind=False)
    assert journal.recover().records == [*old, nxt]
    journal.stored()
    fresh = Record(OTHER, 8, _msg(_id(8)))
    assert journal.append(fresh)  # synced: a new round
    assert journal.recover().records == [fresh]


def test_clear_empties_the_journal(journal):
    journal.append(Record(PEER, 1, _msg(_id(1))))
    journal.clear()
    assert journal.recover().records == [] and journal.pending == 0


def test_oversized_lines_and_a_full_round_take_the_ordinary_way(journal):
    assert not journal.fits(ij.MAX_RECORD + 1)
    big = Record(PEER, 1, _msg(_id(1), "x" * (ij.MAX_RECORD - 500)))
    n = 0
    while journal.fits(len(big.text)) and journal.append(big):
        n += 1
    size = len(_pair(0, big))  # each record is written twice
    assert n == ij.SIZE // size or n == ij.SIZE // size - 1  # as many as fit
    assert not journal.append(big)
    assert len(journal.recover().records) == n
    for _ in range(n):
        journal.stored()
    assert journal.fits(len(big.text)) and journal.append(big)  # a new round


def test_every_record_the_journal_takes_is_read_back_at_the_size_limit(journal):
    base = len(_msg(_id(1), ""))
    taken = []
    for size in range(ij.MAX_RECORD - 120, ij.MAX_RECORD + 2, 7):
        rec = Record(PEER, 1, _msg(_id(1), "y" * (size - base)))
        if journal.append(rec):
            taken.append(rec)
        journal.stored()
        assert journal.recover().records == taken[-1:]
    assert taken and len(taken[-1].text) < ij.MAX_RECORD


def test_a_failed_sync_stops_the_journal_and_keeps_its_round(journal, monkeypatch):
    journal.append(Record(PEER, 1, _msg(_id(1))))

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ij, "_sync", broken)
    assert not journal.append(Record(PEER, 2, _msg(_id(2))))
    assert "Input/output error" in journal.broken and not journal.fits(10)
    journal.stored()
    assert journal.pending == 1  # the round stays: the next start reads it again


def _inbound(conn, peer: str = PEER) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT id, th FROM log WHERE dir = 'in' AND peer = ? ORDER BY seq", (peer,))]


def test_start_stores_what_a_crashed_run_acked_exactly_once(tmp_path):
    home = str(tmp_path)
    conn = open_store(os.path.join(home, "awp.db"))
    j = IntakeJournal.open(os.path.join(home, FILENAME))
    lines = [_msg(_id(i), f"m{i}") for i in range(4)]
    state = json.dumps({"t": "state", "id": _id(9), "ts": "2026-11-30T03:00:00.000Z",
                        "th": "thr_aaaaaaaa", "state": "working", "note": "on it"},
                       separators=(",", ":"))
    for i, text in enumerate([*lines, state]):
        assert j.append(Record(PEER, 1_700_000_000_000 + i, text))
    j.close()
    # one of them had reached SQLite before the crash
    conn.execute("BEGIN IMMEDIATE")
    ops.store_inbound(conn, PEER, json.loads(lines[0]), lines[0], 1)
    conn.execute("COMMIT")

    intake = Intake.start(home, conn)
    assert intake is not None
    assert _inbound(conn) == [(_id(i), "thr_aaaaaaaa") for i in range(4)] + [
        (_id(9), "thr_aaaaaaaa")]
    row = conn.execute("SELECT theirs, their_note FROM threads WHERE th = 'thr_aaaaaaaa'"
                       ).fetchone()
    assert tuple(row) == ("working", "on it")
    seen = conn.execute("SELECT last_id FROM seen WHERE peer = ?", (PEER,)).fetchone()[0]
    assert seen == _id(9)
    intake.close()
    again = Intake.start(home, conn)  # the journal was cleared: nothing more
    assert again is not None and len(_inbound(conn)) == 5
    again.close()


def test_an_unreadable_record_is_skipped_not_fatal(tmp_path):
    home = str(tmp_path)
    conn = open_store(os.path.join(home, "awp.db"))
    j = IntakeJournal.open(os.path.join(home, FILENAME))
    j.append(Record(PEER, 1, "not json"))
    j.append(Record(PEER, 2, '{"t":"state","id":"' + _id(3) + '","th":"thr_aaaaaaaa"}'))
    j.append(Record(PEER, 3, _msg(_id(4))))
    j.close()
    intake = Intake.start(home, conn)
    assert intake is not None and _inbound(conn) == [(_id(4), "thr_aaaaaaaa")]
    intake.close()


@pytest.fixture
def started(tmp_path):
    """A store and the intake of a daemon that just started in an empty home."""
    conn = open_store(str(tmp_path / "awp.db"))
    intake = Intake.start(str(tmp_path), conn)
    assert intake is not None
    yield conn, intake
    intake.close()


def test_which_lines_may_be_journaled(started):
    _conn, intake = started
    msg = json.loads(_msg(_id(1)))
    assert intake.eligible(msg, 200, mirrored=False)
    assert not intake.eligible(msg, 200, mirrored=True)  # copies go to a dashboard host
    assert not intake.eligible(msg, ij.MAX_RECORD + 1, mirrored=False)
    blob = dict(msg, parts=[{"k": "blob", "ref": "b_1", "name": "f", "size": 3}])
    assert not intake.eligible(blob, 200, mirrored=False)
    request = dict(msg, parts=[{"k": "data", "mime": "application/vnd.awp.fs-read+json",
                                "data": {"path": "x"}}])
    assert not intake.eligible(request, 200, mirrored=False)
    plain_data = dict(msg, parts=[{"k": "data", "mime": "application/json", "data": {}}])
    assert intake.eligible(plain_data, 200, mirrored=False)
    assert intake.eligible({"t": "state", "id": _id(2), "th": "t", "state": "done"}, 90,
                           mirrored=False)
    assert not intake.eligible({"t": "mirror", "id": _id(3)}, 90, mirrored=False)


def test_a_line_that_missed_sqlite_is_stored_before_newer_ones(started):
    conn, intake = started
    first = _msg(_id(1), "acked from the journal, then the commit failed")
    assert intake.append(PEER, 5, first)
    intake.store_failed(PEER, 5, first, OSError("disk trouble"))
    assert not intake.eligible(json.loads(_msg(_id(2))), 100, mirrored=False)
    for n in (2, 3):  # later jobs store the missed line first, then their own
        conn.execute("BEGIN IMMEDIATE")
        intake.store_unstored(conn)
        text = _msg(_id(n))
        ops.store_inbound(conn, PEER, json.loads(text), text, 6)
        conn.execute("COMMIT")
    assert [i for i, _ in _inbound(conn)] == [_id(1), _id(2), _id(3)]
    assert intake._unstored == []  # seen stored by the second job: dropped
