"""Fuzz the local API: every route, generated bodies and queries, never a 500.

A local caller is untrusted too (a hook fed by a model, a script, another
program of the same user).  Each example sends one request to one route of
a daemon that has a connected peer, a thread, an open queue topic with a
post, and a grant, so names resolve and requests get past their first
checks.  The answer must be a 2xx or a 4xx with a code, never ``internal``;
afterwards the daemon still runs, logged no traceback, and still delivers a
message to its peer.

Left out: ``/v1/shutdown`` (it ends the daemon, as asked), ``/v1/connect``
and ``/v1/introduce`` (they dial the addresses given: tests stay on
loopback), and the two streams (``/v1/events``, ``/v1/web/changes``), which
hold the request open by design.  Waiting routes get a short timeout.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from fuzzgen import edge_ints, json_values, mutated, texts
from hypothesis import event, given, settings
from hypothesis import strategies as st
from nodes import wait_for

from awp.localapi.client import ApiFailure

ROUTES = [
    ("GET", p) for p in (
        "/v1/activity", "/v1/blobs", "/v1/board/queue", "/v1/board/topics", "/v1/caps",
        "/v1/grants", "/v1/model", "/v1/peers", "/v1/share", "/v1/status", "/v1/threads",
        "/v1/timings", "/v1/web/blob", "/v1/web/board", "/v1/web/log", "/v1/web/state",
        "/v1/web/thread", "/v1/web/topic")
] + [
    ("POST", p) for p in (
        "/v1/activity", "/v1/alias", "/v1/board/ban", "/v1/board/claim", "/v1/board/delete",
        "/v1/board/edit", "/v1/board/get", "/v1/board/grant", "/v1/board/hide",
        "/v1/board/lease", "/v1/board/post", "/v1/board/revoke", "/v1/board/subscribe",
        "/v1/board/topic", "/v1/board/unread", "/v1/board/unsubscribe", "/v1/board/wait",
        "/v1/bye", "/v1/grant", "/v1/harness", "/v1/inbox", "/v1/private", "/v1/read",
        "/v1/resolve", "/v1/revoke", "/v1/send", "/v1/share", "/v1/state", "/v1/wait",
        "/v1/wait_ack", "/v1/model")
]
WAITING = ("/v1/wait", "/v1/board/wait", "/v1/wait_ack", "/v1/board/subscribe",
           "/v1/board/claim", "/v1/board/lease", "/v1/board/post", "/v1/send")
def _requests(known: dict[str, list]) -> st.SearchStrategy:
    """(route, body or query): each field right for its name most of the time, so
    requests get past their first checks; anything at all the rest of the time."""
    def field(name: str) -> st.SearchStrategy:
        right = st.sampled_from(known.get(name) or known["misc"])
        return st.one_of(right, right, right, json_values(4), edge_ints, texts)

    fields = st.fixed_dictionaries({}, optional={f: field(f) for f in known if f != "misc"})
    body = st.one_of(fields, fields, fields,
                     st.dictionaries(texts, json_values(4), max_size=4), json_values(4),
                     st.binary(max_size=40))
    query = st.dictionaries(st.sampled_from(sorted(known)), st.one_of(
        st.sampled_from([v for vs in known.values() for v in vs if not isinstance(v, list)]),
        texts, edge_ints.map(str)), max_size=4)
    return st.sampled_from(ROUTES).flatmap(
        lambda route: st.tuples(st.just(route), query if route[0] == "GET" else body))


def _setup(a, b) -> dict[str, list]:
    """A peer, a thread, a queue topic with a post, a grant: things to name."""
    b.connect(a)
    th = b.send(a.key, "hello", subject="fuzz thread")["th"]
    a.api("POST", "/v1/board/topic", {"name": "jobs", "read": "open", "post": "open",
                                      "queue": True})
    topic = f"{a.key}/jobs"
    post = a.api("POST", "/v1/board/post", {"topic": topic,
                                            "parts": [{"k": "text", "text": "an item"}]})["post"]
    lease = a.api("POST", "/v1/board/claim", {"topic": topic})["lease"]
    grant = a.api("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 3600})
    peers = [b.key, b.key[:18], b.name, "nobody"]
    posts = [post["hash"], post["id"], "0" * 32]
    parts = [[{"k": "text", "text": "hi"}], [{"k": "data", "data": {"a": 1}}],
             [{"k": "code", "text": "x = 1", "lang": "python"}]]
    return {"peer": peers, "who": peers, "hosts": [[b.key], [b.name, "nobody"]],
            "th": [th, "thr_nope"], "thread": [th], "topic": [topic, "jobs", f"{b.key}/jobs"],
            "name": ["jobs", "other", "Bad Name"], "post": posts, "parent": posts, "of": posts,
            "hash": posts + [str(grant.get("hash", ""))], "parts": parts,
            "posts": [[{"parts": p} for p in parts]], "text": ["hi", ""],
            "state": ["working", "done", "closed", "bogus"], "note": ["a note"],
            "lease": [lease, "nope.1"], "op": ["renew", "release", "complete", "fail", "x"],
            "caps": [["fs:read"], ["exec"], ["board:read"]], "ttl": [3600, 0, -1, "1h"],
            "n": [1, 20, 0, -1], "since": [0, 1], "limit": [1, 10], "cursor": [0],
            "alias": ["w"], "model": ["gpt-5"], "harness": ["claude-code"],
            "read": ["open", "grant"], "post_open": [True], "queue": [True, False],
            "keep": [1, 10], "rate": [1, 6000], "subject": ["a task"], "mime": ["text/plain"],
            "data": [{"a": 1}], "stop": [True], "all": [True], "mark": [True],
            "timeout": [0.2], "id": [th], "ids": [[th]], "key": peers, "kind": ["post"],
            "misc": ["open", "grant", "working", "claim", "1h", "0"]}


def fuzz_localapi(a, b, examples: int) -> int:
    """``examples`` generated requests to ``a`` (``b`` its connected peer); how many ran."""
    known = _setup(a, b)
    ran = 0
    client = a.client

    @settings(max_examples=examples, database=None, deadline=None)
    @given(_requests(known))
    def one_request(req):
        nonlocal ran
        ran += 1
        (method, path), payload = req
        if path in WAITING and isinstance(payload, dict):
            payload = {**payload, "timeout": 0.2}
        elif path in WAITING and isinstance(payload, bytes) and not payload.strip():
            payload = {"timeout": 0.2}  # no body at all: the default wait
        try:
            if method == "GET":
                # written out here: a lone surrogate goes as the bytes it would be
                query = "&".join(f"{quote(k)}={quote(str(v).encode('utf-8', 'surrogatepass'))}"
                                 for k, v in payload.items())
                client.request("GET", f"{path}?{query}", timeout=20)
            else:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                client.request("POST", path, body, timeout=20)
            event("2xx")
        except ApiFailure as e:
            assert e.status < 500 or e.code == "store_damaged", (method, path, payload, e.status,
                                                                 e.code, e.message)
            assert e.code, (method, path, payload, e.status, e.message)
            event(f"{e.status} {e.code}")

    one_request()
    # still serving: running, no traceback logged, and a message still goes through
    assert a.proc.poll() is None, a.tail_log()
    sent = a.send(b.key, "after the fuzz")
    wait_for(lambda: any(m["id"] == sent["id"] for m in b.inbound()), 20, "delivered")
    with open(a.log_path, errors="replace") as f:
        log = f.read()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    return ran


def test_local_api_answers_any_request_without_a_500(make_node):
    a, b = make_node("a").start(), make_node("b").start()
    assert fuzz_localapi(a, b, max(20, settings.default.max_examples)) > 0


RAW_REQUESTS = [
    b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 8\r\n\r\n{\"n\":2}",
    b"POST /v1/send HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"9\r\n{\"peer\":1\r\n1\r\n}\r\n0\r\n\r\n",
    b"GET /v1/web/log?after=1&after=2&n=%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v1/%00%2e%2e/ HTTP/1.0\r\n\r\n",
]


def _exchange(sock_path: str, data: bytes) -> bytes:
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(sock_path)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def test_raw_http_requests_are_never_a_500(make_node):
    """HTTP framing itself, bytes changed here and there: 4xx or 5xx for a method or
    version we do not serve (501, 505), never a 500 (a probe of this kind found one)."""
    a = make_node("a").start()
    sock_path = os.path.join(a.home, "awp.sock")

    @settings(max_examples=max(30, settings.default.max_examples), database=None, deadline=None)
    @given(mutated(st.sampled_from(RAW_REQUESTS)))
    def one(data):
        answer = _exchange(sock_path, data)
        status = answer[9:12]
        event(status.decode("latin-1"))
        assert status != b"500", (data, answer[:300])

    one()
    assert a.proc.poll() is None
    with open(a.log_path, errors="replace") as f:
        assert "Traceback" not in f.read()
