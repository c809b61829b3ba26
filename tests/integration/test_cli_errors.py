"""Error paths, exit codes and argument handling of the real ``awp`` executable.

Usage errors exit 2; other errors print one line ``awp <cmd>: <reason>`` on
stderr and exit 1; ``status`` without a daemon exits 3.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

from nodes import wait_for
from test_cli_support import ROOT, cli_root_fixture, daemon_pids, homes_fixture  # noqa: F401

from awp.wire.b64 import b64url
from awp.wire.keys import KEY_PREFIX, Identity


def one_error_line(r: subprocess.CompletedProcess, cmd: str, code: int = 1) -> str:
    assert r.returncode == code, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"awp {cmd}: "), r.stderr
    return lines[0]


def test_usage_errors_exit_2(homes):
    h = homes("h", identity=False)  # nothing may make the home
    r = h.run("send", "--bogus", "x")
    assert r.returncode == 2 and "No such option: --bogus" in r.stderr
    r = h.run("alias", "onlyone")
    assert r.returncode == 2 and "Missing argument" in r.stderr
    r = h.run("state", "a", "b", "c", "d")
    assert r.returncode == 2
    r = h.run("read", "-n", "many")
    assert r.returncode == 2
    r = h.run("nosuchcommand", home=False)
    assert r.returncode == 2
    assert not os.path.exists(h.path), "usage errors must not start a daemon"


def test_errors_before_the_daemon_is_needed(homes, cli_root):
    h = homes("h", identity=False)  # nothing may make the home
    assert one_error_line(h.run("send", "--thread", "", "x"), "send") == \
        "awp send: the thread id is empty"
    assert "name a peer" in one_error_line(h.run("send"), "send")
    r = h.run("send", "hi there")
    assert r.returncode == 2
    assert one_error_line(r, "send", 2) == (
        "awp send: only one argument ('hi there'), taken as the peer: name the peer,"
        " then the text (awp send PEER 'hi there')")
    r = h.run("send", "peer", "x", "--file", cli_root)
    assert one_error_line(r, "send").startswith(f"awp send: --file {cli_root} is a directory")
    r = h.run("send", "peer", "--code", "missing.py", "x", cwd=cli_root)
    assert one_error_line(r, "send") == "awp send: --code missing.py: no such file"
    assert "--data is not valid JSON" in one_error_line(
        h.run("send", "peer", "--data", "{nope"), "send")
    assert "--wait-ack" in one_error_line(h.run("send", "p", "x", "--wait-ack", "soon"), "send",
                                          code=2)  # a malformed value: a usage error
    assert one_error_line(h.run("wait", "--state", "done"), "wait") == \
        "awp wait: --state needs --thread"
    assert not os.path.exists(h.path)


def test_status_without_daemon_exits_3(homes):
    h = homes("h", identity=False)  # nothing may make the home
    r = h.run("status")
    assert r.returncode == 3
    assert r.stderr == "awp status: daemon not running (start it with awp up)\n"
    assert not os.path.exists(h.path), "status never starts the daemon"
    r = h.run("down")
    assert r.returncode == 0 and r.stdout == "awp is not running\n"


def test_stale_socket_and_pid_do_not_confuse_status_or_start(homes):
    h = homes("h")
    os.makedirs(h.path, mode=0o700)
    # A socket file nobody listens on (a daemon killed with -9) ...
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(h.path, "awp.sock"))
    s.close()
    # ... and the pid of a process that is gone.
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with open(os.path.join(h.path, "daemon.pid"), "w") as f:
        f.write(f"{p.pid}\n")
    r = h.run("status")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr == "awp status: daemon not running (start it with awp up)\n"
    assert h.run("down").stdout == "awp is not running\n"
    # The on-demand starter copes with both.
    assert h.ok("peers").stdout == "no peers yet: awp connect ADDRESS\n"
    st = json.loads(h.ok("status", "--json").stdout)
    assert st["pid"] != p.pid
    assert h.ok("down").stdout == "awp stopped\n"


def test_start_failure_shows_the_log(homes):
    h = homes("h")
    os.makedirs(h.path, mode=0o700)
    with open(os.path.join(h.path, "config.json"), "w") as f:
        f.write("{not json")
    r = h.run("peers")
    assert r.returncode == 1
    first, *rest = r.stderr.splitlines()
    assert first.startswith("awp peers: the awp daemon exited with status 1")
    assert any("config.json" in x for x in rest), r.stderr


def test_unknown_peer_points_at_awp_peers(homes):
    h = homes("h")
    line = one_error_line(h.run("send", "nobody", "hi"), "send")
    assert "unknown peer 'nobody'" in line and "awp peers" in line
    assert "tcp:" not in line and "tailcat" not in line
    # Meant as addresses: say how to write them.
    line = one_error_line(h.run("send", "127.0.0.1:7401", "hi"), "send")
    assert line.endswith("to reach an address, write tcp:127.0.0.1:7401"), line
    line = one_error_line(h.run("connect", "tc" + "A" * 30), "connect")
    assert "tailcat address, it is cut short (32 characters)" in line, line
    line = one_error_line(h.run("read", "nobody"), "read")
    assert "awp peers" in line
    line = one_error_line(h.run("state", "thr_nothere1", "done"), "state")
    assert "unknown thread" in line and "start it" not in line
    # Every command that takes a thread says the same of an id nobody used (it used to
    # read as an empty thread, and wait used to wait for it).
    for args in (["read", "thr_nothere1"], ["wait", "--thread", "thr_nothere1", "--timeout", "1m"],
                 ["private", "thr_nothere1"], ["tail", "--once", "-t", "thr_nothere1"]):
        line = one_error_line(h.run(*args), args[0])
        assert line == f"awp {args[0]}: unknown thread 'thr_nothere1' (see awp threads)", line
    line = one_error_line(h.run("send", "--thread", "thr_nothere1", "x"), "send")
    assert line.endswith("name the peer to start it")
    h.ok("down")


def identity_with_dash_key() -> dict:
    """A key whose prefix starts with "-" then a digit.

    "-sEESZ" is also "-s EESZ" (an attached --subject): a letter after the
    dash may be a short flag, and then the flag rightly wins.
    """
    while True:
        ident = Identity.generate()
        body = ident.key[len(KEY_PREFIX):]
        if body[0] == "-" and body[1].isdigit():
            return {"key": ident.key, "seed": b64url(ident.seed)}


def test_key_prefix_starting_with_dash_is_a_peer(homes):
    a, b = homes("a"), homes("b")
    os.makedirs(b.path, mode=0o700)
    ident = identity_with_dash_key()
    with open(os.path.join(b.path, "identity.json"), "w") as f:
        json.dump(ident, f)
    os.chmod(os.path.join(b.path, "identity.json"), 0o600)
    b.ok("up", "--name", "dashy")
    a.ok("connect", b.address)
    prefix = ident["key"][len(KEY_PREFIX):][:6]
    assert prefix.startswith("-")

    r = a.ok("send", prefix, "hello", "--subject", "dash test")
    m = re.fullmatch(r"sent \S+ to dashy in (thr_\w+) \(delivered\)\n", r.stdout)
    assert m, r.stdout
    th = m.group(1)
    # Flags around the prefix still count, before and after it.
    r = a.ok("send", "--json", prefix, "-t", th, "second")
    assert json.loads(r.stdout)["th"] == th
    r = a.ok("state", prefix, th, "waiting", "-n", "need input")
    assert r.stdout == f"state waiting sent to dashy in {th} (delivered)\n"
    assert "second" in a.ok("read", prefix).stdout
    assert th in a.ok("threads", "-p", prefix).stdout
    assert "dashy" in a.ok("alias", prefix, "d").stdout
    r = a.run("wait", "-p", prefix, "--timeout", "1s")
    assert r.returncode == 2 and r.stderr == "nothing new after 1s\n"
    r = a.ok("send", "--to", prefix, "third")
    assert "to d in" in r.stdout
    assert a.ok("bye", prefix).stdout == "said bye to d\n"


def test_relative_code_path_is_read_from_cwd(homes, cli_root):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "coder")
    a.ok("connect", b.address)
    with open(os.path.join(cli_root, "fix.diff"), "w") as f:
        f.write("-old\n+new\n")
    a.ok("send", "--to", "coder", "--code", "fix.diff", "patch attached", cwd=cli_root)
    wait_for(lambda: "+new" in b.ok("read", "--no-mark").stdout, 10, "the patch")
    rec = json.loads(b.ok("read", "--json").stdout)["records"][-1]
    assert rec["line"]["parts"] == [
        {"k": "text", "text": "patch attached"},
        {"k": "code", "lang": "diff", "text": "-old\n+new\n"},
    ]
    r = b.ok("read")
    assert "  ```diff\n  -old\n  +new\n  ```" in r.stdout


def test_stdin_text_and_help_and_version(homes):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "reader")
    a.ok("connect", b.address)
    a.ok("send", "reader", "-", input="from stdin\nsecond line\n")
    wait_for(lambda: "second line" in b.ok("read", "--no-mark").stdout, 10, "stdin text")
    assert "  from stdin\n  second line" in b.ok("read").stdout

    assert a.ok("version", home=False).stdout == "awp 0.5.0 (protocol v0)\n"
    assert a.ok("help", "send", home=False).stdout == a.ok("send", "--help", home=False).stdout
    root = subprocess.run([sys.executable, "-m", "awp", "help"], capture_output=True, text=True,
                          cwd=ROOT, env=a.env)
    assert root.returncode == 0
    assert root.stdout == subprocess.run([sys.executable, "-m", "awp", "--help"],
                                         capture_output=True, text=True, cwd=ROOT,
                                         env=a.env).stdout
    for cmd in ("up", "listen", "connect", "address", "status", "down", "send", "state",
                "tail", "wait", "read", "threads", "peers", "alias", "bye"):
        out = a.ok("help", cmd, home=False).stdout
        assert "Example" in out, cmd
        assert "--home" in out, cmd


def test_listen_streams_ndjson(homes):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "ears")
    a.ok("connect", b.address)
    proc = subprocess.Popen([sys.executable, "-m", "awp", "listen", "--home", b.path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=b.env, cwd=ROOT)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "listening" and first["name"] == "ears"
        assert first["address"] == b.address and first["key"].startswith(KEY_PREFIX)
        a.ok("send", "ears", "streamed")
        rec = json.loads(proc.stdout.readline())
        assert rec["dir"] == "in" and rec["line"]["parts"][0]["text"] == "streamed"
    finally:
        proc.kill()
        proc.wait(10)
    r = b.ok("address")
    assert r.stdout == b.address + "\n"


def test_connecting_to_something_that_is_not_awp_says_so(homes):
    """A web server (or anything else) answers our hello with a line that is not AWP."""
    import socket
    import threading

    h = homes("h")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        line = one_error_line(h.run("connect", f"tcp:127.0.0.1:{port}", "--timeout", "20s"),
                              "connect")
    finally:
        srv.close()
    assert "not an AWP peer" in line, line
    assert "is not a JSON object" in line  # still says what it got


def test_state_words_are_case_folded(homes):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "bee")
    a.ok("connect", b.address)
    r = a.ok("send", "bee", "start")
    th = r.stdout.split(" in ")[1].split()[0]
    assert a.ok("state", th, "DONE").stdout.startswith("state done sent to bee")
    # The reference's --json names: read events[].type/.msg, threads[].their_state,
    # peers[].connected.
    events = json.loads(b.ok("read", th, "--json").stdout)["events"]
    states = [e for e in events if e["type"] == "state"]
    assert states and states[-1]["msg"]["state"] == "done", events
    (t,) = json.loads(b.ok("threads", "--json").stdout)
    assert t["their_state"] == "done" and t["th"] == th
    (p,) = json.loads(a.ok("peers", "--json").stdout)
    assert p["connected"] is True


def test_endless_inputs_are_refused_not_read_whole(homes):
    """``--code /dev/zero`` read until memory ran out; a part travels in one line."""
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "coder")
    a.ok("connect", b.address)
    for args, why in [(("--code", "/dev/zero", "hi"), "--code /dev/zero: over 1 MiB"),
                      (("--data", "@/dev/zero", "hi"), "--data @/dev/zero: over 1 MiB")]:
        r = a.run("send", "coder", *args, timeout=60)
        assert why in one_error_line(r, "send"), r.stderr
    r = a.run("send", "coder", "-", input="x" * (1024 * 1024 + 1), timeout=60)
    assert "stdin is over 1 MiB" in one_error_line(r, "send")
    a.ok("topic", "create", "jobs", "--read", "open", "--post", "open")
    r = a.run("post", "jobs", "--lines", "/dev/zero", timeout=60)
    assert "line 1 is over 64 KiB" in one_error_line(r, "post")
    # a file of many lines is read as it is sent, and every line becomes a post
    lines = os.path.join(a.path, "lines.txt")
    with open(lines, "w") as f:
        f.write("".join(f"job {i}\r\n" if i % 2 else f"job {i}\n" for i in range(2500)))
        f.write("\n  \nlast")
    r = a.ok("post", "jobs", "--lines", lines)
    assert r.stdout.startswith("posted 2501 of 2501"), r.stdout


def test_a_home_without_an_identity_starts_nothing_but_up(homes):
    """A mistyped AWP_HOME used to make a new identity and a daemon retrying tailcat
    forever behind "unknown peer": now every command but up says so and starts nothing."""
    h = homes("typo", identity=False)
    h.env["AWP_HOME"] = h.path
    for args in (["send", "bob", "hi"], ["peers"], ["threads"], ["connect", "tcp:127.0.0.1:9"]):
        r = h.run(*args, home=False)
        line = one_error_line(r, args[0])
        assert line == (f"awp {args[0]}: no awp identity in {h.path} (AWP_HOME={h.path}):"
                        " nothing was started. Check the home, or run `awp up` to create an"
                        " identity there"), line
    assert not os.path.exists(h.path) and daemon_pids(h.path) == []
    assert h.run("status", home=False).returncode == 3  # not running, as before
    # awp up is the way in: it makes the identity, and then the rest work
    h.ok("up", "--no-tailcat", home=False)
    assert os.path.exists(os.path.join(h.path, "identity.json"))
    assert h.ok("peers", home=False).stdout == "no peers yet: awp connect ADDRESS\n"
    h.ok("down", home=False)
