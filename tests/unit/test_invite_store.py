"""Spending an invite (awp/store/invites.py) and a key's endpoints (awp/store/reach.py)."""

from __future__ import annotations

import pytest

from awp.store import invites, reach
from awp.store.db import open_store

NOW = 1_800_000_000_000
V = b"\x11" * 32


@pytest.fixture
def c(tmp_path):
    conn = open_store(str(tmp_path / "awp.db"))
    yield conn
    conn.close()


def _make(c, ident="inv_aaaaaaaaaaaa", uses=1, ttl_ms=60_000, max_live=10):
    invites.create(c, ident, V, uses=uses, expires=NOW + ttl_ms, caps=["fs:read"],
                   topics=[], grant_ttl_ms=1000, now=NOW, max_live=max_live)


def test_a_wrong_mac_spends_nothing_and_a_right_one_spends_one_use(c):
    _make(c, uses=2)
    assert invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: False, "k1", NOW).refusal.startswith(
        "invite proof does not verify")
    assert invites.listing(c, NOW)[0]["uses_left"] == 2
    got = invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: v == V, "k1", NOW)
    assert got.refusal == "" and got.first and got.caps == ["fs:read"]
    again = invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: True, "k1", NOW)
    assert again.refusal == "" and not again.first  # the same key: a second link
    assert invites.listing(c, NOW)[0]["uses_left"] == 1
    assert invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: True, "k2", NOW).first
    row = invites.listing(c, NOW)[0]
    assert row["state"] == "used" and row["used_by"] == ["k1", "k2"]
    assert invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: True, "k3", NOW).refusal == (
        "invite already used")


def test_unknown_expired_and_revoked(c):
    assert invites.redeem(c, "inv_bbbbbbbbbbbb", lambda v: True, "k", NOW).refusal == (
        "unknown invite")
    _make(c)
    assert invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: True, "k", NOW + 60_000).refusal == (
        "invite expired")
    assert invites.revoke(c, "inv_aaaaaaaaaaaa") and not invites.revoke(c, "inv_bbbbbbbbbbbb")
    assert invites.redeem(c, "inv_aaaaaaaaaaaa", lambda v: True, "k", NOW).refusal == (
        "invite revoked")


def test_live_invites_are_bounded_and_dead_ones_pruned(c):
    _make(c, "inv_aaaaaaaaaaaa", max_live=2)
    _make(c, "inv_cccccccccccc", max_live=2)
    with pytest.raises(invites.TooManyInvites, match="limits.invites is 2"):
        _make(c, "inv_dddddddddddd", max_live=2)
    invites.revoke(c, "inv_aaaaaaaaaaaa")
    _make(c, "inv_dddddddddddd", max_live=2)  # a revoked one no longer counts
    assert invites.prune(c, NOW + invites.KEEP_DEAD_MS + 120_000) == 3
    assert invites.listing(c, NOW) == []


def test_a_hello_cannot_grow_a_keys_addresses(c):
    for i in range(40):  # a new list on every connection
        reach.add_endpoints(c, "k", [f"tcp:10.0.{i}.{j}:7" for j in range(8)], "hello", NOW + i)
    rows = c.execute("SELECT addr FROM addresses WHERE peer = 'k'").fetchall()
    assert sorted(r[0] for r in rows) == sorted(f"tcp:10.0.39.{j}:7" for j in range(8))
    reach.address_won(c, "k", "tcp:10.0.39.0:7", 42, NOW)
    reach.add_endpoints(c, "k", ["tcp:10.1.0.0:7"], "hello", NOW + 99)
    kept = {r[0]: r[1] for r in c.execute("SELECT addr, hs_ms FROM addresses WHERE peer = 'k'")}
    assert kept == {"tcp:10.0.39.0:7": 42, "tcp:10.1.0.0:7": 0}  # what worked stays
