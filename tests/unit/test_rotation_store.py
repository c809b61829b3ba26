"""awp/store/rotations.py on a real SQLite store: one peer carried over to its new key."""

from __future__ import annotations

import json

import pytest

from awp.store import rotations as S
from awp.store.db import open_store
from awp.wire import rotation as R
from awp.wire.grants import expires_ms, make_grant
from awp.wire.keys import Identity

K1, K2, K3, ME = (Identity(bytes([i]) * 32) for i in (1, 2, 3, 9))
NOW = 1796212800000


@pytest.fixture
def c(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    yield conn
    conn.close()


def _resign(g: dict) -> dict:
    return make_grant(ME, g["sub"], g["caps"], expires_ms(g), g.get("aud") or None)


def _seed_peer(c, key: str) -> None:
    c.execute("INSERT INTO peers (key, name, first_seen) VALUES (?, 'builder', 1)", (key,))
    c.execute("INSERT INTO aliases (alias, key) VALUES ('b', ?)", (key,))
    c.execute("INSERT INTO threads (peer, th, created, updated, my_since, their_since)"
              " VALUES (?, 'thr_1', 1, 1, 1, 1)", (key,))
    c.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line, read) VALUES"
              " (?, 'in', 'msg', '01A', 'thr_1', 1, 1, '{}', 0)", (key,))
    c.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES"
              " (?, '01B', 'msg', 'thr_1', '{}', 1)", (key,))
    g = make_grant(ME, key, ["fs:read"], NOW + 3600_000)
    from awp.store import grants

    grants.put(c, g, "issued", NOW)


def test_take_moves_every_row_and_reissues_grants(c) -> None:
    _seed_peer(c, K1.key)
    rot = R.check(R.make(K1, K2, 1, K3.key, NOW))
    assert S.take(c, rot, NOW, _resign) == R.NEW
    assert c.execute("SELECT count(*) FROM peers WHERE key = ?", (K1.key,)).fetchone()[0] == 0
    row = c.execute("SELECT name, rotated_from FROM peers WHERE key = ?", (K2.key,)).fetchone()
    assert tuple(row) == ("builder", K1.key)
    for table, col in (("aliases", "key"), ("threads", "peer"), ("log", "peer"),
                       ("outbox", "peer")):
        assert c.execute(f"SELECT count(*) FROM {table} WHERE {col} = ?",
                         (K2.key,)).fetchone()[0] == 1, table
        assert c.execute(f"SELECT count(*) FROM {table} WHERE {col} = ?",
                         (K1.key,)).fetchone()[0] == 0, table
    subs = [json.loads(g)["sub"] for (g,) in c.execute("SELECT grant FROM grants")]
    assert subs == [K2.key]
    assert S.current(c, K1.key) == K2.key and S.history(c, K2.key) == [K1.key]
    assert S.take(c, rot, NOW, _resign) == R.DUPLICATE


def test_conflict_kept_as_evidence(c) -> None:
    _seed_peer(c, K1.key)
    S.take(c, R.check(R.make(K1, K2, 1, K3.key, NOW)), NOW, _resign)
    other = R.check(R.make(K1, K3, 1, K2.key, NOW))
    applied, why = S.take_chain(c, [other], NOW, _resign)
    assert applied == [] and "(conflict)" in why
    ev = S.conflicts(c)
    assert ev[K2.key]["n"] == 1 and ev[K2.key]["pairs"][0]["b"]["new"] == K3.key


def test_sweep_moves_what_the_old_key_got_afterwards(c) -> None:
    _seed_peer(c, K1.key)
    S.take(c, R.check(R.make(K1, K2, 1, K3.key, NOW)), NOW, _resign)
    # A send that resolved the old key just before the record was taken.
    c.execute("INSERT INTO peers (key, first_seen) VALUES (?, ?)", (K1.key, NOW + 5))
    c.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES"
              " (?, '01C', 'msg', 'thr_1', '{}', 1)", (K1.key,))
    assert S.sweep(c, NOW, _resign) == 1
    assert c.execute("SELECT count(*) FROM peers WHERE key = ?", (K1.key,)).fetchone()[0] == 0
    assert c.execute("SELECT name FROM peers WHERE key = ?", (K2.key,)).fetchone()[0] == "builder"
    ids = [r[0] for r in c.execute("SELECT id FROM outbox WHERE peer = ? ORDER BY id", (K2.key,))]
    assert ids == ["01B", "01C"]
