"""The v0 handshake against a real daemon, driven line by line by a RawPeer.

Covers wire-facts sections 3 and 12 (scenarios handshake, version,
auth-bad-sig): who speaks first, what hello/auth/resume look like, every
refusal with its err code, the 30 s handshake deadline, and allowlist
admission.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from nodes import wait_for
from rawpeer import RawListener, RawPeer

from awp.localapi.client import ApiFailure
from awp.wire.ids import is_ulid
from awp.wire.keys import Identity, auth_transcript
from awp.wire.timefmt import parse_ts

KEY_RE = re.compile(r"ed25519:[A-Za-z0-9_-]{43}")
B64URL_43 = re.compile(r"[A-Za-z0-9_-]{43}")
SIG_RE = re.compile(r"[A-Za-z0-9_-]{86}")
TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def node(make_node):
    return make_node("d").start()


def assert_envelope(line: dict) -> None:
    assert is_ulid(line["id"]), line
    assert TS_RE.fullmatch(line["ts"]), line
    parse_ts(line["ts"])


def assert_refused(p: RawPeer, line: dict, code: str, *, re_id: str | None = None) -> None:
    assert line["t"] == "err", line
    assert line["code"] == code, line
    assert_envelope(line)
    if re_id is not None:
        assert line.get("re") == re_id, line
    assert p.closed(6), f"daemon did not close after err {code}"


def test_daemon_speaks_first_and_handshake_completes(node):
    with RawPeer(node.address) as p:
        # Nothing sent yet: the daemon's hello must come on its own.
        hello = p.read_hello(timeout=5)
        assert hello["t"] == "hello"
        assert "v" in hello and hello["v"] == 0 and type(hello["v"]) is int
        assert KEY_RE.fullmatch(hello["key"]), hello
        assert hello["key"] == node.key
        assert B64URL_43.fullmatch(hello["nonce"]), hello
        assert isinstance(hello["caps"], list) and all(isinstance(c, str) for c in hello["caps"])
        assert hello["name"] == "d"
        assert "about" in hello
        assert_envelope(hello)
        # The daemon's hello is one compact line: no whitespace between tokens,
        # and its exact bytes are what auth signs.
        assert b"\r" not in p.peer_hello_raw

        # Our hello, then our auth; the daemon's auth must verify over
        # "awp-auth-v0" 0 <its hello> 0 <our hello> (handshake() asserts it).
        resume = p.handshake()
        assert p.peer_auth is not None
        assert SIG_RE.fullmatch(p.peer_auth["sig"]), p.peer_auth
        assert_envelope(p.peer_auth)
        # The daemon's resume arrives without waiting for ours.
        assert resume["t"] == "resume", resume
        assert isinstance(resume["seen"], dict), resume
        assert resume["seen"] == {}  # a new peer: nothing seen yet
        assert_envelope(resume)

        # And the connection is live after we resume.
        p.resume()
        pong = p.ping()
        assert_envelope(pong)
    # The daemon knows the raw peer by key and name now.
    peers = {x["key"]: x for x in node.api("GET", "/v1/peers")}
    assert peers[p.key]["name"] == "rawpeer"


def test_hello_before_ours_even_if_we_wait(node):
    """The daemon does not wait for our hello: it arrives while we stay silent."""
    with RawPeer(node.address) as p:
        raw = p.recv_raw_line(timeout=5)
        assert raw is not None and raw.startswith(b'{"t":"hello"'), raw


def test_version_99_is_refused(node):
    with RawPeer(node.address) as p:
        p.read_hello()
        mine = p.send_hello(version=99)
        line = p.recv_line(5)
        # No auth for a hello we cannot speak: straight to err version.
        assert line is not None
        assert_refused(p, line, "version", re_id=mine["id"])


def test_auth_over_wrong_transcript_is_refused(node):
    with RawPeer(node.address) as p:
        line = p.handshake(bad_sig=True)
        assert p.peer_auth is not None  # the daemon signed its side first
        assert_refused(p, line, "auth")
    # No peer is admitted from a failed handshake.
    assert all(x["key"] != p.key for x in node.api("GET", "/v1/peers"))


def test_hello_with_daemons_own_key_is_reflection(node):
    with RawPeer(node.address) as p:
        p.read_hello()
        p.send_hello(key_override=node.key)
        line = p.recv_line(5)
        assert line is not None
        assert_refused(p, line, "auth")


def test_hello_with_unparseable_key_is_auth(node):
    with RawPeer(node.address) as p:
        p.read_hello()
        p.send_hello(key_override="ed25519:not-a-key")
        line = p.recv_line(5)
        assert line is not None
        assert_refused(p, line, "auth")


def test_non_hello_first_line_is_bad_frame(node):
    with RawPeer(node.address) as p:
        p.read_hello()
        p.msg("too early")
        line = p.recv_line(5)
        assert line is not None
        assert_refused(p, line, "bad_frame")


def test_non_auth_line_where_auth_expected(node):
    with RawPeer(node.address) as p:
        p.send_hello()
        p.read_hello()
        theirs = p.recv_line(5)
        assert theirs is not None and theirs["t"] == "auth"
        assert p.verify_peer_auth(theirs)
        p.send_line({"t": "ping"})
        line = p.recv_line(5)
        assert line is not None
        assert_refused(p, line, "auth")


def test_err_during_handshake_is_not_answered(node):
    with RawPeer(node.address) as p:
        p.send_hello()
        p.read_hello()
        assert p.recv_line(5)["t"] == "auth"
        p.send_line({"t": "err", "code": "version", "detail": "we changed our mind"})
        assert p.closed(6), "daemon kept the connection after our err"
        assert not [x for x in p.skipped if x["t"] == "err"], p.skipped


def test_auth_without_signature_is_refused(node):
    with RawPeer(node.address) as p:
        p.send_hello()
        p.read_hello()
        p.send_line({"t": "auth"})
        line = p.recv_until(lambda x: x["t"] != "auth", 5)
        assert_refused(p, line, "auth")


def test_unknown_hello_and_auth_fields_are_ignored(node):
    with RawPeer(node.address) as p:
        p.send_hello(caps=["future-cap", "chat"], future={"x": [1, 2]}, shares=[], v2_hint=True)
        p.read_hello()
        sig = p.identity.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        p.send_line({"t": "auth", "sig": sig, "grants": [], "future": "ignored"})
        theirs = p.recv_line(5)
        assert theirs is not None and theirs["t"] == "auth" and p.verify_peer_auth(theirs)
        resume = p.recv_line(5)
        assert resume is not None and resume["t"] == "resume", resume
        p.send_line({"t": "resume", "seen": {}, "future": 1})
        p.ping()


def test_aborted_handshakes_do_not_disturb_the_daemon(node, make_node):
    # Close right after connecting, after our hello, and mid-line.
    RawPeer(node.address).close()
    with RawPeer(node.address) as p:
        p.send_hello()
    with RawPeer(node.address) as p:
        p.read_hello()
        p.send_raw(b'{"t":"hello","v":0,')
    # A full handshake still works, and so does the daemon's own traffic.
    with RawPeer(node.address) as p:
        assert p.handshake()["t"] == "resume"
        p.resume()
        p.ping()
    other = make_node("o").start()
    other.connect(node)
    other.send(node.key, "still fine")
    wait_for(lambda: node.inbound(), 10, "a message after aborted handshakes")


def test_silent_peer_is_cut_off_after_handshake_deadline(node):
    """Takes ~30 s: the handshake deadline is the timer under test."""
    with RawPeer(node.address) as p:
        start = time.monotonic()
        p.read_hello()
        # Still open well before the deadline...
        assert not p.closed(20), "closed long before the 30 s handshake deadline"
        # ...and closed shortly after it.
        assert p.closed(20), "still open well after the 30 s handshake deadline"
        elapsed = time.monotonic() - start
        assert 28 <= elapsed <= 36, elapsed
        assert not [x for x in p.skipped if x.get("t") not in ("err",)], p.skipped


# -- admission -------------------------------------------------------------------------


def test_allowlist_refuses_unknown_peer_with_notice(make_node):
    node = make_node("gate", extra=["--accept", "allowlist"]).start()
    with RawPeer(node.address, name="stranger") as p:
        line = p.handshake()
        # Auth verified both ways, then the admission refusal instead of resume.
        assert p.peer_auth is not None
        assert line["t"] == "err" and line["code"] == "auth", line
        assert line.get("detail"), line
        assert_refused(p, line, "auth")

    def refused_notice():
        recs = node.api("POST", "/v1/inbox", {"mark": False})["records"]
        return [r for r in recs if r["dir"] == "notice" and r["peer"] == p.key]

    notes = wait_for(refused_notice, 5, "a refusal notice")
    assert len(notes) == 1, notes
    assert notes[0]["line"]["kind"] == "refused"
    assert p.key in notes[0]["line"]["text"]
    assert "stranger" in notes[0]["line"]["text"]


def test_allowlist_admits_listed_key(make_node):
    ident = Identity.generate()
    node = make_node("gate2", extra=["--accept", "allowlist", "--allow", ident.key]).start()
    with RawPeer(node.address, ident) as p:
        line = p.handshake()
        assert line["t"] == "resume", line
        p.resume()
        sent = p.msg("let in")
        ack = p.expect("ack", 5, re=sent["id"])
        assert ack["th"] == sent["th"]
    recs = node.api("POST", "/v1/inbox", {"mark": False})["records"]
    assert not [r for r in recs if r["dir"] == "notice"], recs


def test_allowlist_still_lets_us_dial_out(make_node):
    """Admission applies to inbound connections only; our own dial is admitted."""
    gate = make_node("gate3", extra=["--accept", "allowlist"]).start()
    other = make_node("open3").start()
    gate.connect(other)
    gate.send(other.key, "from the gated side")
    wait_for(lambda: other.inbound(), 10, "delivery from an allowlist node")
    other.send(gate.key, "reply over the same connection")
    wait_for(lambda: gate.inbound(), 10, "reply to the allowlist node")


def test_allowlist_admits_a_key_we_dialed_ourselves(make_node):
    """Docs, admission: under allowlist, "keys you dialed yourself" get in."""
    gate = make_node("gate4", extra=["--accept", "allowlist"]).start()
    with RawListener() as lst:
        out: dict = {}
        t = threading.Thread(target=lambda: out.update(
            res=gate.api("POST", "/v1/connect", {"target": lst.address, "timeout": 10})))
        t.start()
        with lst.accept(5) as back:
            assert back.handshake()["t"] == "resume"
            back.resume()
            t.join(10)
            assert out["res"]["key"] == lst.key
        wait_for(lambda: gate.peer_state(lst.key) != "connected (out)", 5, "gate to see us go")
        # Now the key gate dialed itself connects in.
        with RawPeer(gate.address, lst.identity) as p:
            line = p.handshake()
            assert line["t"] == "resume", line
            p.resume()
            p.ping()
    notes = [r for r in gate.api("POST", "/v1/inbox", {"mark": False})["records"]
             if r["dir"] == "notice"]
    assert not notes, notes


def test_allowlist_node_accepts_dial_back_from_a_peer_it_dialed(make_node):
    gate = make_node("gate5", extra=["--accept", "allowlist"]).start()
    other = make_node("open5").start()
    gate.connect(other)  # other learns gate's address from gate's hello
    gate.kill()
    wait_for(lambda: other.peer_state(gate.key) != "connected (in)", 5, "other to notice")
    queued = other.send(gate.key, "dial back to the allowlist node")
    gate.start()

    def delivered():
        refused = [r["line"]["text"] for r in gate.api("POST", "/v1/inbox", {"mark": False})
                   ["records"] if r["dir"] == "notice"]
        assert not refused, f"gate refused the peer it dialed itself: {refused}"
        return [r["id"] for r in gate.inbound()] == [queued["id"]]

    wait_for(delivered, 10, "dial-back admitted by the allowlist node")


# -- unix sockets ----------------------------------------------------------------------


def test_handshake_over_unix_socket(make_node):
    node = make_node("ux", unix=True).start()
    assert node.address.startswith("unix:")
    with RawPeer(node.address) as p:
        hello = p.read_hello(5)
        assert hello["key"] == node.key
        resume = p.handshake()
        assert resume["t"] == "resume" and isinstance(resume["seen"], dict)
        p.resume()
        sent = p.msg("over unix")
        ack = p.expect("ack", 5, re=sent["id"])
        assert ack["th"] == sent["th"]
    assert [r["id"] for r in node.inbound()] == [sent["id"]]


def test_any_base64_variant_of_key_and_signature_is_accepted(node):
    """Keys and signatures may arrive padded and/or in the standard alphabet."""
    ident = Identity.generate()
    body = ident.key[len("ed25519:"):]
    std_padded = "ed25519:" + body.replace("-", "+").replace("_", "/") + "="
    with RawPeer(node.address, ident) as p:
        p.send_hello(key_override=std_padded)
        p.read_hello()
        sig = ident.sign(auth_transcript(p.my_hello, p.peer_hello_raw))
        p.send_line({"t": "auth", "sig": sig.replace("-", "+").replace("_", "/") + "=="})
        theirs = p.recv_line(5)
        assert theirs is not None and theirs["t"] == "auth" and p.verify_peer_auth(theirs)
        resume = p.recv_line(5)
        assert resume is not None and resume["t"] == "resume", resume
        p.resume()
        p.ping()
    # The daemon knows the peer by the canonical form of its key.
    keys = [x["key"] for x in node.api("GET", "/v1/peers")]
    assert ident.key in keys and std_padded not in keys


def test_dialer_refused_after_auth_reports_failure(node):
    """A dialer counts a connection as established only after a non-err line:
    an err auth after a valid auth (admission refused) fails the connect."""
    with RawListener() as lst:
        outcome: dict = {}

        def dial() -> None:
            try:
                outcome["ok"] = node.api("POST", "/v1/connect",
                                         {"target": lst.address, "timeout": 10})
            except ApiFailure as e:
                outcome["err"] = e

        t = threading.Thread(target=dial)
        t.start()
        with lst.accept(5) as back:
            hello = back.read_hello()
            assert hello["key"] == node.key
            assert "addr" in hello and hello["addr"] == node.address  # dial-back hint
            theirs = back.handshake()
            assert theirs["t"] == "resume"  # the dialer resumes without waiting too
            back.send_line({"t": "err", "code": "auth", "detail": "not on the allowlist"})
            back.half_close()
            assert back.closed(6)
        t.join(15)
        assert "err" in outcome, outcome
        assert "not on the allowlist" in str(outcome["err"]), outcome
        assert node.peer_state(lst.key) != "connected (out)"
