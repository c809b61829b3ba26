"""Served exec at the executor level: real processes, no daemon."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import trio

import awp.serve.exec as execmod
from awp.serve import serve_request
from awp.serve.exec import run_exec, summary

KIB64 = 64 * 1024
PY = sys.executable


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "services" / "api").mkdir(parents=True)
    return r


@pytest.fixture
def scratch(tmp_path):
    s = tmp_path / "scratch"
    s.mkdir()
    return s


def run(root, data, scratch, **kw):
    return trio.run(lambda: run_exec(str(root), data, scratch_dir=str(scratch), **kw))


def alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_argv_form_exact_shape(root, scratch):
    res, blobs = run(root, {"cmd": ["echo", "hello", "world"]}, scratch)
    assert blobs == []
    assert set(res) == {
        "exit",
        "duration_ms",
        "stdout",
        "stderr",
        "stdout_truncated",
        "stderr_truncated",
    }
    assert res["exit"] == 0 and res["stdout"] == "hello world\n" and res["stderr"] == ""
    assert res["stdout_truncated"] is False and res["stderr_truncated"] is False
    assert isinstance(res["duration_ms"], int) and 0 <= res["duration_ms"] < 5000
    assert os.listdir(scratch) == []  # nothing left behind when nothing is attached


def test_string_form_uses_sh(root, scratch):
    res, _ = run(root, {"cmd": "echo out; echo err >&2; exit 3"}, scratch)
    assert (res["exit"], res["stdout"], res["stderr"]) == (3, "out\n", "err\n")
    assert "error" not in res


def test_exit_codes(root, scratch):
    assert run(root, {"cmd": ["true"]}, scratch)[0]["exit"] == 0
    assert run(root, {"cmd": ["false"]}, scratch)[0]["exit"] == 1
    assert run(root, {"cmd": [PY, "-c", "raise SystemExit(42)"]}, scratch)[0]["exit"] == 42
    # killed by a signal: negative signal number
    res, _ = run(root, {"cmd": "kill -TERM $$"}, scratch)
    assert res["exit"] == -signal.SIGTERM


def test_env_merged_over_daemon_env(root, scratch, monkeypatch):
    monkeypatch.setenv("AWP_TEST_INHERITED", "from-daemon")
    monkeypatch.setenv("AWP_TEST_DROP", "gone")
    res, _ = run(
        root,
        {
            "cmd": 'echo "$CI|$AWP_TEST_INHERITED|${AWP_TEST_DROP-unset}"',
            "env": {"CI": "1", "AWP_TEST_DROP": None},
        },
        scratch,
    )
    assert res["stdout"] == "1|from-daemon|unset\n"
    # PATH still comes from the daemon's environment
    assert run(root, {"cmd": ["env"], "env": {"X": "y"}}, scratch)[0]["stdout"].count("PATH=") >= 1


def test_stdin(root, scratch):
    res, _ = run(root, {"cmd": ["cat"], "stdin": "line one\nline two\n"}, scratch)
    assert res["stdout"] == "line one\nline two\n"
    # no stdin: /dev/null, cat ends at once
    res, _ = run(root, {"cmd": ["cat"], "timeout": 5}, scratch)
    assert res["stdout"] == "" and res["exit"] == 0
    # large stdin while the command writes a lot: no deadlock
    big = "x" * 500_000
    res, blobs = run(root, {"cmd": ["cat"], "stdin": big, "timeout": 20}, scratch)
    assert res["exit"] == 0 and res["stdout_truncated"] is True
    with open(dict(blobs)["stdout.txt"]) as f:
        assert f.read() == big


def test_stdin_ignored_by_command(root, scratch):
    res, _ = run(root, {"cmd": ["true"], "stdin": "y" * 1_000_000, "timeout": 10}, scratch)
    assert res["exit"] == 0 and "error" not in res


def test_cwd(root, scratch, tmp_path):
    assert run(root, {"cmd": ["pwd"]}, scratch)[0]["stdout"] == f"{root}\n"
    res, _ = run(root, {"cmd": ["pwd"], "cwd": "services/api"}, scratch)
    assert res["stdout"] == f"{root}/services/api\n"
    # exec is not confined: another directory may be named
    res, _ = run(root, {"cmd": ["pwd"], "cwd": str(tmp_path)}, scratch)
    assert res["stdout"] == f"{tmp_path}\n"
    res, _ = run(root, {"cmd": ["pwd"], "cwd": ".."}, scratch)
    assert res["stdout"] == f"{tmp_path}\n"


def test_bad_cwd_exit_minus_one(root, scratch):
    res, blobs = run(root, {"cmd": ["pwd"], "cwd": "nope"}, scratch)
    assert blobs == []
    assert res == {
        "exit": -1,
        "duration_ms": res["duration_ms"],
        "stdout": "",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": "cwd is not a directory: nope",
    }


def test_missing_binary_exit_minus_one(root, scratch):
    res, blobs = run(root, {"cmd": ["/no/such/binary-awp", "x"]}, scratch)
    assert blobs == [] and res["exit"] == -1
    assert res["error"] == "could not start '/no/such/binary-awp': No such file or directory"
    assert res["stdout"] == "" and res["stderr"] == ""
    assert os.listdir(scratch) == []
    res, _ = run(root, {"cmd": ["awp-no-such-command-on-path"]}, scratch)
    assert res["exit"] == -1 and res["error"].startswith("could not start")


def test_not_executable(root, scratch):
    f = root / "script.sh"
    f.write_text("#!/bin/sh\necho hi\n")
    os.chmod(f, 0o644)
    res, _ = run(root, {"cmd": ["./script.sh"]}, scratch)
    if os.geteuid() != 0:
        assert res["exit"] == -1 and "Permission denied" in res["error"]
    else:  # root may still lack the x bit: exec refuses without any x bit
        assert res["exit"] == -1 and "error" in res


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (None, "request data must be an object"),
        ("make", "request data must be an object"),
        ({}, "cmd is required"),
        ({"cmd": ""}, "cmd is empty"),
        ({"cmd": []}, "cmd must be a string or a non-empty list of strings"),
        ({"cmd": ["a", 1]}, "cmd must be a string or a non-empty list of strings"),
        ({"cmd": ["a\x00b"]}, "cmd contains a NUL byte"),
        ({"cmd": ["true"], "timeout": 0}, "timeout must be a positive number of seconds"),
        ({"cmd": ["true"], "timeout": "5"}, "timeout must be a positive number of seconds"),
        ({"cmd": ["true"], "timeout": True}, "timeout must be a positive number of seconds"),
        ({"cmd": ["true"], "env": ["A=1"]}, "env must be an object of strings"),
        ({"cmd": ["true"], "env": {"A": 1}}, "env value for A must be a string"),
        ({"cmd": ["true"], "env": {"A=B": "1"}}, "bad env name: 'A=B'"),
        ({"cmd": ["true"], "stdin": 5}, "stdin must be a string"),
        ({"cmd": ["true"], "cwd": 5}, "cwd must be a string"),
    ],
)
def test_bad_requests(root, scratch, data, error):
    res, blobs = run(root, data, scratch)
    assert blobs == []
    assert res["exit"] == -1 and res["error"] == error
    assert res["stdout"] == "" and res["stderr"] == ""


def test_timeout_kills_process_group(root, scratch):
    pidfile, bgfile = root / "pid", root / "bgpid"
    t0 = time.monotonic()
    res, blobs = run(
        root,
        {
            "cmd": f"echo $$ > {pidfile}; sleep 30 & echo $! > {bgfile}; echo started; sleep 30",
            "timeout": 1,
        },
        scratch,
    )
    elapsed = time.monotonic() - t0
    assert elapsed < 4, elapsed
    assert res["error"] == "timed out after 1s"
    assert res["exit"] == -signal.SIGKILL
    assert res["stdout"] == "started\n"
    assert 900 <= res["duration_ms"] < 4000
    assert blobs == []
    pgid = int(pidfile.read_text())
    bg = int(bgfile.read_text())
    time.sleep(0.2)
    assert not alive(pgid) and not alive(bg)


def test_timeout_argv_sleep(root, scratch):
    t0 = time.monotonic()
    res, _ = run(root, {"cmd": ["sleep", "30"], "timeout": 1}, scratch)
    assert time.monotonic() - t0 < 4
    assert res["error"] == "timed out after 1s"
    res, _ = run(root, {"cmd": ["sleep", "30"], "timeout": 0.5}, scratch)
    assert res["error"] == "timed out after 0.5s"


def test_timeout_default_is_600(root, scratch, monkeypatch):
    seen = []
    real = trio.move_on_after

    def spy(seconds, *a, **kw):
        seen.append(seconds)
        return real(seconds, *a, **kw)

    monkeypatch.setattr(execmod.trio, "move_on_after", spy)
    run(root, {"cmd": ["true"]}, scratch)
    assert seen[0] == 600.0 == execmod.DEFAULT_TIMEOUT


def test_output_exactly_64k_inline(root, scratch):
    res, blobs = run(
        root, {"cmd": [PY, "-c", f"import sys; sys.stdout.write('a'*{KIB64})"]}, scratch
    )
    assert blobs == [] and res["stdout"] == "a" * KIB64 and res["stdout_truncated"] is False


def test_output_truncated_with_full_blob(root, scratch):
    code = (
        "import sys; sys.stdout.write(''.join(f'{i:07d}\\n' for i in range(20000)));"
        "sys.stderr.write('E' * 70000)"
    )
    res, blobs = run(root, {"cmd": [PY, "-c", code]}, scratch)
    full_out = "".join(f"{i:07d}\n" for i in range(20000))
    assert res["exit"] == 0
    assert res["stdout_truncated"] is True and res["stderr_truncated"] is True
    assert res["stdout"] == full_out[:KIB64]
    assert res["stderr"] == "E" * KIB64
    names = [n for n, _ in blobs]
    assert names == ["stdout.txt", "stderr.txt"]
    paths = dict(blobs)
    for p in paths.values():
        assert os.path.dirname(p) == str(scratch)
    with open(paths["stdout.txt"]) as f:
        assert f.read() == full_out
    with open(paths["stderr.txt"]) as f:
        assert f.read() == "E" * 70000


def test_truncation_does_not_split_a_character(root, scratch):
    # 65535 ASCII bytes then a 2-byte character straddling the 64 KiB cut
    code = f"import sys; sys.stdout.write('a'*{KIB64 - 1} + 'é' * 10)"
    res, blobs = run(root, {"cmd": [PY, "-c", code]}, scratch)
    assert res["stdout_truncated"] is True
    assert res["stdout"] == "a" * (KIB64 - 1)
    assert [n for n, _ in blobs] == ["stdout.txt"]


def test_non_utf8_output(root, scratch):
    raw = b"ok \xff\xfe bytes\n"
    code = f"import sys; sys.stdout.buffer.write({raw!r})"
    res, blobs = run(root, {"cmd": [PY, "-c", code]}, scratch)
    assert res["stdout_truncated"] is True
    assert res["stdout"] == raw.decode("utf-8", "replace")
    assert "\ufffd" in res["stdout"]
    assert res["stderr_truncated"] is False
    assert [n for n, _ in blobs] == ["stdout.txt"]
    with open(dict(blobs)["stdout.txt"], "rb") as f:
        assert f.read() == raw


def test_max_blob_caps_the_file(root, scratch):
    code = "import sys; sys.stdout.write('z' * 300000)"
    res, blobs = run(root, {"cmd": [PY, "-c", code]}, scratch, max_blob=100_000)
    assert res["stdout_truncated"] is True and res["stdout_blob_truncated"] is True
    assert os.path.getsize(dict(blobs)["stdout.txt"]) == 100_000


def test_background_child_holding_pipes_does_not_hang(root, scratch, monkeypatch):
    monkeypatch.setattr(execmod, "DRAIN_GRACE", 0.5)
    bgfile = root / "bg"
    t0 = time.monotonic()
    res, _ = run(root, {"cmd": f"echo hi; sleep 30 & echo $! > {bgfile}", "timeout": 20}, scratch)
    try:
        assert time.monotonic() - t0 < 5
        assert res["exit"] == 0 and res["stdout"] == "hi\n" and "error" not in res
    finally:
        try:
            os.kill(int(bgfile.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError, FileNotFoundError):
            pass


def test_progress_callback(root, scratch):
    calls: list[tuple[float, str, dict]] = []
    t0 = time.monotonic()

    def on_progress(text, data):
        calls.append((time.monotonic() - t0, text, data))

    code = (
        "import sys, time\n"
        "for i in range(3):\n"
        "    print(f'step {i}', flush=True)\n"
        "    time.sleep(1)\n"
    )
    res, _ = run(
        root, {"cmd": [PY, "-c", code]}, scratch, on_progress=on_progress, progress_every=1
    )
    assert res["exit"] == 0
    # the first after 1 s, then at most one a second
    assert 2 <= len(calls) <= res["duration_ms"] // 1000, calls
    # at most one per progress_every seconds
    for (a, _, _), (b, _, _) in zip(calls, calls[1:], strict=False):
        assert b - a >= 0.9
    first_t, text, data = calls[0]
    assert first_t >= 0.9
    assert text.startswith("running 1s: step ")
    assert set(data) == {"elapsed_ms", "line"}
    assert data["line"].startswith("step ") and text.endswith(data["line"])
    assert [c[2]["elapsed_ms"] for c in calls] == sorted(c[2]["elapsed_ms"] for c in calls)


def test_progress_async_callback_and_failures_ignored(root, scratch):
    calls = []

    async def on_progress(text, data):
        await trio.sleep(0)
        calls.append(text)
        raise RuntimeError("engine hiccup")

    res, _ = run(root, {"cmd": "sleep 1.5"}, scratch, on_progress=on_progress, progress_every=0.5)
    assert res["exit"] == 0 and "error" not in res
    assert 2 <= len(calls) <= res["duration_ms"] // 500
    assert calls[0] == "running 0s"  # no output yet: no line


def test_no_progress_for_a_fast_command(root, scratch):
    calls = []
    run(root, {"cmd": ["true"]}, scratch, on_progress=lambda t, d: calls.append(t))
    assert calls == []


def test_progress_line_is_latest_and_short(root, scratch):
    calls = []
    code = (
        "import sys, time\n"
        "sys.stdout.write('old line\\n'); sys.stdout.flush()\n"
        "time.sleep(0.3)\n"
        "sys.stderr.write('progress 10%\\rprogress 50%\\r' + 'L' * 500 + '\\n'); sys.stderr.flush()\n"
        "time.sleep(1.2)\n"
    )
    run(
        root,
        {"cmd": [PY, "-c", code]},
        scratch,
        on_progress=lambda t, d: calls.append(d["line"]),
        progress_every=0.5,
    )
    assert calls and calls[0].startswith("LLLL") and len(calls[0]) == execmod.PROGRESS_LINE_MAX


def test_cancel_kills_group_and_cleans_scratch(root, scratch):
    pidfile = root / "pid"

    async def main():
        with trio.move_on_after(1):
            await run_exec(
                str(root), {"cmd": f"echo $$ > {pidfile}; sleep 30"}, scratch_dir=str(scratch)
            )
            raise AssertionError("not cancelled")

    t0 = time.monotonic()
    trio.run(main)
    assert time.monotonic() - t0 < 4
    time.sleep(0.2)
    assert not alive(int(pidfile.read_text()))
    assert os.listdir(scratch) == []


def test_summary():
    r = {"exit": 0, "duration_ms": 8123}
    assert summary(r, ["make", "test"]) == "exit 0 in 8.1s: make test"
    assert summary(r, "make test") == "exit 0 in 8.1s: make test"
    assert summary(r, ["echo", "a b"]) == "exit 0 in 8.1s: echo 'a b'"
    r = {"exit": -9, "duration_ms": 1004, "error": "timed out after 1s"}
    assert summary(r, ["sleep", "30"]) == "exit -9 in 1.0s: sleep 30 (timed out after 1s)"
    long = summary({"exit": 1, "duration_ms": 0}, "x" * 200)
    assert len(long) < 100 and long.endswith("…")
    assert summary({"exit": -1, "duration_ms": 0, "error": "cmd is required"}, None) == (
        "exit -1 in 0.0s: ? (cmd is required)"
    )


# ---- the dispatcher the engine calls ---------------------------------------


def test_serve_request_each_cap(root, scratch):
    (root / "big.log").write_bytes(b"L" * (KIB64 + 10))

    async def main():
        out = {}
        out["exec"] = await serve_request(
            "exec", str(root), {"cmd": ["echo", "x"]}, scratch_dir=str(scratch)
        )
        out["write"] = await serve_request(
            "fs:write",
            str(root),
            {"path": "n/t.md", "content": "hi", "mkdir": True},
            scratch_dir=str(scratch),
        )
        out["read"] = await serve_request(
            "fs:read", str(root), {"path": "n/t.md"}, scratch_dir=str(scratch)
        )
        out["big"] = await serve_request(
            "fs:read", str(root), {"path": "big.log"}, scratch_dir=str(scratch)
        )
        out["esc"] = await serve_request(
            "fs:read", str(root), {"path": "../x"}, scratch_dir=str(scratch)
        )
        out["admin"] = await serve_request("admin", str(root), {}, scratch_dir=str(scratch))
        return out

    out = trio.run(main)
    assert out["exec"][0]["stdout"] == "x\n" and out["exec"][1] == []
    assert out["write"] == ({"path": "n/t.md", "written": 2}, [])
    assert out["read"][0]["content"] == "hi" and out["read"][1] == []
    res, blobs = out["big"]
    assert res["blob"] == "big.log" and len(blobs) == 1 and blobs[0][0] == "big.log"
    assert os.path.getsize(blobs[0][1]) == KIB64 + 10
    assert out["esc"] == ({"error": "path escapes the root", "path": "../x"}, [])
    assert out["admin"] == ({"error": "admin requests are not served by this daemon"}, [])


def test_unusable_scratch_dir_is_an_error_result(root, tmp_path):
    res, blobs = run(root, {"cmd": ["true"]}, tmp_path / "missing")
    assert blobs == [] and res["exit"] == -1
    assert res["error"].startswith("scratch directory unusable")
