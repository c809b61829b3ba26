"""Capability requests between two daemons: refused, passed on, served."""

from __future__ import annotations

import os

from nodes import wait_for

EXEC = "application/vnd.awp.exec+json"
READ = "application/vnd.awp.fs-read+json"
WRITE = "application/vnd.awp.fs-write+json"


def _request(a, b, mime: str, data: dict, text: str = "please") -> dict:
    return a.api("POST", "/v1/send", {"peer": b.key, "wait_ack": 10, "parts": [
        {"k": "text", "text": text}, {"k": "data", "mime": mime, "data": data}]})


def _result(a, th: str, req_id: str, timeout: float = 20) -> dict:
    def find():
        for r in a.inbound(th=th):
            line = r["line"]
            if line.get("re") != req_id:
                continue
            for p in line.get("parts", []):
                if p.get("k") == "data" and p.get("mime", "").endswith("-result+json"):
                    return r
        return None

    return wait_for(find, timeout, "the result msg")


def _data(rec: dict) -> dict:
    return next(p["data"] for p in rec["line"]["parts"] if p.get("k") == "data")


def test_request_without_grant_is_acked_refused_and_marked(make_node):
    a = make_node("a").start()
    b = make_node("b", extra=["--serve", "exec"]).start()
    a.connect(b)
    res = _request(a, b, EXEC, {"cmd": ["true"]})
    assert res["acked"]
    rec = wait_for(lambda: [r for r in b.inbound() if r.get("request")], 10, "marked")[0]
    assert rec["request"]["status"] == "forbidden"
    got = a.api("POST", "/v1/wait", {"th": res["th"], "timeout": 10})
    errs = [r for r in got["records"] if r["t"] == "err"]
    assert errs and errs[0]["re"] == res["id"] and errs[0]["line"]["code"] == "forbidden"
    assert 'requires a grant for capability "exec"' in errs[0]["line"]["detail"]


def test_granted_but_not_served_goes_to_the_agent_as_allowed(make_node):
    a = make_node("a").start()
    b = make_node("b").start()
    a.connect(b)
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["fs:read"], "ttl": 600})
    _request(a, b, READ, {"path": "x"})
    rec = wait_for(lambda: [r for r in b.inbound() if r.get("request")], 10, "marked")[0]
    assert rec["request"] == {"cap": "fs:read", "mime": READ, "status": "allowed"}


def test_served_exec_fs_read_and_fs_write(make_node, tmp_home_root):
    root = os.path.join(tmp_home_root, "root")
    os.makedirs(os.path.join(root, "sub"))
    with open(os.path.join(root, "hello.txt"), "w") as f:
        f.write("hi there\n")
    a = make_node("a").start()
    b = make_node("b", extra=["--serve", "exec,fs:read,fs:write", "--root", root]).start()
    a.connect(b)
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["exec", "fs:read", "fs:write"],
                                "ttl": 600})
    res = _request(a, b, EXEC, {"cmd": "echo out; echo err >&2; exit 3"})
    ex = _data(_result(a, res["th"], res["id"]))
    assert ex["exit"] == 3 and ex["stdout"] == "out\n" and ex["stderr"] == "err\n"
    res = _request(a, b, READ, {"path": "hello.txt"})
    rd = _data(_result(a, res["th"], res["id"]))
    assert rd["content"] == "hi there\n" and rd["encoding"] == "utf-8" and rd["size"] == 9
    res = _request(a, b, READ, {"path": "."})
    ls = _data(_result(a, res["th"], res["id"]))
    assert ls["dir"] is True and "sub/" in ls["entries"] and "hello.txt" in ls["entries"]
    res = _request(a, b, WRITE, {"path": "new/notes.md", "content": "x", "mkdir": True})
    wr = _data(_result(a, res["th"], res["id"]))
    assert wr["written"] == 1
    with open(os.path.join(root, "new", "notes.md")) as f:
        assert f.read() == "x"
    # escapes get an error result and touch nothing outside the root
    res = _request(a, b, WRITE, {"path": "../escape.txt", "content": "x"})
    assert "error" in _data(_result(a, res["th"], res["id"]))
    assert not os.path.exists(os.path.join(tmp_home_root, "escape.txt"))
    # the request is marked served on the serving side
    marks = [r["request"]["status"] for r in b.inbound() if r.get("request")]
    assert marks and set(marks) == {"served"}


def test_exec_timeout_and_large_output_as_blob(make_node, tmp_home_root):
    a = make_node("a").start()
    b = make_node("b", extra=["--serve", "exec", "--root", tmp_home_root]).start()
    a.connect(b)
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["exec"], "ttl": 600})
    res = _request(a, b, EXEC, {"cmd": ["sleep", "30"], "timeout": 1})
    ex = _data(_result(a, res["th"], res["id"]))
    assert "timed out" in ex["error"]
    res = _request(a, b, EXEC, {"cmd": "head -c 200000 /dev/zero | tr '\\0' a"})
    rec = _result(a, res["th"], res["id"])
    ex = _data(rec)
    assert ex["stdout_truncated"] is True and len(ex["stdout"]) <= 65536
    blob = wait_for(lambda: [f for f in (a.inbound(th=res["th"])[-1].get("files") or [])
                             if f["status"] == "complete"], 20, "stdout.txt arrives")[0]
    assert blob["name"] == "stdout.txt" and os.path.getsize(blob["path"]) == 200000


def test_request_interrupted_by_a_crash_gets_exactly_one_answer(make_node, tmp_home_root):
    a = make_node("a").start()
    b = make_node("b", extra=["--serve", "exec", "--root", tmp_home_root]).start()
    a.connect(b)
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["exec"], "ttl": 600})
    res = _request(a, b, EXEC, {"cmd": ["sleep", "30"]})
    wait_for(lambda: [r for r in b.inbound() if r.get("request")], 10, "request stored")
    b.kill()
    b.start()
    ex = _data(_result(a, res["th"], res["id"], timeout=30))
    assert ex["error"].startswith("interrupted") and ex["exit"] == -1
    b.stop()
    b.start()
    a.connect(b)
    # no second answer after another restart
    results = [r for r in a.inbound(th=res["th"]) if r["line"].get("re") == res["id"]]
    assert len(results) == 1


def test_long_exec_sends_throttled_progress_then_one_result(make_node, tmp_home_root):
    a = make_node("a").start()
    b = make_node("b", extra=["--serve", "exec", "--root", tmp_home_root],
                  env={"AWP_SERVE_PROGRESS_EVERY": "1"}).start()
    a.connect(b)
    b.api("POST", "/v1/grant", {"peer": a.key, "caps": ["exec"], "ttl": 600})
    res = _request(a, b, EXEC, {"cmd": "for i in 1 2 3 4; do echo step $i; sleep 1; done"})
    ex = _data(_result(a, res["th"], res["id"]))
    assert ex["exit"] == 0
    replies = [r for r in a.inbound(th=res["th"]) if r["line"].get("re") == res["id"]]
    progress = [r for r in replies if any(p.get("mime", "").endswith("exec-progress+json")
                                          for p in r["line"]["parts"])]
    assert 2 <= len(progress) <= 4
    assert "step" in _data(progress[-1])["line"]
    assert len(replies) == len(progress) + 1  # exactly one final result
