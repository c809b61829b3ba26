"""Framing and error handling after the handshake, against a real daemon.

Covers wire-facts section 1 and conformance scenarios bad-frame, too-large,
unknown-type, unknown-field and err-nonclosing: which lines close the
connection (after the right err), which are ignored, and the exact 1 MiB
line limit.
"""

from __future__ import annotations

import json

import pytest
from nodes import wait_for
from rawpeer import RawPeer, dumps

from awp.localapi.client import ApiFailure

MAX_LINE = 1_048_576


def stored(node, ident: str) -> list[dict]:
    return [r for r in node.inbound() if r["id"] == ident]


def expect_err_then_close(p: RawPeer, code: str, timeout: float = 5) -> dict:
    err = p.recv_until(lambda x: x["t"] == "err", timeout)
    assert err["code"] == code, err
    assert p.closed(6), f"daemon did not close after err {code}"
    # Nothing but pings may have come before the err.
    assert all(x["t"] == "ping" for x in p.skipped), p.skipped
    return err


def padded_msg(p: RawPeer, size: int, th: str = "thr_big00001") -> dict:
    """A valid msg whose compact JSON is exactly ``size`` bytes."""
    line = p.envelope({"t": "msg", "th": th, "parts": [{"k": "text", "text": ""}]})
    base = len(dumps(line))
    line["parts"][0]["text"] = "x" * (size - base)
    assert len(dumps(line)) == size
    return line


def test_not_json_is_bad_frame_then_close(peer):
    peer.send_line(b"this is not json")
    expect_err_then_close(peer, "bad_frame")


@pytest.mark.parametrize("line", [
    b"[1,2,3]",
    b'{"id":"01J00000000000000000000000"}',  # no t
    b'{"t":"msg","id":"01J00000000000000000000000","th":"thr_x"',  # truncated
    b'{"t":42}',
    b'{"t":"ping","id":7}',  # wrong-typed envelope field
    b'{"t":"msg","id":"01J00000000000000000000000","parts":[]}',  # msg without th
    b'{"t":"msg","th":"thr_x","parts":[]}',  # msg without id
    b'{"t":"state","id":"01J00000000000000000000000","th":"thr_x"}',  # state without state
    b'{"t":"msg","id":"01J00000000000000000000000","th":"thr_x","parts":"x"}',
])
def test_malformed_lines_are_bad_frame(peer, line):
    peer.send_line(line)
    expect_err_then_close(peer, "bad_frame")


def test_line_over_1mib_is_refused_before_the_newline(node, peer):
    line = padded_msg(peer, MAX_LINE + 1)
    # 1,048,577 bytes and no newline: the err must come without one.
    peer.send_raw(dumps(line))
    err = peer.recv_until(lambda x: x["t"] == "err", 10)
    assert err["code"] == "too_large", err
    try:
        peer.send_raw(b"\n")
    except OSError:
        pass  # the daemon may be gone already; the err was what mattered
    assert peer.closed(6), "daemon did not close after too_large"
    assert not stored(node, line["id"])


def test_line_of_exactly_1mib_is_accepted(node, peer):
    line = padded_msg(peer, MAX_LINE)
    peer.send_raw(dumps(line) + b"\n")
    ack = peer.expect("ack", 15, re=line["id"])
    assert ack["th"] == line["th"]
    recs = stored(node, line["id"])
    assert len(recs) == 1
    assert recs[0]["line"]["parts"][0]["text"] == line["parts"][0]["text"]
    # The connection stays up.
    peer.ping()


def test_unknown_type_is_ignored(peer):
    peer.send_line({"t": "conformance-future", "x": {"nested": [1, 2]}})
    ping = peer.send_line({"t": "ping"})
    pong = peer.recv_until(lambda x: x["t"] == "pong", 5)
    assert pong["re"] == ping["id"]
    # An err unsupported is allowed, but nothing that closes.
    errs = [x for x in peer.skipped if x["t"] == "err"]
    assert all(e["code"] == "unsupported" for e in errs), errs
    sent = peer.msg("after the unknown type")
    peer.expect("ack", 5, re=sent["id"])


def test_err_is_not_answered_and_does_not_close(peer):
    peer.send_line({"t": "err", "code": "unsupported", "detail": "just testing"})
    ping = peer.send_line({"t": "ping"})
    pong = peer.recv_until(lambda x: x["t"] == "pong", 5)
    assert pong["re"] == ping["id"]
    assert not [x for x in peer.skipped if x["t"] == "err"], peer.skipped
    # Still nothing answered a moment later either.
    ping2 = peer.send_line({"t": "ping"})
    peer.recv_until(lambda x: x["t"] == "pong" and x["re"] == ping2["id"], 5)
    assert not [x for x in peer.skipped if x["t"] == "err"], peer.skipped


@pytest.mark.parametrize("code", ["forbidden", "blob_refused", "internal", "made-up-code"])
def test_non_closing_errs_keep_the_connection(peer, code):
    peer.send_line({"t": "err", "code": code, "re": "01J00000000000000000000000"})
    sent = peer.msg(f"after err {code}")
    peer.expect("ack", 5, re=sent["id"])
    assert not [x for x in peer.skipped if x["t"] == "err"], peer.skipped


def test_closing_err_from_peer_closes_without_reply(peer):
    peer.send_line({"t": "err", "code": "bad_frame", "detail": "you sent garbage"})
    assert peer.closed(6), "daemon kept the connection after a closing err"
    assert not [x for x in peer.skipped if x["t"] == "err"], peer.skipped


def test_unknown_fields_are_kept(node, peer):
    line = peer.envelope({
        "t": "msg", "th": "thr_unknown1", "future_top": {"a": [1, "two"]},
        "parts": [
            {"k": "text", "text": "with extras", "future_part": True, "lang": "en"},
            {"k": "code", "text": "print(1)", "lang": "python", "x-extra": 5},
            {"k": "data", "mime": "application/json", "data": {"n": 1}, "unknown": None},
            {"k": "future-kind", "payload": "kept"},
        ],
    })
    peer.send_line(line)
    ack = peer.expect("ack", 5, re=line["id"])
    assert ack["th"] == "thr_unknown1"
    (rec,) = stored(node, line["id"])
    assert rec["line"]["future_top"] == {"a": [1, "two"]}
    assert rec["line"]["parts"] == line["parts"]
    assert rec["line"] == line


def test_html_characters_and_unicode_survive(node, peer):
    text = "a <b> & c \u2028 \u00e9 \U0001f600 \"q\" \\ \t"
    line = peer.msg(text, th="thr_chars001")
    peer.expect("ack", 5, re=line["id"])
    (rec,) = stored(node, line["id"])
    assert rec["line"]["parts"][0]["text"] == text


def test_unterminated_final_line_is_not_a_message(node, peer):
    line = peer.envelope({"t": "msg", "th": "thr_cut00001",
                          "parts": [{"k": "text", "text": "never finished"}]})
    ok = peer.msg("finished", th="thr_cut00001")
    peer.expect("ack", 5, re=ok["id"])
    peer.send_raw(dumps(line))  # no newline...
    peer.half_close()  # ...then EOF: a dropped connection, not a message
    assert peer.closed(8)
    wait_for(lambda: node.peer_state(peer.key) == "offline", 8, "the daemon to drop us")
    assert stored(node, ok["id"])
    assert not stored(node, line["id"])


def test_daemon_lines_are_compact_and_schema_valid(peer):
    """Every line the daemon sends here is compact JSON within the limits."""
    sent = peer.msg("check the reply lines")
    peer.expect("ack", 5, re=sent["id"])
    peer.ping()
    for raw in peer.received:
        assert len(raw) <= MAX_LINE
        obj = json.loads(raw)
        assert isinstance(obj, dict) and isinstance(obj["t"], str)
        assert dumps(obj) == raw, raw  # no whitespace, no escaping of <>& or non-ASCII
        if obj["t"] == "ack":
            assert obj["th"] and obj["re"]
        if obj["t"] == "pong":
            assert obj["re"]


def test_line_over_1mib_during_handshake_is_too_large(node):
    with RawPeer(node.address) as p:
        p.read_hello()
        p.send_raw(b'{"t":"hello","pad":"' + b"x" * MAX_LINE)  # no newline
        err = p.recv_line(10)
        assert err is not None and err["t"] == "err" and err["code"] == "too_large", err
        assert p.closed(6)


def test_ack_for_unknown_id_is_ignored(peer):
    peer.send_line({"t": "ack", "th": "thr_nothing1", "re": "01J00000000000000000000000"})
    peer.send_line({"t": "ack", "th": "thr_nothing1"})  # no re at all
    peer.ping()
    assert not [x for x in peer.skipped if x["t"] == "err"], peer.skipped


def test_leading_and_inner_whitespace(node, peer):
    """A line whose first non-blank char is '{' is an object; JSON whitespace
    inside a line is fine."""
    line = peer.envelope({"t": "msg", "th": "thr_space001",
                          "parts": [{"k": "text", "text": "spaced"}]})
    peer.send_raw(b"  " + json.dumps(line, indent=1).replace("\n", " ").encode() + b"\n")
    peer.expect("ack", 5, re=line["id"])
    assert stored(node, line["id"])


def _send_oversized(node, key: str) -> None:
    """Ask the daemon to send a msg whose line cannot fit in 1 MiB.  Refusing
    the request is fine; queuing a line no conforming peer accepts is not."""
    try:
        node.send(key, "y" * (MAX_LINE + 10_000))
    except ApiFailure:
        pass


def test_daemon_never_sends_a_line_over_1mib(node, peer):
    _send_oversized(node, peer.key)
    small = node.send(peer.key, "small one after the big one")
    line = peer.recv_raw_line(5)
    assert line is not None
    size = len(line)
    assert size <= MAX_LINE, f"the daemon sent a {size}-byte line"
    assert json.loads(line)["id"] == small["id"]


def test_oversized_message_does_not_block_later_ones(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    _send_oversized(a, b.key)
    small = a.send(b.key, "small one after the big one")
    wait_for(lambda: small["id"] in [r["id"] for r in b.inbound()], 10,
             "a later message to get through")
