"""``awp web`` against real daemons: every endpoint, the host check, the
security headers, the event stream, files, shared threads, and no daemon."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "browser"))

from nodes import wait_for  # noqa: E402
from webtools import (  # noqa: E402
    HOSTILE,
    Web,
    add_mirror_line,
    png_bytes,
    seed_network,
    sse_events,
)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:;"
       " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@pytest.fixture
def web_factory(tmp_home_root):
    webs: list[Web] = []

    def make(home: str, **kw) -> Web:
        w = Web(home, **kw)
        webs.append(w)
        return w.start()

    yield make
    for w in webs:
        w.stop()


@pytest.fixture
def pair(make_node, web_factory):
    """A (the host being watched) connected to B, and awp web on A."""
    a = make_node("a").start()
    b = make_node("b", extra=["--harness", "codex"]).start()
    a.connect(b)
    web = web_factory(a.home)
    web.wait_state(lambda st: any(x["key"] == b.key and x["status"] == "connected"
                                  for x in st["agents"]), what="B connected in the state")
    return a, b, web


def _security(r: httpx.Response, csp: str = CSP) -> None:
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["content-security-policy"] == csp


def _send(node, peer: str, text: str, **kw) -> dict:
    return node.api("POST", "/v1/send", {"peer": peer, "parts": [{"k": "text", "text": text}],
                                         **kw})


def _activity(web: Web, **q) -> list[dict]:
    return web.get("/api/activity", params=q, timeout=5).json()["items"]


# ---------------------------------------------------------------- state, headers


def test_state_describes_host_peers_links_and_threads(pair):
    a, b, web = pair
    sent = _send(b, a.key, "Please run the suite", subject="Run the suite")
    a.api("POST", "/v1/state", {"peer": b.key, "th": sent["th"], "state": "working",
                                "note": "cloning"})
    st = web.wait_state(lambda st: any(t["th"] == sent["th"] and "working" in (
        t["a_state"], t["b_state"]) for t in st["threads"]), what="the thread with a state")
    r = web.get("/api/state")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["cache-control"] == "no-store"
    _security(r)

    assert st["self"] == a.key and st["name"] == "a"
    assert st["address"] == a.address and a.address in st["listeners"]
    assert st["presence"] is False and st["tailcat_error"] == ""
    for k in ("at", "version", "host_name", "agents", "links", "threads", "stats"):
        assert k in st
    agents = {x["key"]: x for x in st["agents"]}
    me, peer = agents[a.key], agents[b.key]
    assert me["status"] == "self" and me["short"] == a.key[8:18]
    assert peer["status"] == "connected" and peer["direct"] is True
    assert peer["name"] == "b" and peer["transport"] == "tcp"
    for k in ("about", "version", "harness", "model", "host", "sharing", "via", "hops", "seen",
              "last_active", "listening", "rtt_ms", "unreachable", "threads", "active",
              "working", "waiting"):
        assert k in peer, k
    assert me["working"] is True  # A said working in a thread
    assert me["last_active"]  # setting a state is the agent acting
    lo, hi = sorted([a.key, b.key])
    link = next(x for x in st["links"] if (x["a"], x["b"]) == (lo, hi))
    assert link["up"] is True and link["a"] < link["b"]
    t = next(x for x in st["threads"] if x["th"] == sent["th"])
    assert t["id"] == f"{lo}:{hi}:{sent['th']}"
    assert t["local"] is True and t["peer"] == b.key and t["shared_by"] == ""
    assert t["subject"] == "Run the suite" and t["unread"] == 1
    mine = "a_state" if t["a"] == a.key else "b_state"
    theirs = "b_state" if mine == "a_state" else "a_state"
    assert t[mine] == "working" and t[theirs] == "open"
    assert st["stats"]["agents"] == 2 and st["stats"]["up"] == 2
    assert st["stats"]["threads"] == 1 and st["stats"]["working"] == 1

    # Watching is not acting: the page's reads leave A's activity alone.
    before = a.api("GET", "/v1/activity")["active"]
    web.get(f"/api/thread?peer={b.key}&th={sent['th']}")
    assert a.api("GET", "/v1/activity")["active"] == before
    # ...and it never marks anything read.
    assert a.inbound(th=sent["th"])[0]["read"] is False


def test_every_response_carries_the_security_headers(pair):
    a, b, web = pair
    for path, ctype in (("/", "text/html"), ("/app.js", "text/javascript"),
                        ("/app.css", "text/css"), ("/favicon.svg", "image/svg+xml"),
                        ("/api/activity", "application/json"),
                        ("/api/nope", "application/json"), ("/api/thread", "application/json")):
        r = web.get(path)
        _security(r)
        assert r.headers["content-type"].startswith(ctype), path
    assert web.get("/api/nope").status_code == 404
    assert web.get("/api/thread").json() == {"error": "peer is required"}
    r = web.post("/api/state", content=b"{}")
    assert r.status_code == 405
    _security(r)
    page = web.get("/").text
    # The page loads only its own files: no external scripts, styles or fonts.
    assert "http://" not in page and "https://" not in page
    assert '<script src="/app.js"' in page
    js = web.get("/app.js").text
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js


# ---------------------------------------------------------------- the token


def test_every_request_needs_the_token(pair):
    a, b, web = pair
    # No token: 401 with a short explanation, on the page, the API and the event stream.
    for path in ("/", "/index.html", "/app.js", "/favicon.svg", "/api/state", "/api/activity",
                 "/api/events", f"/api/thread?peer={b.key}&th=x", "/api/blob?peer=x&dir=in&ref=y",
                 "/api/nope"):
        r = httpx.get(web.url + path, timeout=10)
        assert r.status_code == 401, path
        assert "needs its token" in r.text and "?token=" in r.text, path
        assert r.headers["www-authenticate"].startswith("Bearer")
        _security(r)
        assert b.key not in r.text and a.key not in r.text
    assert httpx.get(web.url + "/api/state").json()["error"].startswith(
        "this dashboard needs its token")
    assert httpx.get(web.url + "/").headers["content-type"].startswith("text/plain")
    # A wrong one: 403, whichever way it comes.
    wrong = "x" * 43
    for kw in ({"params": {"token": wrong}}, {"headers": {"cookie": f"awp_token_{web.port}={wrong}"}},
               {"headers": {"authorization": f"Bearer {wrong}"}},
               {"headers": {"cookie": f"awp_token_1={web.token}"}}):
        r = httpx.get(web.url + "/api/state", **kw)
        assert r.status_code == (401 if "awp_token_1" in str(kw) else 403), kw
        assert "token" in r.json()["error"]
    # The printed URL sets the cookie and sends the browser to the bare URL.
    r = httpx.get(web.login_url)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"awp_token_{web.port}={web.token};")
    attrs = {x.strip().split("=")[0].lower() for x in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path"} <= attrs and "SameSite=Strict" in cookie
    assert "Path=/" in cookie
    r = httpx.get(web.url + "/index.html", params={"token": web.token, "x": "1"})
    assert r.status_code == 303 and r.headers["location"] == "/index.html?x=1"
    with httpx.Client(base_url=web.url) as browser:
        r = browser.get(f"/?token={web.token}", follow_redirects=True)
        assert r.status_code == 200 and "<html" in r.text.lower()
        assert str(r.url) == web.url + "/"
        assert browser.get("/api/state").json()["self"] == a.key
        with browser.stream("GET", "/api/events", timeout=10) as resp:
            assert resp.status_code == 200
            assert next(sse_events(resp.iter_lines())) == ("retry", "2000", None)
    # Scripts may send it as a bearer token, or in the query of an API call.
    r = httpx.get(web.url + "/api/state", headers={"authorization": f"Bearer {web.token}"})
    assert r.status_code == 200 and r.json()["self"] == a.key
    assert httpx.get(web.url + "/api/state", params={"token": web.token}).status_code == 200
    # The host check still comes first.
    r = httpx.get(web.login_url, headers={"host": "evil.example"})
    assert r.status_code == 421


def test_token_file_is_private_and_lasts(make_node, web_factory):
    a = make_node("a").start()
    web = web_factory(a.home)
    path = os.path.join(a.home, "web.token")
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o600
    with open(path) as f:
        token = f.read().strip()
    assert token == web.token and len(token) == 43  # 32 random bytes, base64url
    web.stop()
    again = web_factory(a.home)
    assert again.token == token  # a browser's cookie outlives a restart
    again.stop()
    # A token others could read may have leaked: a new one replaces it.
    os.chmod(path, 0o644)
    third = web_factory(a.home)
    assert third.token != token
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert httpx.get(third.url + "/api/state", params={"token": token}).status_code == 403


def test_request_bodies_are_refused(pair):
    a, b, web = pair
    nested = b"[" * 100_000 + b"]" * 100_000
    r = web.stream("GET", "/api/state", content=nested)
    with r as resp:
        resp.read()
        assert resp.status_code == 400
        assert resp.json() == {"error": "the dashboard API takes no request body"}
    r = web.post("/api/state", content=nested)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    # Without the token a body changes nothing: 401.
    assert httpx.post(web.url + "/api/state", content=nested).status_code == 401
    assert web.get("/api/state").status_code == 200


# ---------------------------------------------------------------- host check


def test_host_check_on_loopback(pair, web_factory):
    a, b, web = pair
    port = web.port
    for host in ("localhost", f"localhost:{port}", "dash.localhost", f"127.0.0.1:{port}",
                 "127.0.0.5", f"[::1]:{port}", "LOCALHOST"):
        r = web.get("/api/state", headers={"host": host})
        assert r.status_code == 200, host
    for host in ("evil.example", f"evil.example:{port}", "localhost.evil.example",
                 "127.0.0.1.nip.io", "10.0.0.1", "awp.example.internal"):
        r = web.get("/api/state", headers={"host": host})
        assert r.status_code == 421, host
        assert "error" in r.json()
        _security(r)
    # Every path is guarded, the page and the event stream included.
    for path in ("/", "/app.js", "/api/events", "/api/activity"):
        assert web.get(path, headers={"host": "evil.example"}).status_code == 421

    allowed = web_factory(a.home, extra=["--allow-host", "awp.example.internal"])
    r = allowed.get("/api/activity", headers={"host": "awp.example.internal"})
    assert r.status_code == 200
    r = allowed.get("/api/activity", headers={"host": "other.example.internal"})
    assert r.status_code == 421


def test_non_loopback_listen_accepts_every_host_and_warns(make_node, web_factory):
    a = make_node("a").start()
    web = web_factory(a.home, host="0.0.0.0")
    r = web.get("/api/activity", headers={"host": "anything.example"})
    assert r.status_code == 200
    wait_for(lambda: "warning" in web.tail_log(), 5, "the warning")
    assert "not a loopback address" in web.tail_log()


# ---------------------------------------------------------------- no daemon


def test_no_daemon_503_and_the_page_waits(make_node, web_factory):
    a = make_node("a")
    os.makedirs(a.home, mode=0o700)
    web = web_factory(a.home)
    r = web.get("/api/state")
    assert r.status_code == 503
    assert r.headers["cache-control"] == "no-store"
    assert isinstance(r.json()["error"], str) and r.json()["error"]
    assert web.get("/api/thread?peer=ed25519:x&th=t").status_code == 503
    assert web.get("/").status_code == 200  # the page itself is there
    assert web.get("/api/activity").json() == {"items": []}
    # The event stream opens anyway and says why there is no state yet.
    with web.stream("GET", "/api/events", timeout=10) as resp:
        events = sse_events(resp.iter_lines())
        assert next(events) == ("retry", "2000", None)
        kind, data, _ = next(events)
        assert kind == "down" and json.loads(data)["error"]
    time.sleep(1.5)
    # awp web never starts a daemon.
    assert not os.path.exists(os.path.join(a.home, "awp.sock"))
    assert not os.path.exists(os.path.join(a.home, "daemon.pid"))
    a.start()
    st = web.wait_state(what="the state once the daemon runs")
    assert st["self"] == a.key
    a.stop()
    wait_for(lambda: web.get("/api/state").status_code == 503, 10,
             "503 after the daemon stopped")


# ---------------------------------------------------------------- conversations


def test_thread_and_activity_carry_hostile_text_as_plain_json(pair):
    a, b, web = pair
    first = _send(b, a.key, "hello", subject=HOSTILE)
    _send(b, a.key, HOSTILE, th=first["th"])
    b.api("POST", "/v1/state", {"peer": a.key, "th": first["th"], "state": "waiting",
                                "note": "<b>note</b>"})
    _send(a, b.key, "reply from a", th=first["th"])

    def convo():
        r = web.get("/api/thread", params={"peer": b.key, "th": first["th"]})
        got = r.json()
        return got if len(got.get("messages", [])) >= 4 else None

    got = wait_for(convo, 10, "the conversation")
    r = web.get("/api/thread", params={"peer": b.key, "th": first["th"]})
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["cache-control"] == "no-store"
    _security(r)
    assert got["peer"] == b.key and got["th"] == first["th"] and got["subject"] == HOSTILE
    assert got["a_state"] == "open" and got["b_state"] == "waiting"  # a = this host's side
    kinds = [m["kind"] for m in got["messages"]]
    assert kinds == ["msg", "msg", "state", "msg"]
    m0, m1, st, m3 = got["messages"]
    assert m1["parts"] == [{"type": "text", "text": HOSTILE}]
    assert m1["from"] == b.key and "acked" not in m1
    assert st["state"] == "waiting" and st["note"] == "<b>note</b>" and st["from"] == b.key
    assert m3["from"] == a.key and m3["acked"] in (True, False)
    wait_for(lambda: web.get("/api/thread", params={
        "peer": b.key, "th": first["th"]}).json()["messages"][3]["acked"], 10, "the ack")
    # The text comes back exactly as sent, as JSON strings: nothing added, nothing run.
    assert json.loads(r.text)["messages"][1]["parts"][0]["text"] == HOSTILE
    assert [m["seq"] for m in got["messages"]] == sorted(m["seq"] for m in got["messages"])

    items = wait_for(lambda: [i for i in _activity(web) if i.get("th") == first["th"]]
                     if len([i for i in _activity(web) if i.get("th") == first["th"]]) >= 4
                     else None, 10, "activity for the thread")
    assert [i["kind"] for i in items] == ["thread", "msg", "state", "msg"]
    assert items[0]["subject"] == HOSTILE and items[0]["from"] == b.key
    assert items[1]["text"] == HOSTILE and items[1]["local"] is True
    assert items[2]["state"] == "waiting" and items[2]["text"] == "<b>note</b>"
    assert items[3]["from"] == a.key and items[3]["to"] == b.key
    seqs = [i["seq"] for i in _activity(web)]
    assert seqs == sorted(seqs)
    assert _activity(web, after=items[1]["seq"])[0]["seq"] > items[1]["seq"]
    assert len(_activity(web, limit=1)) == 1
    assert len(_activity(web, limit=999999)) == len(_activity(web))  # over 2,000: the default
    assert web.get("/api/activity?after=x").status_code == 400

    r = web.get("/api/thread", params={"peer": b.key, "th": "thr_nothere"})
    assert r.status_code == 404 and "private" in r.json()["error"]
    assert web.get("/api/thread", params={"peer": b.key}).status_code == 400


def test_shared_threads_and_presence(pair):
    a, b, web = pair
    net = seed_network(a.home, agents=12, threads=40, sharer=b.key, shared_threads=2)
    st = web.wait_state(lambda st: st["stats"]["agents"] >= 14, what="the seeded network")
    agents = {x["key"]: x for x in st["agents"]}
    origin = net["keys"][3]
    assert agents[origin]["status"] == "online" and agents[origin]["sharing"] is True
    assert agents[origin]["harness"] == net["docs"][3]["harness"]
    assert agents[origin]["via"] == net["keys"][0] and agents[origin]["hops"] == 1
    assert agents[origin]["model"] == net["docs"][3]["model"]
    gossip = [t for t in st["threads"] if not t["local"] and not t["shared_by"]]
    assert len(gossip) == net["threads"] and all("peer" not in t for t in gossip)
    shared = [t for t in st["threads"] if t["shared_by"]]
    assert {t["th"] for t in shared} == {"thr_shared0", "thr_shared1"}
    t0 = next(t for t in shared if t["th"] == "thr_shared0")
    of = net["keys"][0]
    assert t0["shared_by"] == b.key and {t0["a"], t0["b"]} == {b.key, of}
    assert t0["a_state" if t0["a"] == of else "b_state"] == "working"

    conv = web.get("/api/thread", params={"peer": b.key, "th": "thr_shared0"}).json()
    assert conv["shared_by"] == b.key and conv["a"] == b.key and conv["b"] == of
    assert conv["b_state"] == "working"
    assert [m["kind"] for m in conv["messages"]] == ["msg", "state"]
    assert conv["messages"][0]["parts"] == [{"type": "text", "text": "please do shared task 0"}]
    # A gossip-only thread: its messages are private to the two agents.
    g = gossip[0]
    r = web.get("/api/thread", params={"peer": g["a"], "th": g["th"]})
    assert r.status_code == 404

    # A new mirrored line reaches the stream as a message event.
    with web.stream("GET", "/api/events", timeout=20) as resp:
        add_mirror_line(a.home, b.key, "thr_shared0", of, {
            "t": "msg", "id": "late1", "ts": "2026-11-30T00:00:00Z", "th": "thr_shared0",
            "parts": [{"k": "text", "text": "late line"}]}, ident="mlate")
        for kind, data, _ in sse_events(resp.iter_lines()):
            if kind == "message":
                ev = json.loads(data)
                assert ev["peer"] == b.key and ev["th"] == "thr_shared0"
                assert ev["message"]["parts"][0]["text"] == "late line"
                break
    items = _activity(web)
    late = [i for i in items if i.get("th") == "thr_shared0" and i["kind"] == "msg"]
    assert late and late[-1]["local"] is False and late[-1]["text"] == "late line"


def test_fifty_agents_and_five_hundred_threads(pair):
    a, b, web = pair
    seed_network(a.home, agents=50, threads=500, sharer=b.key)
    st = web.wait_state(lambda st: st["stats"]["threads"] >= 500, what="the big network")
    assert st["stats"]["agents"] == 52
    t0 = time.monotonic()
    for _ in range(5):
        assert web.get("/api/state").status_code == 200
    assert (time.monotonic() - t0) / 5 < 0.5


def test_the_feed_keeps_more_than_a_screenful(pair, web_factory):
    """The activity feed holds every item up to its bound (2,000 kept, the newest 300 read
    from the log when awp web starts): 120 messages are 120 items, live and after a
    restart of awp web, not the last few dozen."""
    a, b, web = pair
    sent = _send(b, a.key, "m 0")
    for i in range(1, 120):
        _send(b, a.key, f"m {i}", thread=sent["th"])
    wait_for(lambda: len([i for i in _activity(web) if i["kind"] in ("msg", "thread")
                          and i["from"] == b.key]) >= 120, 30, "120 items in the live feed")
    web.stop()
    again = web_factory(a.home)
    items = [i for i in _activity(again) if i["kind"] in ("msg", "thread")
             and i["from"] == b.key]
    assert len(items) == 120, len(items)
    assert {i["text"] for i in items} == {f"m {n}" for n in range(120)}


# ---------------------------------------------------------------- files


def test_blobs_inline_only_for_raster_images(pair, tmp_home_root):
    a, b, web = pair
    files = {
        "pic.png": png_bytes(),
        "vector.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        "page.html": b"<html><script>alert(1)</script></html>",
        "fake.png": b"<html><script>alert(1)</script></html>",
        "report.pdf": b"%PDF-1.4\n%%EOF\n",
    }
    paths = []
    for name, data in files.items():
        p = os.path.join(tmp_home_root, name)
        with open(p, "wb") as f:
            f.write(data)
        paths.append({"path": p, "name": name,
                      **({"mime": "image/png"} if name == "fake.png" else {})})
    sent = b.api("POST", "/v1/send", {"peer": a.key, "parts": [{"k": "text", "text": "files"}],
                                      "files": paths})

    def parts():
        r = web.get("/api/thread", params={"peer": b.key, "th": sent["th"]})
        msgs = r.json().get("messages") or []
        ps = [p for p in msgs[0]["parts"] if p["type"] == "blob"] if msgs else []
        return ps if len(ps) == 5 and all(p.get("url") for p in ps) else None

    blobs = {p["name"]: p for p in wait_for(parts, 15, "every file received")}
    assert blobs["pic.png"]["mime"] == "image/png" and blobs["pic.png"]["size"] == len(
        files["pic.png"])
    r = web.get(blobs["pic.png"]["url"])
    assert r.status_code == 200 and r.content == files["pic.png"]
    assert r.headers["content-type"] == "image/png"
    assert r.headers["content-disposition"].startswith("inline")
    _security(r)
    for name in ("vector.svg", "page.html", "fake.png", "report.pdf"):
        r = web.get(blobs[name]["url"])
        assert r.status_code == 200 and r.content == files[name], name
        assert r.headers["content-type"] == "application/octet-stream", name
        assert r.headers["content-disposition"].startswith("attachment"), name
        assert f'filename="{name}"' in r.headers["content-disposition"]
        assert r.headers["content-security-policy"].startswith("sandbox"), name
        assert r.headers["x-content-type-options"] == "nosniff"

    # The sender's own copy (dir=out) is served on its side too.
    out = a.api("POST", "/v1/send", {"peer": b.key, "parts": [], "th": sent["th"],
                                     "files": [os.path.join(tmp_home_root, "pic.png")]})
    assert out["th"] == sent["th"]
    msgs = wait_for(lambda: [m for m in web.get("/api/thread", params={
        "peer": b.key, "th": sent["th"]}).json()["messages"] if m["from"] == a.key], 10,
        "A's own file")
    url = msgs[0]["parts"][0]["url"]
    assert "dir=out" in url and web.get(url).content == files["pic.png"]

    base = "/api/blob"
    assert web.get(base, params={"peer": b.key, "dir": "in", "ref": "nope"}).status_code == 404
    assert web.get(base, params={"peer": b.key, "dir": "up", "ref": "x"}).status_code == 400
    assert web.get(base, params={"peer": b.key}).status_code == 400


# ---------------------------------------------------------------- events


def test_event_stream_state_first_live_messages_and_replay(pair):
    a, b, web = pair
    with web.stream("GET", "/api/events", timeout=20) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-store"
        _security(resp)
        lines = resp.iter_lines()
        assert next(lines) == "retry: 2000"
        events = sse_events(lines)
        kind, data, ident = next(events)
        assert kind == "state" and ident is None
        assert json.loads(data)["self"] == a.key
        sent = _send(b, a.key, "live one", subject="Live")
        got: dict = {}
        for kind, data, ident in events:
            if kind == "message":
                got["message"] = json.loads(data)
            elif kind == "activity":
                item = json.loads(data)
                assert ident == str(item["seq"])
                if item.get("th") == sent["th"]:
                    got["activity"] = item
            if "message" in got and "activity" in got:
                break
    assert got["message"]["peer"] == b.key and got["message"]["th"] == sent["th"]
    msg = got["message"]["message"]
    assert msg["kind"] == "msg" and msg["parts"] == [{"type": "text", "text": "live one"}]
    missed_after = got["activity"]["seq"]

    # While nobody listens, more happens; a reconnect with Last-Event-ID gets it.
    for i in range(3):
        _send(b, a.key, f"missed {i}", th=sent["th"])
    wait_for(lambda: len([i for i in _activity(web) if i["seq"] > missed_after]) >= 3, 10,
             "the missed activity")
    with web.stream("GET", "/api/events", timeout=20,
                      headers={"last-event-id": str(missed_after)}) as resp:
        events = sse_events(resp.iter_lines())
        assert next(events)[0] == "retry"
        assert next(events)[0] == "state"
        replay = []
        for kind, data, ident in events:
            assert kind == "activity"
            replay.append(json.loads(data))
            assert ident == str(replay[-1]["seq"])
            if len(replay) == 3:
                break
    assert [r["text"] for r in replay] == ["missed 0", "missed 1", "missed 2"]
    assert all(r["seq"] > missed_after for r in replay)


def test_event_stream_pings(make_node, web_factory):
    a = make_node("a").start()
    web = web_factory(a.home, env={"AWP_WEB_PING_SECONDS": "0.3"})
    with web.stream("GET", "/api/events", timeout=10) as resp:
        for kind, text, _ in sse_events(resp.iter_lines()):
            if kind == "comment":
                assert text == "ping"
                break


def test_stalled_event_client_blocks_nobody(pair):
    a, b, web = pair
    # A client that opens the stream and then never reads.
    stalled = socket.create_connection(("127.0.0.1", web.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n\r\n".encode())
    big = "x" * 60_000
    seen: list[str] = []
    done = threading.Event()

    def reader():
        with web.stream("GET", "/api/events", timeout=60) as resp:
            for kind, data, _ in sse_events(resp.iter_lines()):
                if kind == "message":
                    text = json.loads(data)["message"]["parts"][0]["text"]
                    seen.append(text)
                    if text == "last":
                        done.set()
                        return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.5)
    th = None
    t0 = time.monotonic()
    for i in range(120):
        res = _send(b, a.key, f"{i} {big}", th=th)
        th = res["th"]
    _send(b, a.key, "last", th=th)
    assert done.wait(60), f"the live client got {len(seen)} messages"
    assert len(seen) == 121
    # The daemon and the web API kept answering.
    assert web.get("/api/state", timeout=5).status_code == 200
    assert a.api("GET", "/v1/status")["key"] == a.key
    assert time.monotonic() - t0 < 60
    stalled.close()


# ---------------------------------------------------------------- CLI --json


def test_cli_json_has_the_fields_the_page_uses(pair):
    a, b, web = pair
    sent = _send(b, a.key, "json check", subject="JSON")

    def awp(*args):
        env = dict(os.environ)
        env.pop("AWP_HOME", None)
        out = subprocess.run([sys.executable, "-m", "awp", "--home", a.home, *args, "--json"],
                             capture_output=True, text=True, env=env, timeout=60, check=True)
        return json.loads(out.stdout)

    wait_for(lambda: a.inbound(th=sent["th"]), 10, "the message")
    st = web.wait_state(lambda st: st["threads"], what="the thread")
    status = awp("status")
    assert status["key"] == st["self"] and status["name"] == st["name"]
    assert status["address"] == st["address"] and status["tailcat_error"] == st["tailcat_error"]
    assert set(st["listeners"]) <= set(status["addresses"])
    peers = {p["key"]: p for p in awp("peers")}
    agent = next(x for x in st["agents"] if x["key"] == b.key)
    assert peers[b.key]["name"] == agent["name"]
    assert peers[b.key]["short"] == agent["short"]
    assert peers[b.key]["state"].startswith("connected") and agent["status"] == "connected"
    assert "rtt_ms" in peers[b.key] and "last_error" in peers[b.key]
    rows = awp("threads")
    t = next(x for x in st["threads"] if x["th"] == sent["th"])
    row = next(x for x in rows if x["th"] == sent["th"])
    assert row["peer"] == t["peer"] and row["subject"] == t["subject"]
    assert row["unread"] == t["unread"]
    assert {row["mine"], row["theirs"]} == {t["a_state"], t["b_state"]}


# ---------------------------------------------------------------- end to end


def test_presence_and_sharing_end_to_end(make_node, web_factory):
    """D watches; B is connected to D, C only to B. B and C publish presence and
    B shares its conversations with D."""
    d = make_node("dash").start()
    b = make_node("codex@b", extra=["--presence"]).start()
    c = make_node("claude-code@c", extra=["--presence"]).start()
    b.connect(d)
    c.connect(b)
    b.api("POST", "/v1/share", {"hosts": [d.key]})
    web = web_factory(d.home)
    sent = _send(c, b.key, "shared hello", subject="Across the network")

    def shared_and_seen(st):
        agents = {x["key"]: x for x in st["agents"]}
        t = next((t for t in st["threads"] if t["th"] == sent["th"]), None)
        # C's own document (not just B listing C as a peer) has come through B.
        return (agents.get(c.key, {}).get("status") == "online" and t is not None
                and t["shared_by"] == b.key and agents[c.key].get("via") == b.key)

    st = web.wait_state(shared_and_seen, timeout=30, what="C through B, and the shared thread")
    agents = {x["key"]: x for x in st["agents"]}
    assert agents[c.key]["via"] == b.key and agents[c.key]["hops"] == 1
    assert agents[c.key]["sharing"] is True and agents[c.key]["name"] == "claude-code@c"
    assert agents[b.key]["status"] == "connected" and agents[b.key]["shares"] == [d.key]
    assert any({x["a"], x["b"]} == {b.key, c.key} for x in st["links"])
    conv = web.get("/api/thread", params={"peer": b.key, "th": sent["th"]}).json()
    assert conv["shared_by"] == b.key and conv["b"] == c.key
    assert conv["messages"][0]["parts"] == [{"type": "text", "text": "shared hello"}]
    assert conv["messages"][0]["from"] == c.key
    items = [i for i in _activity(web) if i.get("th") == sent["th"]]
    assert items and items[0]["local"] is False and items[0]["peer"] == b.key

    # C keeps the thread out: the dashboard's copy goes away.
    c.api("POST", "/v1/private", {"peer": b.key, "th": sent["th"]})
    wait_for(lambda: web.get("/api/thread", params={
        "peer": b.key, "th": sent["th"]}).status_code == 404, 20, "the withdraw")
