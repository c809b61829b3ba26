"""The Quickstart, run through the real ``awp`` executable between two homes.

Daemons start on demand (``AWP_LISTEN`` gives each home a loopback TCP
listener); every step checks the output the docs quote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from nodes import wait_for
from test_cli_support import ROOT, cli_root_fixture, daemon_pids, homes_fixture  # noqa: F401

SENT = re.compile(r"sent ([0-9A-Z]{26}) to (\S+) in (thr_\w+) \((.+)\)")


def up_address(r: subprocess.CompletedProcess, name: str) -> str:
    lines = r.stdout.splitlines()
    assert lines[0] == f"awp is up as {name}", r.stdout
    assert re.fullmatch(r"  key      ed25519:[A-Za-z0-9_-]{43}", lines[1]), r.stdout
    m = re.fullmatch(r"  address  (\S+)  ← hand this to the other agent", lines[2])
    assert m, r.stdout
    addr = m.group(1)
    assert lines[3:] == ["", "share the address with the other agent; they run:",
                         f"  awp connect {addr}"]
    return addr


def test_quickstart_round_trip(homes):
    a, b = homes("a"), homes("b")

    # 1. B comes up and shares its address.
    addr = up_address(b.ok("up", "--name", "worker", "--about", "Test runner for acme/api"),
                      "worker")
    assert addr == b.address
    # Already running: flags are deferred to the next start, output is the same.
    again = b.ok("up", "--name", "worker")
    assert up_address(again, "worker") == addr
    assert "next start" in again.stderr

    # 2. A connects.
    up_address(a.ok("up", "--name", "lead"), "lead")
    r = a.ok("connect", addr)
    assert re.fullmatch(r"connected to worker \(ed25519:[A-Za-z0-9_-]{10}\.\.\.\)\n", r.stdout)
    assert a.ok("connect", addr).stdout == "already connected to worker\n"
    peers = a.ok("peers").stdout.splitlines()
    assert peers[0].split() == ["NAME", "KEY", "STATE", "LINK", "QUEUED", "OPEN", "UNREAD",
                                "GRANTED", "STORED"]
    assert peers[1].startswith("worker") and "connected (out)" in peers[1]
    assert " sealed " in peers[1]  # both ends are ours: the link is sealed end to end
    assert a.ok("alias", "worker", "w").stdout.startswith("w now names worker")

    # 3. A opens a thread with a task.
    r = a.ok("send", "w", "--subject", "Run the integration suite", "--data", '{"repo":"x"}',
             "Run make integration and send me the failures.")
    m = SENT.fullmatch(r.stdout.strip())
    assert m and m.group(2) == "w" and m.group(4) == "delivered", r.stdout
    th = m.group(3)

    # 4. B picks it up, says it is on it, reports and finishes.
    r = b.ok("tail", "--once")
    assert f'lead → you · {th} · "Run the integration suite"' in r.stdout
    assert "  Run make integration and send me the failures." in r.stdout
    assert '  data application/json: {"repo":"x"}' in r.stdout
    assert b.ok("tail", "--once").stdout == ""  # marked read
    r = b.ok("state", th, "working", "--note", "running the suite")
    assert r.stdout == f"state working sent to lead in {th} (delivered)\n"
    r = b.ok("send", "--thread", th, "40 of 42 pass. Two failures in auth_test.go.")
    m = SENT.fullmatch(r.stdout.strip())
    assert m and m.group(2) == "lead" and m.group(3) == th, r.stdout
    b.ok("state", th, "done")

    # A waits for the end: a message or state in the thread ends a wait too,
    # so wait again until the state line says done.
    for _ in range(5):
        r = a.run("wait", "--thread", th, "--state", "done,failed", "--timeout", "30s")
        if f"w is done in {th}" in r.stdout:
            assert r.returncode == 0, r.stdout + r.stderr  # the state came
            break
        assert r.returncode == 3, r.stdout + r.stderr  # something else came first
        assert f"w's state in {th}: working" in r.stdout
    else:
        raise AssertionError("wait never saw the done state")

    # 5. A reads the whole thread, both directions, and closes it.
    r = a.ok("read", th)
    assert f'you → w · {th} · "Run the integration suite"' in r.stdout
    assert f"w is now working in {th}: running the suite" in r.stdout
    assert f"w → you · {th}" in r.stdout and "40 of 42 pass" in r.stdout
    assert f"w is now done in {th}" in r.stdout
    r = a.ok("state", th, "closed")
    assert r.stdout == f"state closed sent to w in {th} (delivered)\n"
    rows = a.ok("threads").stdout.splitlines()
    assert rows[0].split() == ["TH", "PEER", "MINE", "THEIRS", "UNREAD", "SUBJECT"]
    row = next(x for x in rows if x.startswith(th))
    assert re.search(r"closed \d+s\s+done \d+s\s+0\s+Run the integration suite", row), row
    assert a.ok("threads", "--open").stdout.strip() == "no open threads"

    # send/state print a note first when the thread has unread messages.
    a.ok("send", "--thread", th, "one more thing")
    wait_for(lambda: "one more thing" in b.ok("read", th, "--no-mark").stdout, 10, "arrival")
    r = b.ok("send", "--thread", th, "ok")
    lines = r.stdout.splitlines()
    assert re.fullmatch(rf"note: 2 unread from lead in this thread \(\d+s ago\): awp read {th}",
                        lines[0]), r.stdout
    assert SENT.fullmatch(lines[1])

    # --json carries the thread id as th and thread, and acked.
    res = json.loads(a.ok("send", "w", "-s", "json", "hi", "--json").stdout)
    assert res["th"] == res["thread"] and res["acked"] is True and res["status"] == "delivered"
    st = json.loads(a.ok("status", "--json").stdout)
    assert st["name"] == "lead" and st["address"] == a.address
    assert [p["name"] for p in st["peers"]] == ["worker"]
    r = a.ok("status")
    assert re.search(r"unread \d+, \d+ notices, queued 0", r.stdout)
    assert "connected (out)" in r.stdout

    # bye parks the peer; on B it is a notice, counted apart from unread.
    b.ok("tail", "--once")
    res = json.loads(a.ok("bye", "w", "--reason", "all done", "--json").stdout)
    # the answer is the state after: parked and not connected; a bye went out (issue 40.7)
    assert (res["connected"], res["parked"], res["said_bye"]) == (False, True, True), res
    wait_for(lambda: "said bye" in a.ok("peers").stdout, 10, "parked")
    assert a.ok("bye", "w").stdout == "w parked (not connected)\n"
    res = json.loads(a.ok("bye", "w", "--json").stdout)
    assert (res["connected"], res["said_bye"]) == (False, False), res
    wait_for(lambda: "unread 0, 1 notices" in b.ok("status").stdout, 10, "bye notice")
    # A notice never ends a wait, but is printed with whatever does (or the timeout).
    r = b.run("wait", "--timeout", "1s", "--json")
    assert r.returncode == 2
    assert any(x["dir"] == "notice" and "said bye" in x["line"]["text"]
               for x in json.loads(r.stdout)["records"])


def test_wait_times_out_with_exit_2(homes):
    a = homes("a")
    r = a.run("wait", "--timeout", "1s")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == "nothing new after 1s\n"
    assert r.stdout == ""
    r = a.run("wait", "--timeout", "1s", "--json")
    assert r.returncode == 2
    assert json.loads(r.stdout) == {"events": [], "cursor": 0, "records": [], "matched": False,
                                    "state": None, "timed_out": True}


def test_down_queue_up_delivers(homes):
    a, b = homes("a"), homes("b")
    addr = up_address(b.ok("up", "--name", "worker"), "worker")
    a.ok("connect", addr)
    assert b.ok("down").stdout == "awp stopped\n"
    assert b.run("status").returncode == 3
    assert b.ok("down").stdout == "awp is not running\n"
    wait_for(lambda: "connected" not in a.ok("peers").stdout, 15, "A to notice B left")
    r = a.ok("send", "worker", "hello while you were away")
    m = SENT.fullmatch(r.stdout.strip())
    assert m and m.group(4) == "queued until the peer is reachable", r.stdout
    assert re.search(r"queued 1\b", a.ok("status").stdout)

    b.ok("up")
    r = b.run("wait", "--timeout", "60s")
    assert r.returncode == 0, r.stdout + r.stderr + a.log()
    assert "hello while you were away" in r.stdout
    wait_for(lambda: re.search(r"queued 0\b", a.ok("status").stdout), 15, "outbox drained")


def test_concurrent_on_demand_starts_make_one_daemon(homes):
    h = homes("race")
    h.make_identity()  # as `awp up` left it: the race is over who starts the daemon
    env = h.env
    procs = [subprocess.Popen([sys.executable, "-m", "awp", "peers", "--home", h.path],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT) for _ in range(5)]
    results = [(p.wait(60), *p.communicate()) for p in procs]
    for code, out, err in results:
        assert code == 0, f"{out}\n{err}\n{h.log()}"
        assert out == "no peers yet: awp connect ADDRESS\n"
    pid = json.loads(h.ok("status", "--json").stdout)["pid"]
    wait_for(lambda: daemon_pids(h.path) == [pid], 15, "exactly one daemon")


def test_deep_home_uses_the_runtime_dir_socket(homes, cli_root):
    runtime = os.path.join(cli_root, "rt")
    os.mkdir(runtime, 0o700)
    deep = os.path.join(cli_root, *(["d" * 30] * 4), "home")
    assert len(os.path.join(deep, "awp.sock").encode()) > 100
    h = homes(os.path.relpath(deep, cli_root), env={"XDG_RUNTIME_DIR": runtime})
    up_address(h.ok("up", "--name", "deep"), "deep")
    with open(os.path.join(deep, "awp.sock.path")) as f:
        sock = f.read().strip()
    assert os.path.dirname(sock) == runtime and os.path.basename(sock).startswith("awp-")
    assert not os.path.exists(os.path.join(deep, "awp.sock"))
    st = json.loads(h.ok("status", "--json").stdout)
    assert st["socket"] == sock
    assert h.ok("down").stdout == "awp stopped\n"
    assert h.run("status").returncode == 3
    assert not os.path.exists(os.path.join(deep, "awp.sock.path"))


def test_wait_for_a_state_says_by_its_exit_status_whether_the_state_came(homes):
    """``awp wait --state done && next`` must not run next on a mere message: 0 only
    when the state came, 3 when something else came first, 0 for anything with --any."""
    a, b = homes("a"), homes("b")
    addr = up_address(b.ok("up", "--name", "worker"), "worker")
    up_address(a.ok("up", "--name", "lead"), "lead")
    a.ok("connect", addr)
    th = SENT.fullmatch(a.ok("send", "worker", "--subject", "task", "go").stdout.strip()).group(3)
    wait_for(lambda: "go" in b.ok("tail", "--once").stdout, 20, "the task at b")
    b.ok("send", "--thread", th, "a question first")
    r = a.run("wait", "--thread", th, "--state", "done", "--timeout", "30s")
    assert r.returncode == 3 and "a question first" in r.stdout, r.stdout + r.stderr
    b.ok("send", "--thread", th, "another word")
    r = a.run("wait", "--thread", th, "--state", "done", "--any", "--timeout", "30s")
    assert r.returncode == 0 and "another word" in r.stdout, r.stdout + r.stderr
    b.ok("state", th, "done")
    r = a.run("wait", "--thread", th, "--state", "done", "--timeout", "30s")
    assert r.returncode == 0 and f"worker is done in {th}" in r.stdout, r.stdout + r.stderr
