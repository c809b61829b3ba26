"""Profile request recognition, mimes, forbidden detail, interrupted results."""

from __future__ import annotations

from awp.serve import describe, interrupted_result
from awp.serve.journal import INTERRUPTED
from awp.serve.requests import (
    CAP_BY_MIME,
    EXEC_PROGRESS_MIME,
    RESULT_MIME,
    SERVABLE,
    cap_for_mime,
    forbidden_detail,
    progress_part,
    request_in,
    result_part,
)


def test_mimes_and_caps():
    assert CAP_BY_MIME == {
        "application/vnd.awp.exec+json": "exec",
        "application/vnd.awp.fs-read+json": "fs:read",
        "application/vnd.awp.fs-write+json": "fs:write",
        "application/vnd.awp.admin+json": "admin",
    }
    assert RESULT_MIME["exec"] == "application/vnd.awp.exec-result+json"
    assert RESULT_MIME["fs:read"] == "application/vnd.awp.fs-read-result+json"
    assert RESULT_MIME["fs:write"] == "application/vnd.awp.fs-write-result+json"
    assert sorted(SERVABLE) == ["exec", "fs:read", "fs:write"]
    assert EXEC_PROGRESS_MIME == "application/vnd.awp.exec-progress+json"
    assert cap_for_mime("application/vnd.awp.exec+json") == "exec"
    assert cap_for_mime("Application/VND.awp.fs-read+json; charset=utf-8") == "fs:read"
    assert cap_for_mime("application/json") is None
    assert cap_for_mime(None) is None


def test_request_in_finds_first_request_part():
    parts = [
        {"k": "text", "text": "running the tests"},
        {"k": "data", "mime": "application/json", "data": {"x": 1}},
        {"k": "data", "mime": "application/vnd.awp.exec+json", "data": {"cmd": ["make"]}},
        {"k": "data", "mime": "application/vnd.awp.fs-read+json", "data": {"path": "a"}},
    ]
    assert request_in(parts) == ("exec", "application/vnd.awp.exec+json", {"cmd": ["make"]})


def test_request_in_each_cap():
    for mime, cap in CAP_BY_MIME.items():
        assert request_in([{"k": "data", "mime": mime, "data": {}}]) == (cap, mime, {})


def test_request_in_none_and_garbage():
    assert request_in([]) is None
    assert request_in([{"k": "text", "text": "application/vnd.awp.exec+json"}]) is None
    assert request_in(None) is None
    assert request_in("x") is None
    assert request_in([1, None, "s", {"k": "data"}]) is None
    # a blob part with a request mime is not a request
    assert request_in([{"k": "blob", "mime": "application/vnd.awp.exec+json", "ref": "r"}]) is None
    # malformed data is returned as sent; the executor answers it with an error
    assert request_in([{"k": "data", "mime": "application/vnd.awp.exec+json", "data": "x"}]) == (
        "exec",
        "application/vnd.awp.exec+json",
        "x",
    )


def test_forbidden_detail_exact():
    assert (
        forbidden_detail("application/vnd.awp.exec+json", "exec")
        == 'application/vnd.awp.exec+json requires a grant for capability "exec"'
    )
    assert (
        forbidden_detail("application/vnd.awp.fs-write+json", "fs:write")
        == 'application/vnd.awp.fs-write+json requires a grant for capability "fs:write"'
    )


def test_result_and_progress_parts():
    assert result_part("fs:write", {"path": "a", "written": 1}) == {
        "k": "data",
        "mime": "application/vnd.awp.fs-write-result+json",
        "data": {"path": "a", "written": 1},
    }
    assert progress_part({"elapsed_ms": 10000, "line": "ok"}) == {
        "k": "data",
        "mime": "application/vnd.awp.exec-progress+json",
        "data": {"elapsed_ms": 10000, "line": "ok"},
    }


def test_interrupted_results():
    assert INTERRUPTED == "interrupted: the daemon stopped while serving this request"
    assert interrupted_result("exec") == {
        "exit": -1,
        "duration_ms": 0,
        "stdout": "",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": INTERRUPTED,
    }
    assert interrupted_result("fs:read", {"path": "a.txt"}) == {
        "error": INTERRUPTED,
        "path": "a.txt",
    }
    assert interrupted_result("fs:write") == {"error": INTERRUPTED}
    assert interrupted_result("fs:write", "garbage") == {"error": INTERRUPTED}


def test_describe():
    r = {"exit": 0, "duration_ms": 8123, "stdout": "", "stderr": ""}
    assert describe("exec", {"cmd": ["make", "test"]}, r) == "exit 0 in 8.1s: make test"
    assert describe("fs:read", {"path": "a"}, {"path": "a", "length": 3}) == "read a (3 bytes)"
    assert (
        describe("fs:read", {"path": "a"}, {"path": "a", "length": 70000, "blob": "a"})
        == "read a (70000 bytes as a blob)"
    )
    assert describe("fs:read", {"path": "d"}, {"path": "d", "dir": True, "size": 2}) == (
        "listed d (2 entries)"
    )
    assert describe("fs:write", {"path": "n"}, {"path": "n", "written": 5}) == (
        "wrote 5 bytes to n"
    )
    assert describe("fs:write", {"path": "../x"}, {"error": "path escapes the root"}) == (
        "fs:write ../x: path escapes the root"
    )
