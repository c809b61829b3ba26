"""The conformance runner's pure parts: line schema, scenario selection, reports."""

from __future__ import annotations

import base64
import json

import pytest

from awp.conform.runner import FAIL, PASS, SKIP, Report, Result, _finish, select_scenarios
from awp.conform.scenarios import SCENARIOS
from awp.conform.schema import check, check_grant, decode, shown
from awp.wire.b64 import b64url
from awp.wire.canonical import compact_json
from awp.wire.ids import IdGenerator
from awp.wire.keys import Identity
from awp.wire.timefmt import format_ts, now_ms

IDS = IdGenerator()
KEY = Identity.generate().key


def env(**fields) -> dict:
    return {"t": fields.pop("t"), "id": IDS.next(), "ts": format_ts(now_ms()), **fields}


def raw(obj: dict) -> bytes:
    return compact_json(obj).encode()


def grant() -> dict:
    return {"iss": KEY, "sub": KEY, "caps": ["fs:read"], "exp": "2030-01-01T00:00:00Z",
            "nonce": b64url(bytes(16)), "sig": b64url(bytes(64))}


GOOD = [
    env(t="hello", v=0, key=KEY, name="x", nonce=b64url(bytes(32)), caps=["chat"], about=""),
    env(t="hello", v=0, key=KEY, nonce=b64url(bytes(32)), caps=[], addr="tcp:1.2.3.4:5",
        shares=[KEY]),
    env(t="auth", sig=b64url(bytes(64))),
    env(t="auth", sig=b64url(bytes(64)), grants=[grant()]),
    env(t="resume", seen={}),
    env(t="resume", seen={"thr_a": IDS.next()}),
    env(t="resume"),
    env(t="ack", th="thr_a", re=IDS.next()),
    env(t="ack", th="", re=IDS.next()),
    env(t="ping"),
    env(t="pong", re=IDS.next()),
    env(t="msg", th="thr_a", parts=[]),
    env(t="msg", th="thr_a", subject="s", re=IDS.next(), parts=[
        {"k": "text", "text": "hi"}, {"k": "code", "lang": "py", "text": "x"},
        {"k": "data", "mime": "application/json", "data": None},
        {"k": "blob", "ref": "b_1", "name": "f", "mime": "text/plain", "size": 0},
        {"k": "future-kind", "anything": [1]}]),
    env(t="state", th="thr_a", state="working"),
    env(t="state", th="thr_a", state="any-other-word", note=""),
    env(t="chunk", th="thr_a", ref="b_1", n=0, last=True, data=base64.b64encode(b"ab").decode()),
    env(t="chunk", ref="b_1", n=3, last=False, data=""),
    env(t="err", code="unsupported"),
    env(t="err", code="blob_refused", ref="b_1", re=IDS.next(), detail="too big"),
    env(t="bye"),
    env(t="bye", reason="done", re=IDS.next()),
    env(t="grant", grant=grant()),
    env(t="grant", grant={**grant(), "aud": KEY, "x_future": 1}),
    env(t="introduce", th="thr_a", peer={"key": KEY, "name": "c", "address": "tcp:1.2.3.4:5"},
        grant=grant()),
    env(t="introduce", th="thr_a", peer={"key": KEY}),
    env(t="presence", hops=1, doc={"origin": KEY}),
    env(t="mirror", th="thr_a", line={}),
    env(t="private", th="thr_a"),
    env(t="conformance-future", whatever={"x": 1}),
    {**env(t="ping"), "ts": "2026-09-25T17:03:11Z"},
    {**env(t="ping"), "ts": "2026-09-25T17:03:11.123456789+02:00"},
]


@pytest.mark.parametrize("line", GOOD, ids=lambda x: x["t"])
def test_valid_lines_have_no_problems(line):
    obj, problems = decode(raw(line))
    assert obj == line
    assert problems == []


BAD = [
    (env(t="ping", id="01abc"), "id is not a 26-char uppercase ULID"),
    (env(t="ping", id=IDS.next().lower()), "id is not a 26-char uppercase ULID"),
    ({"t": "ping", "ts": format_ts(now_ms())}, "ping without 'id'"),
    ({"t": "ping", "id": IDS.next()}, "ping without 'ts'"),
    (env(t="ping", ts="yesterday"), "ping.ts is not an RFC 3339 timestamp"),
    (env(t="ping", re=5), "ping.re is not a string"),
    (env(t="hello", key=KEY, nonce=b64url(bytes(32)), caps=[]), "hello without 'v'"),
    (env(t="hello", v="0", key=KEY, nonce=b64url(bytes(32))), "hello.v is not an integer"),
    (env(t="hello", v=0, key="ed25519:short", nonce=b64url(bytes(32))), "hello.key is not"),
    (env(t="hello", v=0, key=KEY[8:], nonce=b64url(bytes(32))), "hello.key is not"),
    (env(t="hello", v=0, key=KEY, nonce=b64url(bytes(16))), "hello.nonce is not 43"),
    (env(t="hello", v=0, key=KEY, nonce=b64url(bytes(32)) + "="), "hello.nonce is not 43"),
    (env(t="hello", v=0, key=KEY, nonce=b64url(bytes(32)), caps="chat"), "hello.caps is not a list"),
    (env(t="auth", sig=b64url(bytes(63))), "auth.sig is not 86"),
    (env(t="auth", sig=base64.b64encode(bytes(64)).decode()), "auth.sig is not 86"),
    (env(t="auth"), "auth without 'sig'"),
    (env(t="auth", sig=b64url(bytes(64)), grants=[{"iss": KEY}]), "auth.grants[0] without 'sub'"),
    (env(t="ack", re=IDS.next()), "ack without 'th'"),
    (env(t="ack", th="thr_a"), "ack without 're'"),
    (env(t="ack", th="thr_a", re=""), "ack.re is empty"),
    (env(t="pong"), "pong without 're'"),
    (env(t="msg", parts=[]), "msg without 'th'"),
    (env(t="msg", th="thr_a"), "msg without 'parts'"),
    (env(t="msg", th="thr_a", parts={}), "msg.parts is not a list"),
    (env(t="msg", th="thr_a", parts=[{"text": "x"}]), "msg.parts[0] without a kind"),
    (env(t="msg", th="thr_a", parts=[{"k": "text"}]), "msg.parts[0] without 'text'"),
    (env(t="msg", th="thr_a", parts=[{"k": "blob", "ref": "b"}]), "needs an integer 'size'"),
    (env(t="state", th="thr_a"), "state without 'state'"),
    (env(t="chunk", ref="b", n=-1, last=True, data=""), "chunk.n is not a non-negative"),
    (env(t="chunk", ref="b", n=0, data=""), "chunk without a boolean 'last'"),
    (env(t="chunk", ref="b", n=0, last=True, data="YWI"), "chunk.data is not padded standard"),
    (env(t="chunk", ref="b", n=0, last=True, data="-_-_"), "chunk.data is not padded standard"),
    (env(t="err", code="oops"), "err.code 'oops' is not a known code"),
    (env(t="err"), "err without a 'code'"),
    (env(t="grant", grant="x"), "grant.grant is not an object"),
    (env(t="grant", grant={**grant(), "exp": "soon"}), "grant.grant.exp is not an RFC 3339"),
    (env(t="presence", doc={}), "presence without an integer 'hops'"),
    (env(t="mirror", line={}), "mirror without 'th'"),
    (env(t="introduce", th="thr_a", key=KEY, addr="tcp:1.2.3.4:5"),
     "introduce without a 'peer' object"),
    (env(t="introduce", th="thr_a", peer={"name": "c"}), "introduce.peer without 'key'"),
    (env(t="introduce", th="thr_a", peer={"key": "ed25519:short"}), "introduce.peer.key is not"),
    (env(t="introduce", th="thr_a", peer={"key": KEY, "address": 5}),
     "introduce.peer.address is not a string"),
]


@pytest.mark.parametrize("line, problem", BAD, ids=[p for _, p in BAD])
def test_invalid_lines_are_reported(line, problem):
    obj, problems = decode(raw(line))
    assert obj == line
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("data, problem", [
    (b"this is not json", "line is not JSON"),
    (b"[1,2]", "line is not a JSON object"),
    (b'"str"', "line is not a JSON object"),
    (b"\xff\xfe{}", "line is not UTF-8"),
    (b'{"t":"ping","n":NaN}', "line is not JSON"),
    (b"{" + b" " * 1_048_576 + b"}", "over the 1 MiB limit"),
])
def test_undecodable_lines(data, problem):
    obj, problems = decode(data)
    assert obj is None
    assert problem in problems[0]


def test_carriage_return_and_missing_type():
    ok = raw(env(t="ping"))
    obj, problems = decode(ok + b"\r")
    assert obj is not None and "carriage return" in problems[0]
    assert check({"id": IDS.next()})[0].startswith("line without a message type")


def test_exactly_1_mib_line_is_not_too_large():
    line = env(t="ping", pad="")
    line["pad"] = "x" * (1_048_576 - len(raw(line)))
    data = raw(line)
    assert len(data) == 1_048_576
    obj, problems = decode(data)
    assert obj is not None and problems == []


def test_grant_checks():
    assert check_grant(grant()) == []
    assert "grant without 'caps'" in check_grant({k: v for k, v in grant().items()
                                                  if k != "caps"})
    assert any("aud" in p for p in check_grant({**grant(), "aud": "nope"}))


def test_shown_clips_and_escapes_control_characters():
    assert shown("a\r\nb") == "a\\r\\nb"
    assert shown("x" * 300).endswith("...(300 chars)")
    assert shown({"a": "<&>"}) == '{"a":"<&>"}'
    assert shown(b"\x01") == "\\x01"


def test_select_scenarios_keeps_catalogue_order_and_rejects_unknown():
    assert [s.name for s in select_scenarios([])] == [s.name for s in SCENARIOS]
    assert [s.name for s in select_scenarios(["bye", "handshake"])] == ["handshake", "bye"]
    with pytest.raises(ValueError, match="unknown scenario nope"):
        select_scenarios(["ping", "nope"])


def test_catalogue_is_the_fifteen_of_section_12_and_ours():
    assert [s.name for s in SCENARIOS] == [
        "handshake", "version", "auth-bad-sig", "bad-frame", "too-large", "ping", "msg-ack",
        "state-ack", "dedup", "unknown-type", "unknown-field", "err-nonclosing", "chunk",
        "grant", "introduce-replay", "seal", "seal-tamper", "board-unknown-topic",
        "board-malformed", "board-unsubscribed", "board-sync", "board-relay", "board-stamp",
        "board-owner-forged-author", "board-owner-equivocates", "board-owner-heads", "ws-healthz", "ws-no-subprotocol", "ws-other-request", "ws-frames", "ws-big-line",
        "rotate", "rotate-forged", "op-revoke", "bulk-push", "bye"]
    assert {s.name for s in SCENARIOS if s.own_connection} == {
        "version", "auth-bad-sig", "bad-frame", "too-large", "introduce-replay", "seal",
        "seal-tamper", "board-unsubscribed", "board-relay", "board-stamp",
        "board-owner-forged-author", "board-owner-equivocates", "board-owner-heads", "ws-healthz",
        "ws-no-subprotocol", "ws-other-request", "ws-frames", "ws-big-line", "rotate",
        "rotate-forged", "op-revoke", "bulk-push"}
    assert SCENARIOS[-1].name == "bye"  # last on a shared connection


def test_report_text_and_json():
    rep = Report("connect", "tcp:127.0.0.1:1", KEY, [
        Result("handshake", PASS, "peer 'x'", 3),
        Result("version", FAIL, "expected err version, got auth", 4),
        Result("chunk", SKIP, "the peer does not list cap blob", 0),
    ])
    assert rep.text().splitlines() == [
        "PASS handshake",
        "FAIL version: expected err version, got auth",
        "SKIP chunk: the peer does not list cap blob",
        "1 passed, 1 failed, 1 skipped",
    ]
    assert rep.exit_code == 1
    data = json.loads(rep.json_text())
    assert data["scenarios"][1] == {"scenario": "version", "status": "fail",
                                    "detail": "expected err version, got auth", "duration_ms": 4}
    assert (data["passed"], data["failed"], data["skipped"]) == (1, 1, 1)
    assert Report("connect", "x", KEY, [Result("a", SKIP, "", 0)]).exit_code == 0


def test_schema_problems_turn_a_pass_into_a_failure():
    r = _finish("ping", 0.0, PASS, "", ["pong.id is not a ULID"])
    assert r.status == FAIL and r.detail == "schema: pong.id is not a ULID"
    r = _finish("ping", 0.0, FAIL, "expected pong", ["a", "b", "c", "d"])
    assert r.detail == "expected pong; schema: a; b; c (+1 more)"
    r = _finish("ping", 0.0, SKIP, "no cap", ["a"])
    assert r.status == SKIP
