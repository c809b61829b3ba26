"""The owner's ask guard: each granted claimant's asks decided once, fresh, and nobody
else's asks can push them out (issue 40.3)."""

from __future__ import annotations

from awp.board.asks import REPLAYED, STALE, AskGuard

NOW = 1_790_000_000_000


def _guard(**kw) -> AskGuard:
    return AskGuard(**{"window_ms": 300_000, "reorder_ms": 5_000, "per_claimant": 64,
                       "claimants": 16, **kw})


def test_an_ask_is_decided_once_and_only_within_the_window():
    g = _guard()
    assert g.admit("w", "s1", NOW, NOW) == ""
    assert g.admit("w", "s1", NOW, NOW + 10) == REPLAYED
    assert g.admit("w", "s2", NOW - 300_001, NOW) == STALE
    assert g.admit("w", "s3", NOW + 300_001, NOW) == STALE


def test_asks_may_arrive_a_little_out_of_order_but_not_from_long_before():
    g = _guard()
    assert g.admit("w", "b", NOW + 1_000, NOW) == ""
    assert g.admit("w", "a", NOW, NOW) == ""  # another path, 1 s behind: still decided
    assert g.admit("w", "late", NOW + 1_000 - 5_000, NOW) == REPLAYED
    # a replay of an ask long since decided is refused even once its signature is dropped
    assert g.admit("w", "c", NOW + 60_000, NOW + 60_000) == ""
    assert g.admit("w", "b", NOW + 1_000, NOW + 60_000) == REPLAYED


def test_strangers_and_other_claimants_never_evict_a_claimants_asks():
    """The attack: 4,200 asks by fresh keys, then the worker's own claim ask replayed."""
    g = _guard(claimants=4096)
    assert g.admit("worker", "claim", NOW, NOW) == ""
    for i in range(4200):  # the node admits only granted claimants; here, any would do
        g.admit(f"k{i}", f"s{i}", NOW + 1, NOW + 1)
    assert g.admit("worker", "claim", NOW, NOW + 2) == REPLAYED
    # the worker's own flood narrows only its own span
    g2 = _guard(per_claimant=8)
    assert g2.admit("v", "first", NOW, NOW) == ""
    for i in range(20):
        assert g2.admit("w", f"w{i}", NOW + i, NOW) == ""
    assert g2.admit("w", "w0", NOW, NOW) == REPLAYED
    assert g2.admit("v", "first", NOW, NOW) == REPLAYED


def test_a_forgotten_claimant_cannot_be_replayed():
    g = _guard(claimants=2)
    assert g.admit("a", "sa", NOW, NOW) == ""
    assert g.admit("b", "sb", NOW + 1, NOW) == ""
    assert g.admit("c", "sc", NOW + 2, NOW) == ""  # a, idle longest, is forgotten
    assert len(g) == 2
    assert g.admit("a", "sa", NOW, NOW + 3) == REPLAYED
    assert g.admit("a", "new", NOW + 10, NOW + 10) == ""
