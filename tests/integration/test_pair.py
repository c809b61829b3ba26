"""``awp pair`` between two real daemons: live byte streams on a pair side connection."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from nodes import ROOT, wait_for
from rawpeer import RawPeer

MiB = 1024 * 1024


def raw_side(address: str, identity=None) -> RawPeer:
    """A side connection named ``pair``, past its handshake, as a hostile peer opens it."""
    p = RawPeer(address, identity)
    p.send_hello(side="pair")
    p.read_hello()
    p.send_auth()
    auth = p.recv_line()
    assert auth and auth["t"] == "auth" and p.verify_peer_auth(auth)
    return p


def cli(node, *args: str, **kw) -> subprocess.Popen:
    """``awp --home HOME ARGS`` started as a user starts it."""
    env = {k: v for k, v in os.environ.items() if k != "AWP_HOME"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "awp", "--home", node.home, *args],
                            env=env, cwd=ROOT, **kw)


def text_of(path: str) -> str:
    with open(path) as f:
        return f.read()


def finish(p: subprocess.Popen, data: bytes | None = None, timeout: float = 60):
    out, err = p.communicate(data, timeout=timeout)
    return p.returncode, out, err.decode(errors="replace")


def script(root: str, name: str, body: str) -> list[str]:
    path = os.path.join(root, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return [sys.executable, path]


def pair_of(make_node, **limits):
    a = make_node("a").start()
    b = (make_node("b").with_limits(**limits) if limits else make_node("b")).start()
    a.connect(b)
    return a, b


def waiting(node, n: int = 1) -> None:
    wait_for(lambda: len(node.api("GET", "/v1/pair")["waiting"]) >= n, 20, "an acceptor waits")


def records(node) -> list[dict]:
    recs = node.api("POST", "/v1/read", {"n": 1000, "mark": False})["records"]
    return [r for r in recs if r["t"] == "msg" and any(
        p.get("mime") == "application/vnd.awp.pair+json" for p in r["line"]["parts"])]


def test_echo_round_trip_with_cat_is_recorded_on_both_sides(make_node, tmp_home_root):
    a, b = pair_of(make_node)
    acceptor = cli(b, "pair", "--accept", "--from", a.key, "--", "cat")
    waiting(b)
    out_path = os.path.join(tmp_home_root, "echoed")
    talker = script(tmp_home_root, "talker.py", f"""
        import hashlib, os, sys, threading
        data = os.urandom(3 * 1024 * 1024 + 17)
        def write():  # while we read: the stream holds only a few MiB
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            os.close(1)  # a half-close: cat at the peer sees its stdin end
        threading.Thread(target=write).start()
        back = sys.stdin.buffer.read()
        open({out_path!r}, "w").write(hashlib.sha256(data).hexdigest() + " "
                                     + hashlib.sha256(back).hexdigest() + " " + str(len(back)))
        sys.exit(7)
    """)
    rc, _, err = finish(cli(a, "pair", b.key, "--thread", "thr_pairtest", "--", *talker))
    assert rc == 7, err  # the command's own status
    sent, back, n = text_of(out_path).split()
    assert sent == back and int(n) == 3 * MiB + 17
    assert finish(acceptor)[0] == 0
    for node in (a, b):
        rec = wait_for(lambda node=node: records(node), 20, "the stream recorded")[-1]
        assert rec["th"] == "thr_pairtest"
        data = [p for p in rec["line"]["parts"] if p["k"] == "data"][0]["data"]
        assert data["sent"] == data["received"] == 3 * MiB + 17 and data["ms"] >= 0
        assert "error" not in data
    shown = finish(cli(a, "read", "thr_pairtest"))[1].decode()
    assert "pair stream with b" in shown and "3.0 MiB sent" in shown


def test_stdin_stdout_form_and_eof_both_ways(make_node, tmp_home_root):
    a, b = pair_of(make_node)
    # The peer's command answers only once its stdin ended, then exits: our
    # stdin's end must reach it, and its exit must end our stdout.
    counter = script(tmp_home_root, "count.py", """
        import sys
        d = sys.stdin.buffer.read()
        sys.stdout.write(f"got {len(d)} bytes")
    """)
    acceptor = cli(b, "pair", "--accept", "--", *counter)
    waiting(b)
    rc, out, err = finish(cli(a, "pair", b.key, stdin=subprocess.PIPE), b"x" * 100_000)
    assert rc == 0, err
    assert out == b"got 100000 bytes"
    assert finish(acceptor)[0] == 0
    # the other way round: our command exits at once; the peer's sees its stdin end
    marker = os.path.join(tmp_home_root, "saw-eof")
    reader = script(tmp_home_root, "eof.py", f"""
        import sys
        sys.stdin.buffer.read()
        open({marker!r}, "w").write("eof")
    """)
    acceptor = cli(b, "pair", "--accept", "--", *reader)
    waiting(b)
    rc, _, err = finish(cli(a, "pair", b.key, "--", "true"))
    assert rc == 0, err
    assert finish(acceptor)[0] == 0 and text_of(marker) == "eof"


def test_refused_without_grant_or_acceptor(make_node):
    a, b = pair_of(make_node)
    rc, _, err = finish(cli(a, "pair", b.key, "--", "cat"))
    assert rc != 0
    assert "b refused the pair stream: no one here accepts pair streams from you" in err
    assert not b.api("GET", "/v1/pair")["held"]


def test_granted_request_is_held_announced_and_taken_later(make_node):
    a, b = pair_of(make_node)
    assert finish(cli(b, "grant", a.key, "pair"))[0] == 0
    asker = cli(a, "pair", b.key, "--thread", "thr_heldpair", stdin=subprocess.PIPE)
    held = wait_for(lambda: b.api("GET", "/v1/pair")["held"], 20, "request held")
    assert held[0]["peer"] == a.key and held[0]["th"] == "thr_heldpair"
    inbox = finish(cli(b, "tail", "--once"))[1].decode()
    assert "a wants to pair on thread thr_heldpair" in inbox
    assert f"awp pair --accept --from {a.key}" in inbox
    acceptor = cli(b, "pair", "--accept", "--from", a.key, "--", "cat")
    rc, out, err = finish(asker, b"held and then taken")
    assert rc == 0 and out == b"held and then taken", err
    assert finish(acceptor)[0] == 0


def test_held_request_times_out_with_a_clear_error(make_node):
    a, b = pair_of(make_node, pair_wait="1s")
    assert finish(cli(b, "grant", a.key, "pair"))[0] == 0
    rc, _, err = finish(cli(a, "pair", b.key, "--", "cat"))
    assert rc != 0 and "no one accepted the pair stream within 1 s" in err


def test_peer_without_the_cap_is_told_clearly(make_node):
    a = make_node("a").start()
    with RawPeer(a.address, name="oldpeer") as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        wait_for(lambda: p.key in {x["key"] for x in a.api("GET", "/v1/peers")}, 10, "peer up")
        rc, _, err = finish(cli(a, "pair", p.key, "--", "cat"))
    assert rc != 0 and "oldpeer does not support pair streams" in err


def test_back_pressure_holds_at_most_8_mib_and_loses_nothing(make_node, tmp_home_root):
    a, b = pair_of(make_node)
    total = 96 * MiB
    fifo = os.path.join(tmp_home_root, "go")
    os.mkfifo(fifo)
    got = os.path.join(tmp_home_root, "got")
    wrote = os.path.join(tmp_home_root, "wrote")
    reader = script(tmp_home_root, "slow.py", f"""
        import hashlib, os, sys
        h, n = hashlib.sha256(), 0
        inp = sys.stdin.buffer
        def note():
            with open({got!r} + ".t", "w") as f:
                f.write(str(n))
            os.replace({got!r} + ".t", {got!r})
        while n < 1024 * 1024:  # read 1 MiB, then stop reading until told
            b = inp.read1(65536)
            h.update(b); n += len(b)
        note()
        open({fifo!r}).read()
        while b := inp.read1(65536):
            h.update(b); n += len(b)
        note()
        open({got!r} + ".sha", "w").write(h.hexdigest())
    """)
    writer = script(tmp_home_root, "fast.py", f"""
        import hashlib, os, sys
        h, n, out = hashlib.sha256(), 0, sys.stdout.buffer
        block = os.urandom(65536)
        while n < {total}:
            with open({wrote!r} + ".t", "w") as f:
                f.write(str(n))
            os.replace({wrote!r} + ".t", {wrote!r})
            out.write(block); out.flush()
            h.update(block); n += len(block)
            block = hashlib.sha256(block).digest() * 2048
        os.close(1)
        open({wrote!r} + ".sha", "w").write(h.hexdigest())
    """)
    acceptor = cli(b, "pair", "--accept", "--", *reader)
    waiting(b)
    sender = cli(a, "pair", b.key, "--", *writer)

    def count(path: str) -> int:
        try:
            return int(text_of(path) or 0)
        except (OSError, ValueError):
            return 0

    wait_for(lambda: count(got) >= MiB and count(wrote) > 2 * MiB, 30, "the reader paused")
    # While the reader is paused the writer is held back: it never gets more than
    # 8 MiB ahead of what the reader took, and cannot finish.
    worst = 0
    for _ in range(150):
        worst = max(worst, count(wrote) - count(got))
        assert worst <= 8 * MiB, f"{worst} bytes in flight"
        assert sender.poll() is None
        try:
            sender.wait(0.02)
        except subprocess.TimeoutExpired:
            pass
    assert count(wrote) < total
    with open(fifo, "w") as f:
        f.write("go")
    rc, _, err = finish(sender, timeout=120)
    assert rc == 0, err
    assert finish(acceptor, timeout=60)[0] == 0
    assert count(got) == total
    assert text_of(got + ".sha") == text_of(wrote + ".sha")


def test_killing_the_accepting_daemon_ends_the_initiator_with_an_error(make_node):
    a, b = pair_of(make_node)
    acceptor = cli(b, "pair", "--accept", "--", "cat")
    waiting(b)
    asker = cli(a, "pair", b.key, stdin=subprocess.PIPE)
    asker.stdin.write(b"ping\n")
    asker.stdin.flush()
    assert asker.stdout.readline() == b"ping\n"  # the stream runs
    b.kill()
    rc, _, err = finish(asker, timeout=30)
    assert rc != 0
    assert "the stream from b broke" in err, err
    acceptor.kill()
    acceptor.wait(10)
    rec = wait_for(lambda: records(a), 20, "the broken stream recorded")[-1]
    assert "broke" in [p for p in rec["line"]["parts"] if p["k"] == "data"][0]["data"]["error"]


def test_a_peer_opening_too_many_streams_is_refused(make_node):
    b = make_node("b").with_limits(pair_wait="20s").start()
    with RawPeer(b.address, name="greedy") as link:
        assert link.handshake()["t"] == "resume"
        link.resume()
        wait_for(lambda: link.key in {x["key"] for x in b.api("GET", "/v1/peers")}, 10, "up")
        b.api("POST", "/v1/grant", {"peer": link.key, "caps": ["pair"]})
        sides = []
        try:
            for i in range(2):  # limits.pair_per_peer: both held
                s = raw_side(b.address, link.identity)
                s.send_raw(b'{"t":"pair","id":"p%d"}\n' % i)
                sides.append(s)
            wait_for(lambda: len(b.api("GET", "/v1/pair")["held"]) == 2, 10, "two held")
            extra = raw_side(b.address, link.identity)
            sides.append(extra)
            extra.send_raw(b'{"t":"pair","id":"p2"}\n')
            err = extra.recv_line()
            assert err["t"] == "err" and err["code"] == "quota"
            assert "too many pair streams from you (2 open; limits.pair_per_peer is 2)" in (
                err["detail"])
            bad = raw_side(b.address)  # a first line that is no request
            sides.append(bad)
            bad.send_raw(b'{"t":"pair","id":"has spaces"}\n')
            assert bad.recv_line()["code"] == "bad_frame"
        finally:
            for s in sides:
                s.close()
    wait_for(lambda: b.api("GET", "/v1/pair") == {"waiting": [], "held": [], "streams": 0},
             30, "held requests dropped when their connections closed")



def test_keep_serves_one_command_per_stream_until_interrupted(make_node):
    import signal

    a, b = pair_of(make_node)
    acceptor = cli(b, "pair", "--accept", "--keep", "--", "cat")
    for text in (b"first stream", b"second stream"):
        waiting(b)
        rc, out, err = finish(cli(a, "pair", b.key, stdin=subprocess.PIPE), text)
        assert rc == 0 and out == text, err
    waiting(b)
    acceptor.send_signal(signal.SIGINT)
    assert finish(acceptor)[0] == 130
    wait_for(lambda: not b.api("GET", "/v1/pair")["waiting"], 20, "the acceptor withdrew")
    assert len(wait_for(lambda: len(records(a)) == 2 and records(a), 20, "two records")) == 2


def test_streams_in_all_are_bounded_across_keys(make_node):
    b = make_node("b").with_limits(pair_streams=1, pair_wait="20s").start()
    links, sides = [], []
    try:
        for name in ("one", "two"):
            link = RawPeer(b.address, name=name)
            links.append(link)
            assert link.handshake()["t"] == "resume"
            link.resume()
            wait_for(lambda k=link.key: k in {x["key"] for x in b.api("GET", "/v1/peers")},
                     10, "up")
            b.api("POST", "/v1/grant", {"peer": link.key, "caps": ["pair"]})
        first = raw_side(b.address, links[0].identity)
        sides.append(first)
        first.send_raw(b'{"t":"pair","id":"held"}\n')
        wait_for(lambda: b.api("GET", "/v1/pair")["held"], 10, "one held")
        other = raw_side(b.address, links[1].identity)
        sides.append(other)
        other.send_raw(b'{"t":"pair","id":"more"}\n')
        err = other.recv_line()
        assert err["code"] == "quota"
        assert "too many pair streams here (1 open; limits.pair_streams is 1)" in err["detail"]
    finally:
        for p in sides + links:
            p.close()
