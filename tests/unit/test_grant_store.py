"""Grants in the store: what we keep, what we present, what we honor, and how fast.

A peer with one authenticated key can send us any number of validly signed
grants (from keys it makes up) and pad them with unknown fields; these tests
pin down that what we keep and present stays bounded and that deciding what
a peer may do costs a few indexed queries, not one per stored grant.
"""

from __future__ import annotations

import time

import pytest

from awp.base.limits import Limits
from awp.store import grants as gs
from awp.store.db import open_store
from awp.wire.canonical import compact_json
from awp.wire.grants import make_grant
from awp.wire.keys import Identity

NOW = 1_790_000_000_000
HOUR = 3_600_000


@pytest.fixture
def db(tmp_path):
    c = open_store(str(tmp_path / "awp.db"))
    yield c
    c.close()


def _padded(iss: Identity, sub: str, size: int, **kw) -> dict:
    """A validly signed grant padded with an unknown field to about ``size`` bytes."""
    g = {"iss": iss.key, "sub": sub, "caps": ["fs:read"], "exp": "2026-09-25T20:00:00Z",
         "nonce": "n", "pad": "x" * size, **kw}
    from awp.wire.canonical import canonical_bytes
    g["sig"] = iss.sign(canonical_bytes(g))
    return g


def _count_statements(c):
    seen: list[str] = []
    c.set_trace_callback(seen.append)
    return seen


# -- what we keep ---------------------------------------------------------------------

def test_oversized_grant_is_not_kept(db):
    me, peer = Identity.generate(), Identity.generate()
    lim = Limits()
    big = _padded(peer, me.key, 600_000)
    big["exp"] = "2099-01-01T00:00:00Z"
    from awp.wire.canonical import canonical_bytes
    big["sig"] = peer.sign(canonical_bytes({k: v for k, v in big.items() if k != "sig"}))
    assert gs.receive(db, big, me.key, peer.key, NOW, lim) is None
    small = make_grant(peer, me.key, ["fs:read"], NOW + HOUR)
    assert gs.receive(db, small, me.key, peer.key, NOW, lim)
    assert db.execute("SELECT count(*) FROM grants").fetchone()[0] == 1


def test_self_signed_grant_is_not_kept(db):
    me, peer = Identity.generate(), Identity.generate()
    g = make_grant(peer, peer.key, ["exec"], NOW + HOUR)
    assert gs.receive(db, g, me.key, peer.key, NOW, Limits()) is None
    assert db.execute("SELECT count(*) FROM grants").fetchone()[0] == 0


def test_per_issuer_cap_keeps_the_newest(db):
    me, peer = Identity.generate(), Identity.generate()
    lim = Limits(grants_per_issuer=3)
    hashes = [gs.receive(db, make_grant(peer, me.key, ["fs:read"], NOW + HOUR + i),
                         me.key, peer.key, NOW + i, lim) for i in range(5)]
    assert all(hashes)
    kept = {r[0] for r in db.execute("SELECT hash FROM grants WHERE kind = 'held'")}
    assert kept == set(hashes[-3:])


def test_expired_grants_of_an_issuer_go_first(db):
    me, peer = Identity.generate(), Identity.generate()
    lim = Limits(grants_per_issuer=2)
    short = gs.receive(db, make_grant(peer, me.key, ["fs:read"], NOW + 10_000), me.key,
                       peer.key, NOW, lim)
    assert short
    long_ = gs.receive(db, make_grant(peer, me.key, ["fs:read"], NOW + HOUR), me.key, peer.key,
                       NOW + 1, lim)
    later = NOW + 10_000
    new = gs.receive(db, make_grant(peer, me.key, ["exec"], later + HOUR), me.key, peer.key,
                     later, lim)
    kept = {r[0] for r in db.execute("SELECT hash FROM grants")}
    assert kept == {long_, new} and short not in kept


def test_per_peer_cap_bounds_grants_from_made_up_issuers(db):
    me, peer = Identity.generate(), Identity.generate()
    lim = Limits(grants_per_peer=10)
    for i in range(40):
        assert gs.receive(db, make_grant(Identity.generate(), me.key, ["fs:read"], NOW + HOUR),
                          me.key, peer.key, NOW + i, lim)
        assert gs.receive(db, make_grant(Identity.generate(), peer.key, ["fs:read"], NOW + HOUR),
                          me.key, peer.key, NOW + i, lim)
    assert db.execute("SELECT count(*) FROM grants WHERE via = ?",
                      (peer.key,)).fetchone()[0] == 10
    # another peer's grants are untouched by this one's flood
    other = Identity.generate()
    h = gs.receive(db, make_grant(other, me.key, ["fs:read"], NOW + HOUR), me.key, other.key,
                   NOW, lim)
    for _ in range(20):
        gs.receive(db, make_grant(Identity.generate(), me.key, ["fs:read"], NOW + HOUR),
                   me.key, peer.key, NOW + 100, lim)
    assert db.execute("SELECT 1 FROM grants WHERE hash = ?", (h,)).fetchone()


def test_prune_drops_expired_received_grants_but_keeps_issued(db):
    me, peer = Identity.generate(), Identity.generate()
    assert gs.receive(db, make_grant(peer, me.key, ["fs:read"], NOW + 10_000), me.key,
                      peer.key, NOW, Limits())
    gs.put(db, make_grant(me, peer.key, ["fs:read"], NOW + 10_000), "issued", NOW)
    assert gs.prune(db, NOW + 9_999) == 0
    assert gs.prune(db, NOW + 10_000) == 1
    assert [r[0] for r in db.execute("SELECT kind FROM grants")] == ["issued"]


# -- what we present ------------------------------------------------------------------

def _stuff_held(db, me: Identity, n: int, size: int, aud: str | None = None) -> set[str]:
    """Held grants written straight to the table, as a store from before the caps has them;
    their issuers (each a different key)."""
    keys = set()
    for i in range(n):
        iss = Identity.generate()
        g = _padded(iss, me.key, size, **({"aud": aud} if aud else {}))
        gs.put(db, g, "held", NOW + i, via=iss.key)
        keys.add(iss.key)
    return keys


def test_presentation_is_bounded_whatever_is_stored(db):
    me, q = Identity.generate(), Identity.generate()
    lim = Limits()
    trust = _stuff_held(db, me, 3, 600_000)          # oversized, from before the fix
    trust |= _stuff_held(db, me, 300, 1000)           # many small ones
    out = gs.to_present(db, q.key, NOW, lim, trust)
    assert out
    sizes = [len(compact_json(g).encode()) for g in out]
    assert len(out) <= lim.present_count
    assert sum(sizes) <= lim.present_bytes
    assert max(sizes) <= lim.grant_bytes


def test_presentation_prefers_grants_meant_for_the_peer(db):
    me, q, other = Identity.generate(), Identity.generate(), Identity.generate()
    lim = Limits(present_count=4)
    trust = _stuff_held(db, me, 10, 10)              # for anyone, newer
    _stuff_held(db, me, 3, 10, aud=other.key)        # for someone else
    for i in range(2):
        iss = Identity.generate()
        gs.put(db, make_grant(iss, me.key, ["fs:read"], NOW + HOUR, aud=q.key), "held",
               NOW - 1000 + i, via=iss.key)
    own = make_grant(q, me.key, ["fs:read"], NOW + HOUR)
    gs.put(db, own, "held", NOW + 10_000, via=q.key)
    out = gs.to_present(db, q.key, NOW, lim, trust | {q.key})
    assert len(out) == 4
    assert [g.get("aud") for g in out[:2]] == [q.key, q.key]
    assert all(g.get("aud") in (None, q.key) for g in out)
    assert own not in out  # q issued it: no use showing it back


def test_grants_a_peer_handed_us_about_itself_are_shown_to_no_one_else(db):
    """16 self-issued grants from mallory (about 64 KB) are not put in our auth to every peer."""
    me, mallory, y, t = (Identity.generate() for _ in range(4))
    lim = Limits()
    for i in range(8):  # 16 in all: what the store keeps from one sender (grants_per_peer)
        gs.receive(db, _padded(mallory, me.key, 3500, seq=i), me.key, mallory.key, NOW + i,
                   lim)
        gs.receive(db, make_grant(mallory, me.key, ["exec"], NOW + HOUR, aud=y.key), me.key,
                   mallory.key, NOW + i, lim)
    assert db.execute("SELECT count(*) FROM grants WHERE kind = 'held'").fetchone()[0] == 16
    out = gs.to_present(db, y.key, NOW, lim)
    assert [g["iss"] for g in out] == [mallory.key]  # one, addressed to y: not 16
    assert gs.to_present(db, Identity.generate().key, NOW, lim) == []
    # A grant for anyone from a key we trust, or one the user connected to, is shown.
    gs.receive(db, make_grant(t, me.key, ["fs:read"], NOW + HOUR), me.key, t.key, NOW, lim)
    assert [g["iss"] for g in gs.to_present(db, y.key, NOW, lim, {t.key})] == [
        mallory.key, t.key]
    db.execute("INSERT INTO addresses (peer, addr, source, added_at) VALUES"
               " (?, 'tcp:10.0.0.9:7', 'connect', 1)", (t.key,))
    assert t.key in [g["iss"] for g in gs.to_present(db, y.key, NOW, lim)]


# -- what we honor --------------------------------------------------------------------

def test_honored_rules(db):
    me, trusted, intro, p = (Identity.generate() for _ in range(4))
    lim = Limits()
    gs.put(db, make_grant(me, p.key, ["fs:read"], NOW + HOUR), "issued", NOW)
    assert gs.honored_caps(db, p.key, me.key, set(), NOW) == {"fs:read"}
    gs.put(db, make_grant(trusted, p.key, ["exec"], NOW + HOUR), "presented", NOW, via=p.key)
    assert gs.honored_caps(db, p.key, me.key, set(), NOW) == {"fs:read"}
    assert gs.honored_caps(db, p.key, me.key, {trusted.key}, NOW) == {"fs:read", "exec"}
    # an introducer passes on at most its own caps, minus introduce
    gs.put(db, make_grant(me, intro.key, ["introduce", "fs:write"], NOW + HOUR), "issued", NOW)
    gs.receive(db, make_grant(intro, p.key, ["fs:write", "admin"], NOW + HOUR, aud=me.key),
               me.key, p.key, NOW, lim)
    gs.receive(db, make_grant(intro, p.key, ["exec"], NOW + HOUR, aud=trusted.key),
               me.key, p.key, NOW, lim)
    assert gs.honored_caps(db, p.key, me.key, set(), NOW) == {"fs:read", "fs:write"}
    # expired grants count for nothing
    assert gs.honored_caps(db, p.key, me.key, {trusted.key}, NOW + 2 * HOUR) == set()
    # an introduction with introduce alone admits with no caps
    q = Identity.generate()
    gs.put(db, make_grant(me, intro.key, ["introduce"], NOW + HOUR), "issued", NOW)
    gs.receive(db, make_grant(intro, q.key, ["introduce"], NOW + HOUR), me.key, q.key, NOW, lim)
    assert gs.honored(db, q.key, me.key, set(), NOW) != []


@pytest.mark.parametrize("n", [3000])
def test_honored_costs_a_few_queries_whatever_the_peer_stored(db, n):
    """Thousands of self-signed and made-up-issuer grants about one peer (written
    straight to the table, as a store from before the caps may hold them) cost
    the same few queries as none: the check never loops over the peer's grants."""
    me, p, intro = Identity.generate(), Identity.generate(), Identity.generate()
    gs.put(db, make_grant(me, p.key, ["introduce", "fs:read"], NOW + HOUR), "issued", NOW)
    gs.put(db, make_grant(me, intro.key, ["introduce", "fs:read"], NOW + HOUR), "issued", NOW)
    gs.put(db, make_grant(intro, p.key, ["fs:read"], NOW + HOUR), "presented", NOW, via=p.key)
    for i in range(n):
        iss = p if i % 2 else Identity.generate()
        gs.put(db, make_grant(iss, p.key, ["exec", f"c{i}"], NOW + HOUR), "presented", NOW,
               via=p.key)
    db.commit()
    statements = _count_statements(db)
    t0 = time.perf_counter()
    caps = gs.honored_caps(db, p.key, me.key, set(), NOW)
    took = time.perf_counter() - t0
    db.set_trace_callback(None)
    assert caps == {"introduce", "fs:read"}
    assert len(statements) <= 6, statements[:10]
    assert took < 0.5, f"honored() took {took:.2f}s over {n} grants"


def test_presentation_stays_under_half_a_line_whatever_the_config(db):
    me, q = Identity.generate(), Identity.generate()
    lim = Limits(grant_bytes=400_000, present_bytes=10_000_000, present_count=100)
    trust = _stuff_held(db, me, 4, 300_000)
    out = gs.to_present(db, q.key, NOW, lim, trust)
    assert 0 < sum(len(compact_json(g).encode()) for g in out) <= 512 * 1024
