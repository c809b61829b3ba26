"""The id reservation that lets a line leave before its commit."""

from __future__ import annotations

import os
import sqlite3

from awp.store import ops
from awp.store.db import open_store
from awp.store.idfloor import AHEAD_MS, MIN_FREE, RENEW_MS, IdFloor
from awp.wire.ids import IdGenerator, decode_ulid, encode_ulid, ulid_time_ms


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _vfs(free: int, readonly: bool = False):
    def statvfs(_path: str):
        return os.statvfs_result((4096, 4096, 10**6, free // 4096, free // 4096, 0, 0, 0,
                                  os.ST_RDONLY if readonly else 0, 255))
    return statvfs


def _floor(home, clock: Clock) -> tuple[IdGenerator, IdFloor]:
    """An id generator and its reservation on a disk with plenty of room."""
    gen = IdGenerator(clock=clock)
    return gen, IdFloor(gen, str(home), clock=clock, statvfs=_vfs(10 * MIN_FREE))


def _started(home, clock: Clock, conn: sqlite3.Connection) -> IdGenerator:
    """The id generator of a daemon starting on ``conn``'s store."""
    gen = IdGenerator(clock=clock)
    IdFloor(gen, str(home), clock=clock).load(conn)
    return gen


def _commit(conn: sqlite3.Connection, floor: IdFloor) -> None:
    conn.execute("BEGIN IMMEDIATE")
    floor.before_commit(conn)
    conn.execute("COMMIT")
    floor.committed()


def test_no_early_send_before_a_reservation_commits(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(1_000_000)
    gen, floor = _floor(tmp_path, clock)
    gen.next()
    assert not floor.early_ok()
    floor.load(conn)  # reserves and commits before the first id of the run
    assert floor.early_ok()
    assert floor.committed_ms == clock.now + AHEAD_MS


def test_two_runs_from_one_reservation_never_draw_the_same_ids(tmp_path):
    """A run that dies before renewing must not be repeated id for id by the next."""
    path = str(tmp_path / "awp.db")
    clock = Clock(7_000_000)
    runs = []
    for _ in range(3):
        conn = open_store(path)
        gen = IdGenerator(clock=clock)
        IdFloor(gen, str(tmp_path), clock=clock).load(conn)
        runs.append([gen.next() for _ in range(5)])  # acks, pings: never stored
        conn.close()  # kill -9 before any commit of its own
    flat = [i for run in runs for i in run]
    assert len(set(flat)) == len(flat)
    assert flat == sorted(flat)


def test_an_id_past_the_reservation_waits_for_the_renewal(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(1_000_000)
    gen, floor = _floor(tmp_path, clock)
    _commit(conn, floor)
    clock.now += AHEAD_MS + 1
    gen.next()
    assert not floor.early_ok()
    _commit(conn, floor)
    assert floor.early_ok()


def test_renewal_only_when_running_short(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(1_000_000)
    gen, floor = _floor(tmp_path, clock)
    _commit(conn, floor)
    first = ops.get_meta(conn, "id_floor")
    clock.now += AHEAD_MS - RENEW_MS - 1
    _commit(conn, floor)
    assert ops.get_meta(conn, "id_floor") == first
    clock.now += 2
    _commit(conn, floor)
    assert ops.get_meta(conn, "id_floor") != first


def _reserved(tmp_path) -> tuple[sqlite3.Connection, Clock, IdGenerator, IdFloor]:
    """A store whose id reservation has committed once."""
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(5_000_000)
    gen, floor = _floor(tmp_path, clock)
    _commit(conn, floor)
    return conn, clock, gen, floor


def test_a_crash_restart_issues_ids_above_anything_that_may_have_left(tmp_path):
    conn, clock, gen, floor = _reserved(tmp_path)
    sent = gen.next()  # went out early, its transaction never committed
    assert floor.early_ok()
    conn.close()  # "kill -9": no release
    clock.now -= 3_600_000  # and the clock stepped back an hour
    conn = open_store(str(tmp_path / "awp.db"))
    gen2 = _started(tmp_path, clock, conn)
    assert gen2.next() > sent


def test_clean_release_keeps_the_last_id_and_drops_the_reservation(tmp_path):
    conn, clock, gen, floor = _reserved(tmp_path)
    last = gen.next()
    floor.release(conn)
    assert ops.get_meta(conn, "id_floor") is None
    gen2 = _started(tmp_path, clock, conn)
    nxt = gen2.next()
    assert nxt > last
    assert ulid_time_ms(nxt) == clock.now  # not pushed ahead by the old reservation


def test_full_or_readonly_disk_or_a_failed_commit_turns_early_sending_off(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(1_000_000)
    for vfs in (_vfs(MIN_FREE - 1), _vfs(10 * MIN_FREE, readonly=True)):
        gen = IdGenerator(clock=clock)
        floor = IdFloor(gen, str(tmp_path), clock=clock, statvfs=vfs)
        _commit(conn, floor)
        gen.next()
        assert not floor.early_ok()
    gen, floor = _floor(tmp_path, clock)
    _commit(conn, floor)
    gen.next()
    floor.failed()
    assert not floor.early_ok()
    floor.release(conn)  # after a failure the reservation must stay
    assert ops.get_meta(conn, "id_floor") is not None
    _commit(conn, floor)
    assert floor.early_ok()
    assert decode_ulid(ops.get_meta(conn, "id_floor")) >> 80 >= clock.now


def test_repeated_crashes_keep_ids_within_a_minute_of_the_clock(tmp_path):
    path = str(tmp_path / "awp.db")
    clock = Clock(9_000_000)
    for _crash in range(10):
        conn = open_store(path)
        gen, floor = _floor(tmp_path, clock)
        floor.load(conn)
        gen.next()
        _commit(conn, floor)
        gen.next()
        conn.close()  # kill -9
        clock.now += 500  # and back up half a second later
    assert ulid_time_ms(gen.last) <= clock.now + AHEAD_MS


def test_ids_ahead_of_the_reservation_are_remembered_in_each_commit(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    clock = Clock(9_000_000)
    gen, floor = _floor(tmp_path, clock)
    gen.next()
    _commit(conn, floor)
    assert ops.get_meta(conn, "last_id") is None  # an ordinary commit writes no last id
    gen.seed(encode_ulid((clock.now + AHEAD_MS + 5_000) << 80))  # e.g. the clock stepped back
    gen.next()
    _commit(conn, floor)
    assert ops.get_meta(conn, "last_id") == gen.last
