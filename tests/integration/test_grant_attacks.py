"""A hostile peer with one authenticated key against our grant handling.

Grant poisoning: grants it issues to us must not make our own auth line so
big that other peers refuse it, not even after a restart.  Grant flooding:
thousands of grants about itself must not stall the store or the local API.
"""

from __future__ import annotations

import time

from nodes import wait_for
from rawpeer import RawPeer

from awp.serve.requests import EXEC_MIME
from awp.wire.canonical import canonical_bytes
from awp.wire.grants import make_grant
from awp.wire.keys import Identity, auth_transcript
from awp.wire.timefmt import format_ts_seconds, now_ms


def _padded_grant(iss: Identity, sub: str, pad: int) -> dict:
    """A valid grant from ``iss`` to ``sub`` with an unknown field of ``pad`` bytes."""
    g = {"iss": iss.key, "sub": sub, "caps": ["fs:read"],
         "exp": format_ts_seconds(now_ms() + 3_600_000), "nonce": f"n{pad}", "pad": "x" * pad}
    g["sig"] = iss.sign(canonical_bytes(g))
    return g


def _auth_size_seen_by_a_fresh_peer(node) -> int:
    with RawPeer(node.address) as p:
        assert p.handshake()["t"] == "resume"
        return len(p.received[1])  # the daemon's hello, then its auth


def test_poisoned_grants_do_not_break_our_handshakes_even_after_restart(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    attacker = Identity.generate()
    with RawPeer(a.address, attacker) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        for i in range(2):
            p.send_line({"t": "grant", "grant": _padded_grant(attacker, a.key, 600_000 + i)})
        sent = p.msg("after the grants")
        p.expect("ack", 20, re=sent["id"])  # stored in line order, so the grants were seen
    assert a.connect(b)["key"] == b.key
    assert _auth_size_seen_by_a_fresh_peer(a) < 80 * 1024
    a.stop()
    a.start()
    b.stop()
    b.start()
    assert a.connect(b)["key"] == b.key
    assert _auth_size_seen_by_a_fresh_peer(a) < 80 * 1024


def test_grant_flood_from_one_key_does_not_stall_the_store_or_the_api(make_node):
    a = make_node("a").start()
    attacker = Identity.generate()
    exp = now_ms() + 3_600_000
    flood = []
    for i in range(3000):
        iss = attacker if i % 2 else Identity.generate()
        flood.append(make_grant(iss, attacker.key, ["exec", f"x{i}"], exp))
    with RawPeer(a.address, attacker) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        for g in flood:
            p.send_line({"t": "grant", "grant": g})
        sent = p.msg("after the flood")
        p.expect("ack", 60, re=sent["id"])
        t0 = time.monotonic()
        peers = a.api("GET", "/v1/peers")
        caps = a.api("GET", "/v1/caps", peer=attacker.key)
        took = time.monotonic() - t0
        assert attacker.key in [x["key"] for x in peers] and caps["caps"] == []
        assert took < 8, f"the API took {took:.1f}s after a grant flood"
        t0 = time.monotonic()
        req = p.send_line({"t": "msg", "th": "thr_flood", "parts": [
            {"k": "data", "mime": EXEC_MIME, "data": {"argv": ["true"]}}]})
        err = p.expect("err", 30, re=req["id"])
        assert err["code"] == "forbidden" and time.monotonic() - t0 < 8
    kept = [g for g in a.api("GET", "/v1/grants") if g["kind"] == "presented"]
    assert len(kept) <= 64
    wait_for(lambda: a.api("GET", "/v1/status"), 5, "status answers")


def test_oversized_grants_stored_before_the_bounds_are_never_presented(make_node):
    """A store written by an older awp may already hold huge held grants: they
    stay out of our auth line after the upgrade, so handshakes keep working."""
    import sqlite3

    from awp.store import grants as gs

    a = make_node("a").start()
    b = make_node("b").start()
    a.stop()
    c = sqlite3.connect(f"{a.home}/awp.db")
    for i in range(3):
        iss = Identity.generate()
        gs.put(c, _padded_grant(iss, a.key, 500_000 + i), "held", now_ms(), via=iss.key)
    c.commit()
    c.close()
    a.start()
    assert a.connect(b)["key"] == b.key
    assert _auth_size_seen_by_a_fresh_peer(a) < 80 * 1024


def test_an_auth_full_of_grants_is_refused_at_once_under_allowlist(make_node):
    """Admission looks at no more grants than we would present (32), and the
    honored check does not grow with them: a refused key learns so at once."""
    a = make_node("a", extra=["--accept", "allowlist"]).start()
    attacker = Identity.generate()
    exp = now_ms() + 3_600_000
    grants = [make_grant(attacker if i % 2 else Identity.generate(), attacker.key,
                         ["exec", f"x{i}"], exp) for i in range(2400)]
    with RawPeer(a.address, attacker) as p:
        p.send_hello()
        p.read_hello()
        sig = attacker.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        t0 = time.monotonic()
        p.send_line({"t": "auth", "sig": sig, "grants": grants})
        err = p.expect("err", 30)
        took = time.monotonic() - t0
    assert err["code"] == "auth" and "allowlist" in (err.get("detail") or "")
    assert took < 8, f"refusing took {took:.1f}s"
    assert len([g for g in a.api("GET", "/v1/grants") if g["kind"] == "presented"]) <= 32
