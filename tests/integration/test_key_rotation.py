"""Key rotation between two real daemons (issue 35): one peer before and after.

Each test drives the rotating side through ``POST /v1/key/rotate`` (what
``awp key rotate`` calls) and reads the other side's peers, threads and
inbox through its local API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nodes import ROOT, Node, wait_for


def awp(node: Node, *args: str) -> subprocess.CompletedProcess:
    """``awp ARGS --home HOME``, as a user runs it."""
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "awp", *args, "--home", node.home],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def ok(node: Node, *args: str) -> str:
    r = awp(node, *args)
    assert r.returncode == 0, f"awp {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _peer(node: Node, key: str) -> dict | None:
    return next((p for p in node.api("GET", "/v1/peers") if p["key"] == key), None)


def _rotate(node: Node) -> dict:
    """Rotate ``node`` and wait until its daemon runs under the new key (same process)."""
    pid = node.proc.pid
    res = node.api("POST", "/v1/key/rotate", {})
    assert res["old"] == node.key and res["new"] != node.key
    node.wait_ready(timeout=30)
    assert node.key == res["new"] and node.status["pid"] == pid
    return res


def _texts(node: Node, peer: str) -> list[str]:
    return [p["text"] for r in node.inbound(peer=peer) if r["t"] == "msg"
            for p in r["line"]["parts"] if p.get("k") == "text"]


def test_rotation_reaches_an_online_peer_and_keeps_one_peer(make_node) -> None:
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    sent = b.send(a.key, "hello a", wait_ack=10)
    th = sent["th"]
    a.api("POST", "/v1/alias", {"alias": "alice-side", "peer": b.key})
    b.api("POST", "/v1/alias", {"alias": "ay", "peer": a.key})
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["fs:read"], "ttl": 3600})
    a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["exec"], "ttl": 3600})
    old = a.key
    res = _rotate(a)
    new = res["new"]

    row = wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"] == [old] and p,
                   20, "b to know a under its new key")
    assert _peer(b, old) is None  # one peer, not two
    assert row["aliases"] == ["ay"] and row["name"] == "a"
    # Grants re-issued on both sides: b's to a names the new key, a's to b is signed by it.
    issued_b = [g for g in b.api("GET", "/v1/grants") if g["kind"] == "issued"]
    assert [(g["iss"], g["sub"], g["caps"]) for g in issued_b] == [(b.key, new, ["fs:read"])]
    assert row["granted"] == ["fs:read"]
    issued_a = [g for g in a.api("GET", "/v1/grants") if g["kind"] == "issued"]
    assert [(g["iss"], g["sub"], g["caps"]) for g in issued_a] == [(new, b.key, ["exec"])]
    wait_for(lambda: any(g["kind"] == "held" and g["iss"] == new
                         for g in b.api("GET", "/v1/grants")), 20, "a's re-issued grant at b")
    assert wait_for(lambda: b.peer_state(new).startswith("connected"), 20, "b connected to new a")
    # The thread goes on under the new key, both ways.
    b.send("ay", "after rotation", th=th, wait_ack=10)
    a.send(b.key, "from the new key", th=th, wait_ack=10)
    assert wait_for(lambda: "from the new key" in _texts(b, new), 10, "reply under new key")
    assert _texts(b, new) == ["from the new key"]
    threads = b.api("GET", "/v1/threads", peer=new)
    assert [t["th"] for t in threads] == [th]
    # The home keeps no old seed: only the new one and the next.
    with open(os.path.join(a.home, "identity.json")) as f:
        ident = json.load(f)
    assert ident["key"] == new and ident["rotations"][-1]["old"] == old
    assert old not in json.dumps({k: v for k, v in ident.items() if k != "rotations"})


def _seed(node: Node) -> bytes:
    from awp.wire.b64 import b64decode_any

    with open(os.path.join(node.home, "identity.json")) as f:
        return b64decode_any(json.load(f)["seed"])


def test_old_key_refused_at_hello_with_the_new_key_named(make_node) -> None:
    from rawpeer import RawPeer

    from awp.wire.keys import Identity

    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    old_identity = Identity(_seed(a))  # what a thief of the old key would hold
    new = _rotate(a)["new"]
    wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"], 20, "b took the rotation")
    with RawPeer(b.address, old_identity) as p:
        err = p.handshake()
    assert err["t"] == "err" and err["code"] == "auth"
    assert f"rotated to {new}" in err["detail"]


def test_rotation_while_the_peer_is_offline_lines_exactly_once(make_node) -> None:
    """Lines queued on both sides across the rotation arrive once each, under the new key."""
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    th = b.send(a.key, "before", wait_ack=10)["th"]
    old = a.key
    a.kill()
    for i in range(3):  # queued for the old key while a is down
        b.send(old, f"b queued {i}", th=th)
    b.kill()
    a.start()
    new = _rotate(a)["new"]  # b is offline
    for i in range(2):
        a.send(b.key, f"a queued {i}", th=th)
    b.start()
    wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"] == [old], 30,
             "b to take the rotation when a reaches it")
    want_a = ["before", "b queued 0", "b queued 1", "b queued 2"]
    wait_for(lambda: _texts(a, b.key) == want_a, 30, "b's queued lines at a")
    wait_for(lambda: _texts(b, new) == ["a queued 0", "a queued 1"], 30, "a's lines at b")
    wait_for(lambda: (p := _peer(b, new)) and p["queued"] == 0, 20, "b's outbox drained")
    assert _peer(b, old) is None
    assert wait_for(lambda: not a.api("GET", "/v1/key")["owed_to"], 20, "a owes b nothing")
    # Nothing doubled after another round of reconnects.
    a.stop()
    a.start()
    wait_for(lambda: b.peer_state(new).startswith("connected"), 30, "reconnected")
    assert _texts(a, b.key) == want_a and _texts(b, new) == ["a queued 0", "a queued 1"]


def _hs_with_rotation(address: str, identity, rotation: dict | None) -> tuple[object, dict]:
    """A raw peer's handshake whose auth carries ``rotation``; (the peer, the daemon's answer)."""
    from rawpeer import RawPeer

    from awp.wire.keys import auth_transcript

    p = RawPeer(address, identity)
    p.send_hello(caps=["chat", "rotate"])
    hello = p.read_hello()
    auth = {"t": "auth", "sig": identity.sign(auth_transcript(p.my_hello, p.peer_hello_raw))}
    if rotation is not None:
        auth["rotation"] = rotation
    p.send_line(auth)
    line = p.recv_line()
    if line and line.get("t") == "auth":
        assert hello["caps"].count("rotate") == 1
        line = p.recv_line()
    return p, line


def test_forged_replayed_uncommitted_and_conflicting_records_refused(make_node) -> None:
    from awp.wire import rotation as R
    from awp.wire.keys import Identity

    b = make_node("b").start()
    k1, k2, k3, k4, k5 = (Identity(bytes([i]) * 32) for i in range(1, 6))
    # k1 meets b, announcing its commitment to k2.
    p, line = _hs_with_rotation(b.address, k1, {"next": R.commitment(k2.key)})
    assert line["t"] == "resume"
    p.close()
    # Forged: k2's half signed by another key.
    forged = R.make(k1, k2, 1, k3.key, 1796212800000)
    forged["sig_new"] = k4.sign(R.signed_bytes(forged))
    p, line = _hs_with_rotation(b.address, k2, {"chain": [forged]})
    assert line["t"] == "err" and line["code"] == "auth" and "(forged)" in line["detail"]
    p.close()
    assert _peer(b, k2.key) is None and _peer(b, k1.key) is not None
    # Uncommitted: a thief of k1 alone rotates it to a key of its own.
    stolen = R.make(k1, k4, 1, k5.key, 1796212800000)
    p, line = _hs_with_rotation(b.address, k4, {"chain": [stolen]})
    assert line["t"] == "err" and "(uncommitted)" in line["detail"], line
    p.close()
    assert _peer(b, k4.key) is None and _peer(b, k1.key) is not None
    # The real rotation k1 -> k2, committing to k3.
    good = R.make(k1, k2, 1, k3.key, 1796212800000)
    p, line = _hs_with_rotation(b.address, k2, {"chain": [good], "next": R.commitment(k3.key)})
    assert line["t"] == "resume", line
    p.close()
    assert _peer(b, k2.key)["rotated_from"] == [k1.key] and _peer(b, k1.key) is None
    # Replayed older seq: a k2 -> k3 record numbered as if it came first.
    older = R.make(k2, k3, 1, k4.key, 1796212800001)
    p, line = _hs_with_rotation(b.address, k3, {"chain": [older]})
    assert line["t"] == "err" and "(old_seq)" in line["detail"], line
    p.close()
    # Replaying the good record itself changes nothing (a duplicate), and k2 stays.
    p, line = _hs_with_rotation(b.address, k2, {"chain": [good]})
    assert line["t"] == "resume"
    p.close()
    # A second rotation of k1, to k5: refused, and kept as evidence.
    second = R.make(k1, k5, 1, k4.key, 1796212800002)
    p, line = _hs_with_rotation(b.address, k5, {"chain": [second]})
    assert line["t"] == "err" and "(conflict)" in line["detail"], line
    p.close()
    assert _peer(b, k5.key) is None
    status = b.api("GET", "/v1/status")["rotation"]
    assert status["conflicts"] == 1 and status["refused"] >= 4
    conflicts = b.api("GET", "/v1/rotation/conflicts")
    assert conflicts[k2.key]["pairs"][0]["b"]["new"] == k5.key
    # And the old key is refused at hello.
    p, line = _hs_with_rotation(b.address, k1, None)
    assert line["t"] == "err" and f"rotated to {k2.key}" in line["detail"]
    p.close()


def test_kill_9_of_either_side_mid_rotation(make_node) -> None:
    """The rotating side killed right after the record is written, the other killed right
    after it stored the record: nothing lost or doubled, both end on the new key."""
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    th = b.send(a.key, "b 0", wait_ack=10)["th"]
    a.send(b.key, "a 0", th=th, wait_ack=10)
    old = a.key
    # a: the rotation's answer is out, then kill -9 before the daemon's own restart ends.
    res = a.api("POST", "/v1/key/rotate", {})
    a.kill()
    new = res["new"]
    for i in range(1, 4):
        b.send(old, f"b {i}", th=th)  # queued for the old key
    a.start()
    assert a.key == new  # the rename of identity.json was the commit
    a.send(b.key, "a 1", th=th)
    # b: killed as soon as the record is committed there (before or after its resume).
    wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"] == [old], 30, "b took it")
    b.kill()
    a.send(b.key, "a 2", th=th)
    b.start()
    want_a = [f"b {i}" for i in range(4)]
    wait_for(lambda: _texts(a, b.key) == want_a, 30, "b's lines at a, once each")
    wait_for(lambda: _texts(b, new) == ["a 0", "a 1", "a 2"], 30, "a's lines at b, once each")
    assert _peer(b, old) is None and _peer(b, new)["rotated_from"] == [old]
    assert wait_for(lambda: not a.api("GET", "/v1/key")["owed_to"], 20, "a owes b nothing")
    assert b.api("GET", "/v1/status")["rotation"]["conflicts"] == 0


def test_cli_rotate_verify_and_loud_warning(make_node) -> None:
    """From the CLI: one safety number on both sides, the mark kept across a valid
    rotation, and a loud warning when another key takes a verified peer's name."""
    from rawpeer import RawPeer

    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    va = json.loads(ok(a, "verify", b.key, "--json"))
    vb = json.loads(ok(b, "verify", "a", "--json"))
    assert va["safety"] == vb["safety"] and len(va["safety"].split()) == 12
    assert vb["short"] == " ".join(vb["safety"].split()[:4])
    text = ok(b, "verify", "a", "--mark")
    assert vb["short"] in text and "marked as verified" in text
    assert "a: verified" in ok(b, "peers")
    old = a.key
    out = ok(a, "key", "rotate")
    new = json.loads(ok(a, "key", "show", "--json"))["key"]
    assert new != old and f"rotated {old} -> {new}" in out
    wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"], 30, "b took the rotation")
    peers = awp(b, "peers")
    assert f"a: rotated from {old}" in peers.stdout
    assert f"a: verified as {old}, carried over by a valid rotation" in peers.stdout
    assert "WARNING" not in peers.stderr
    # The safety number changed with the key; both sides still agree.
    assert json.loads(ok(a, "verify", b.key, "--json"))["safety"] == \
        json.loads(ok(b, "verify", "a", "--json"))["safety"] != vb["safety"]
    # Another key calling itself "a", with no record from the verified one.
    with RawPeer(b.address) as impostor:
        impostor.name = "a"
        assert impostor.handshake()["t"] == "resume"
    peers = awp(b, "peers")
    assert "WARNING" in peers.stderr and "WITHOUT A VALID ROTATION" in peers.stderr
    assert "also calls itself 'a'" in peers.stderr


def test_peer_that_only_dials_follows_the_rotation(make_node) -> None:
    """b cannot be dialed (it advertises no address): it redials a's old key, is answered
    by the new one, and goes on because a's records lead from the key it dialed."""
    a = make_node("a").start()
    b = make_node("b", extra=["--advertise", "none"]).start()
    b.connect(a)
    th = b.send(a.key, "b 0", wait_ack=10)["th"]
    assert not [x for x in _peer(a, b.key)["addresses"]]  # a cannot reach b by itself
    old = a.key
    b.kill()
    new = _rotate(a)["new"]
    a.send(b.key, "a 0", th=th)  # queued: a has no way to b
    b.start()
    b.send(old, "b 1", th=th)  # b redials the key it knows
    wait_for(lambda: (p := _peer(b, new)) and p["rotated_from"] == [old], 30, "b followed")
    wait_for(lambda: _texts(a, b.key) == ["b 0", "b 1"], 30, "b's lines at a")
    wait_for(lambda: _texts(b, new) == ["a 0"], 30, "a's line at b")
    assert b.peer_state(new).startswith("connected (out)")


def test_unattended_rotation_every(make_node) -> None:
    """`awp key rotate --every 2s`: the daemon rotates by itself, twice, and the peer
    follows the chain (the second record must meet the first one's commitment)."""
    a = make_node("a").start()
    b = make_node("b").start()
    b.connect(a)
    first = a.key
    assert "rotating every 2s" in ok(a, "key", "rotate", "--every", "2s")
    def keys_at_b():
        p = next((p for p in b.api("GET", "/v1/peers") if p["name"] == "a"), None)
        return p and len(p["rotated_from"]) >= 2 and p
    row = wait_for(keys_at_b, 30, "two unattended rotations taken at b")
    assert row["rotated_from"][-1] == first
    seq = a.api("GET", "/v1/key")["seq"]
    assert seq >= 2 and a.api("GET", "/v1/key")["schedule"]["every"] == 2.0
    assert "unattended rotation is off" in ok(a, "key", "rotate", "--every", "off")
    assert b.api("GET", "/v1/status")["rotation"]["refused"] == 0


def test_rotate_every_in_config_sets_the_schedule_at_start(make_node) -> None:
    """config.json ``rotate_every`` decides the schedule at each start, over one set by
    hand meanwhile; a value under an hour is refused with the reason."""
    a = make_node("a")
    os.makedirs(a.home, mode=0o700, exist_ok=True)
    conf = os.path.join(a.home, "config.json")
    with open(conf, "w") as f:
        json.dump({"rotate_every": "30d"}, f)
    a.start()
    plan = a.api("GET", "/v1/key")["schedule"]
    assert plan["every"] == 30 * 86400.0 and plan["due"] > 0
    ok(a, "key", "rotate", "--every", "off")
    assert a.api("GET", "/v1/key")["schedule"]["every"] == 0
    a.kill()
    a.start()
    assert a.api("GET", "/v1/key")["schedule"]["every"] == 30 * 86400.0
    a.kill()
    with open(conf, "w") as f:
        json.dump({"rotate_every": "5m"}, f)
    a.start(wait=False)
    assert a.proc.wait(30) != 0
    with open(a.log_path, errors="replace") as f:
        assert "rotate_every must be 0 (off) or at least 1h" in f.read()


def test_a_host_two_hops_away_learns_the_rotation_from_presence(make_node) -> None:
    """a -- b -- c, presence on: c never met a, yet after a rotates c takes the record
    from a's signed presence document and refuses the old key at hello."""
    from rawpeer import RawPeer

    from awp.wire.keys import Identity

    a, b, c = (make_node(x, extra=["--presence"]).start() for x in "abc")
    b.connect(a)
    c.connect(b)
    old_identity = Identity(_seed(a))
    new = _rotate(a)["new"]
    wait_for(lambda: c.api("GET", "/v1/status")["rotation"]["peers_rotated"] >= 1, 30,
             "c to take a's record from presence")
    assert _peer(c, new) is None and _peer(c, old_identity.key) is None  # never met
    with RawPeer(c.address, old_identity) as p:
        err = p.handshake()
    assert err["t"] == "err" and err["code"] == "auth"
    assert f"rotated to {new}" in err["detail"]
