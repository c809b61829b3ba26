"""Hostile values a parser must survive: huge numbers, short blobs, deep JSON.

Each test drives a real daemon with a raw peer and then checks the two
things a hostile line must never cost: the daemon itself, and (unless the
line earned a ``bad_frame``) the connection it arrived on.
"""

from __future__ import annotations

import base64
import json
import sqlite3

import pytest
from nodes import wait_for
from rawpeer import RawPeer

from awp.wire.keys import Identity
from awp.wire.presence import sign_doc
from awp.wire.timefmt import format_ts, now_ms


def _presence(node) -> dict[str, tuple[int, int]]:
    with sqlite3.connect(node.home + "/awp.db") as con:
        return {o: (seq, hops) for o, seq, hops in
                con.execute("SELECT origin, seq, hops FROM presence")}


def _doc(ident: Identity, seq: int, **extra) -> str:
    return sign_doc(ident, {"origin": ident.key, "name": "raw", "seq": seq,
                            "ts": format_ts(now_ms()), "peers": [], "threads": [], **extra})


def _presence_line(p: RawPeer, hops: object, raw_doc: str, more: list[tuple[object, str]]) -> bytes:
    tail = ",".join(f'{{"hops":{json.dumps(h)},"doc":{r}}}' for h, r in more)
    return (f'{{"t":"presence","id":"{p.ids.next()}","ts":"{format_ts(now_ms())}",'
            f'"hops":{json.dumps(hops)},"doc":{raw_doc},"more":[{tail}]}}').encode()


def _still_serves(node) -> None:
    """A fresh honest peer gets through: handshake, a msg acked and stored."""
    with RawPeer(node.address) as q:
        assert q.handshake()["t"] == "resume"
        q.resume()
        sent = q.msg("still here", th="thr_honest01")
        q.expect("ack", 20, re=sent["id"])
    assert any(r["id"] == sent["id"] for r in node.inbound())


def test_presence_batch_with_out_of_range_numbers_keeps_the_good_entries(node):
    """hops or seq past SQLite's signed 64 bits drop that entry only."""
    with RawPeer(node.address) as p:
        assert p.handshake(caps=["chat", "presence", "presence-batch"])["t"] == "resume"
        p.resume()
        good1, good2 = Identity.generate(), Identity.generate()
        big_hops, big_seq, flag = Identity.generate(), Identity.generate(), Identity.generate()
        p.send_line(_presence_line(p, 0, _doc(good1, 5), [
            (2 ** 63, _doc(big_hops, 6)),
            (1, _doc(big_seq, 2 ** 63)),
            (True, _doc(flag, 7)),
            (1, _doc(good2, 9)),
        ]))
        assert p.ping(20)["t"] == "pong"
        got = wait_for(lambda: (lambda s: s if good1.key in s and good2.key in s else None)(
            _presence(node)), 10, "good entries stored")
        assert got[good1.key] == (5, 0) and got[good2.key] == (9, 1)
        assert not {big_hops.key, big_seq.key, flag.key} & set(got)
        assert not p.closed(0.5)
    _still_serves(node)


def _chunk(p: RawPeer, ref: str, n: int, data: bytes, last: bool) -> dict:
    return p.send_line({"t": "chunk", "th": "thr_blob0001", "ref": ref, "n": n, "last": last,
                        "data": base64.b64encode(data).decode()})


def _blob_msg(p: RawPeer, ref: str, size: object) -> dict:
    return p.send_line({"t": "msg", "th": "thr_blob0001", "parts": [
        {"k": "text", "text": "a file"},
        {"k": "blob", "ref": ref, "name": "short.bin", "mime": "application/octet-stream",
         "size": size}]})


def _blob_row(node, ref: str) -> dict | None:
    return next((b for b in node.api("GET", "/v1/blobs") if b["ref"] == ref), None)


def _no_files(node, ref: str) -> None:
    import os

    for dirpath, dirs, names in os.walk(os.path.join(node.home, "blobs")):
        assert not [x for x in names + dirs if ref in x], (dirpath, names, dirs)


@pytest.mark.parametrize("msg_first", [False, True], ids=["chunks-first", "msg-first"])
def test_blob_shorter_than_declared_is_refused_not_complete(node, peer, msg_first):
    ref = "b_short" + ("m" if msg_first else "c")
    if msg_first:
        sent = _blob_msg(peer, ref, 1000)
        peer.expect("ack", 10, re=sent["id"])
    _chunk(peer, ref, 0, b"0123456789", last=True)
    if not msg_first:
        sent = _blob_msg(peer, ref, 1000)
    err = peer.expect("err", 10, code="blob_refused")
    assert err["ref"] == ref and "1000" in err.get("detail", ""), err
    if not msg_first:  # the msg that showed the blob short is still acked
        assert err.get("re") == sent["id"], err
        assert any(x.get("t") == "ack" and x.get("re") == sent["id"] for x in peer.skipped)
    row = wait_for(lambda: _blob_row(node, ref), 10, "blob row")
    assert row["status"] == "refused", row
    _no_files(node, ref)
    assert peer.ping()["t"] == "pong"
    # the message itself is delivered, without the file
    assert any(r["id"] == sent["id"] for r in node.inbound())


def test_blob_size_out_of_range_is_refused_and_the_msg_acked(node, peer):
    for i, size in enumerate((2 ** 63, 2 ** 70, -(2 ** 70), -5)):
        ref = f"b_range{i}"
        sent = _blob_msg(peer, ref, size)
        peer.expect("ack", 10, re=sent["id"])
        err = peer.expect("err", 10, code="blob_refused", ref=ref)
        assert err.get("re") == sent["id"], err
        assert (_blob_row(node, ref) or {}).get("status") == "refused"
    assert peer.ping()["t"] == "pong"


def _nest(depth: int) -> object:
    """A JSON value ``depth`` containers deep (lists and objects alternating)."""
    v: object = 1
    for i in range(depth):
        v = [v] if i % 2 else {"x": v}
    return v


def _deep_text(depth: int) -> str:
    # built as text: json.dumps itself would hit the recursion limit
    opens = "".join('{"x":' if i % 2 == 0 else "[" for i in reversed(range(depth)))
    closes = "".join("}" if i % 2 == 0 else "]" for i in range(depth))
    return opens + "1" + closes


# Around 970 levels a line still decodes but the code after it (canonical
# JSON, the local API's encoder) runs out of stack: sweep that window.
DEPTHS = [40, 200, *range(940, 1000, 3), 1010, 50_000]


@pytest.mark.parametrize("kind", ["msg", "presence", "grant", "unknown", "resume"])
def test_deeply_nested_json_never_kills_the_connection_task(node, kind):
    """Each line is either handled (ping answered after it) or a clean bad_frame."""
    ident = Identity.generate()
    for depth in DEPTHS:
        deep = _deep_text(depth)
        with RawPeer(node.address, ident) as p:
            assert p.handshake(caps=["chat", "presence"])["t"] == "resume"
            p.resume()
            env = f'"id":"{p.ids.next()}","ts":"{format_ts(now_ms())}"'
            if kind == "msg":
                line = ('{"t":"msg",' + env + ',"th":"thr_deep0001","parts":[{"k":"data",'
                        '"mime":"application/json","data":' + deep + "}]}")
            elif kind == "presence":
                doc = _doc(ident, depth)
                line = ('{"t":"presence",' + env + ',"hops":0,"doc":' + doc[:-1]
                        + ',"deep":' + deep + "}}")
            elif kind == "grant":
                line = ('{"t":"grant",' + env + ',"grant":{"iss":"' + ident.key + '","sub":"'
                        + ident.key + '","caps":["exec"],"exp":"2099-01-01T00:00:00Z",'
                        '"sig":"x","deep":' + deep + "}}")
            elif kind == "resume":
                line = '{"t":"resume",' + env + ',"seen":' + deep + "}"
            else:
                line = '{"t":"future-thing",' + env + ',"v":' + deep + "}"
            p.send_line(line.encode())
            sent = p.send_line({"t": "ping"})
            got = p.recv_until(lambda x, sid=sent["id"]: x.get("t") == "err" or (
                x.get("t") == "pong" and x.get("re") == sid), 20)
            if got["t"] == "err":
                assert got["code"] == "bad_frame", (depth, got)
                assert p.closed(10), f"no close after bad_frame at depth {depth}"
            else:
                assert not p.closed(0.3), f"connection dropped at depth {depth}"
    # what was stored can still be listed (a deep msg used to poison the inbox)
    node.api("POST", "/v1/inbox", {"mark": False})
    with open(node.log_path, errors="replace") as f:
        log = f.read()
    assert "RecursionError" not in log and "internal error" not in log, node.tail_log()
    _still_serves(node)


def test_presence_line_with_two_docs_stores_the_verified_one(node, peer):
    """The parsed line keeps the last "doc"; the stored bytes used to be the first."""
    ident = Identity.generate()
    signed = _doc(ident, 4)
    forged = signed.replace('"name":"raw"', '"name":"evil"')
    peer.send_line((f'{{"t":"presence","id":"{peer.ids.next()}","ts":"{format_ts(now_ms())}",'
                    f'"hops":0,"doc":{forged},"doc":{signed}}}').encode())
    assert peer.ping()["t"] == "pong"
    wait_for(lambda: ident.key in _presence(node), 10, "doc stored")
    with sqlite3.connect(node.home + "/awp.db") as con:
        (raw,) = con.execute("SELECT doc FROM presence WHERE origin = ?", (ident.key,)).fetchone()
    assert raw == signed and "evil" not in raw


def test_lone_surrogate_escapes_do_not_poison_the_inbox(node, peer):
    """Found by the live fuzzer: a msg with a \\ud800 escape was stored as sent,
    and every later /v1/inbox call failed to encode it."""
    raw = (f'{{"t":"msg","id":"{peer.ids.next()}","ts":"{format_ts(now_ms())}",'
           '"th":"thr_sur00001","parts":[{"k":"text","text":"a\\ud800b \\ud83d\\ude00"}],'
           '"x\\udfff":1}').encode()
    peer.send_line(raw)
    ack = peer.expect("ack", 10)
    rows = [r for r in node.inbound() if r["id"] == ack["re"]]
    assert rows, "stored"
    line = rows[0]["line"] if "line" in rows[0] else rows[0]
    text = json.dumps(line, ensure_ascii=False)
    assert "a\ufffdb \U0001F600" in text and "x\ufffd" in text
    node.api("POST", "/v1/inbox", {"mark": False})


@pytest.mark.parametrize("t", ["mirror", "private"])
def test_an_acked_type_without_id_is_bad_frame(node, t):
    """Found by the live fuzzer: a mirror or private line without id was
    stored, then acking it (by id) killed the connection task."""
    with RawPeer(node.address) as p:
        assert p.handshake(caps=["chat", "mirror"])["t"] == "resume"
        p.resume()
        p.send_line(('{"t":"' + t + '","th":"thr_noid0001"}').encode())
        err = p.recv_until(lambda x: x.get("t") == "err", 10)
        assert err["code"] == "bad_frame", err
        assert p.closed(10)
    with open(node.log_path, errors="replace") as f:
        assert "Traceback" not in f.read(), node.tail_log()
    _still_serves(node)

