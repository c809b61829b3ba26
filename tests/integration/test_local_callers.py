"""Hostile local surroundings: the caller's directory, bodies on awp.sock, other users.

- A project directory with its own ``awp/`` package must not get its code run
  when an awp command started inside it starts the daemon (or anything else).
- A deeply nested JSON body is a 400 with a clear message, never a 500.
- A user who cannot open another user's socket is told so, and no second
  daemon is started for that home.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time

import pytest
from nodes import wait_for
from test_cli_support import ROOT, cli_root_fixture, daemon_pids, homes_fixture  # noqa: F401

from awp.base import selfcmd
from awp.daemon.settings import Flags, resolve
from awp.localapi.client import ApiFailure, LocalClient


def _evil_project(where) -> tuple[str, str]:
    """A directory holding an ``awp`` package that leaves a marker when imported."""
    project = os.path.join(str(where), "project")
    marker = os.path.join(str(where), "evil-ran")
    os.makedirs(os.path.join(project, "awp"))
    code = f"open({marker!r}, 'a').write('ran\\n')\n"
    for name in ("__init__.py", "__main__.py"):
        with open(os.path.join(project, "awp", name), "w") as f:
            f.write(code)
    return project, marker


def _safe_cli(h, cwd: str, *args: str) -> subprocess.CompletedProcess:
    # -P: the command itself does not import from cwd; the daemon it starts is the test.
    return subprocess.run([sys.executable, "-P", "-m", "awp", *args, "--home", h.path],
                          capture_output=True, text=True, timeout=90, env=h.env, cwd=cwd)


def test_daemon_auto_start_runs_no_code_from_the_callers_directory(homes, tmp_path):
    project, marker = _evil_project(tmp_path)
    h = homes("a")
    r = _safe_cli(h, project, "up", "--json")
    assert r.returncode == 0, r.stdout + r.stderr + h.log()
    assert not os.path.exists(marker), "the daemon imported awp from the caller's directory"
    st = json.loads(r.stdout)
    assert st["address"] == h.address
    pid = st["pid"]
    assert pid in daemon_pids(h.path)
    # The daemon works in its home, not in the directory it was asked for from.
    assert os.readlink(f"/proc/{pid}/cwd") == h.path
    assert _safe_cli(h, project, "status").returncode == 0
    assert not os.path.exists(marker)


def test_isolated_command_runs_this_awp_from_anywhere(tmp_path):
    project, marker = _evil_project(tmp_path)
    for argv in (list(selfcmd.python_argv()),
                 [selfcmd.python(), "-I", "-c", selfcmd.pinned_code(selfcmd.package_dir())]):
        r = subprocess.run([*argv, "version", "--json"], capture_output=True, text=True,
                           timeout=60, cwd=project, env={"PATH": os.environ.get("PATH", "")})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["version"]
        assert not os.path.exists(marker)


def test_editable_install_runs_isolated():
    """This checkout is an editable install: ``python -I -m awp`` must find it."""
    import awp

    if not selfcmd.isolated_finds_us(selfcmd.python()):
        pytest.skip("awp is not installed in this interpreter's site-packages")
    assert selfcmd.python_argv()[1:] == ("-I", "-m", "awp")
    r = subprocess.run([*selfcmd.python_argv(), "version"], capture_output=True, text=True,
                       timeout=60, cwd="/", env={"PATH": os.environ.get("PATH", "")})
    assert r.returncode == 0 and r.stdout.startswith(f"awp {awp.__version__}"), r.stderr


def test_root_is_resolved_against_the_callers_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    start = str(tmp_path / "work")
    s = resolve(str(home), Flags(start_dir=start), {}, env={})
    assert s.root == start
    s = resolve(str(home), Flags(start_dir=start, root="sub/.."), {}, env={})
    assert s.root == start
    s = resolve(str(home), Flags(start_dir=start), {}, env={"AWP_ROOT": "data"})
    assert s.root == os.path.join(start, "data")


def test_relative_paths_in_the_environment_keep_their_meaning(tmp_path, monkeypatch):
    from awp.localapi import daemonctl

    monkeypatch.setenv("AWP_TAILCAT_BIN", "bin/tailcat")
    monkeypatch.setenv("AWP_LISTEN", "tcp:127.0.0.1:1, unix:s/peer.sock,unix:/abs.sock")
    env = daemonctl._child_env(str(tmp_path))
    assert env["AWP_TAILCAT_BIN"] == os.path.join(str(tmp_path), "bin/tailcat")
    assert env["AWP_LISTEN"] == (
        f"tcp:127.0.0.1:1,unix:{tmp_path}/s/peer.sock,unix:/abs.sock")


def test_hook_commands_written_with_either_form_are_recognised():
    import shlex

    from awp.harness import bootstrap

    for argv in (["/venv/bin/python", "-I", "-m", "awp"],
                 ["/venv/bin/python", "-I", "-c", selfcmd.pinned_code("/opt/awp lib")]):
        assert bootstrap.is_our_hook(shlex.join([*argv, "hook", "inbox", "--format", "x"]))


def test_plugin_launcher_runs_no_code_from_the_callers_directory(tmp_path):
    """Hooks and the MCP server start through the plugin's launcher, in the project."""
    from awp.harness import plugin_files

    project, marker = _evil_project(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(selfcmd.python(), bindir / "python3")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    if selfcmd.python_argv()[1:] == ("-I", "-m", "awp"):
        wirings = [list(selfcmd.python_argv()), None]
    else:
        wirings = [None]
    for wired in wirings:
        text = plugin_files.plugin_tree(wired)["bin/awp"][1]
        launcher = tmp_path / "plugin" / "bin" / "awp"
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text(text)
        launcher.chmod(0o755)
        r = subprocess.run([str(launcher), "version", "--json"], capture_output=True, text=True,
                           timeout=60, cwd=project, env=env)
        if wired is None and r.returncode == 127:
            continue  # this python3 cannot import awp without the checkout: nothing to run
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["version"]
        assert not os.path.exists(marker), wired


# ---------------------------------------------------------------- bodies on awp.sock


def _raw_post(sock_path: str, path: str, body: bytes) -> tuple[int, dict]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock_path)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nhost: awp\r\ncontent-type: "
              b"application/json\r\nconnection: close\r\ncontent-length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deeply_nested_body_on_awp_sock_is_a_400(make_node, depth):
    a = make_node("a").start()
    sock = a.client.sock_path
    status, obj = _raw_post(sock, "/v1/send", b"[" * depth + b"]" * depth)
    assert status == 400, obj
    assert obj["code"] == "bad_json"
    assert obj["error"] == "bad JSON body: nested deeper than 64 levels"
    body = {"peer": "x", "parts": [{"k": "data", "data": 1}]}
    inner = body["parts"][0]
    for _ in range(depth if depth < 1000 else 80):
        inner["data"] = [inner["data"]]
    status, obj = _raw_post(sock, "/v1/send", json.dumps(body).encode())
    assert status == 400 and "nested deeper than 64 levels" in obj["error"], obj
    # The daemon is none the worse.
    assert a.api("GET", "/v1/status")["pid"]


def test_body_size_comes_from_limits(make_node):
    a = make_node("a").with_limits(api_body_bytes="1KiB", json_depth=3).start()
    sock = a.client.sock_path
    status, obj = _raw_post(sock, "/v1/send", b" " * 1025)
    assert (status, obj["code"]) == (413, "too_large"), obj
    status, obj = _raw_post(sock, "/v1/send", b"[[[[]]]]")
    assert status == 400 and obj["error"] == "bad JSON body: nested deeper than 3 levels"


# ---------------------------------------------------------------- another user's daemon


def _as_nobody() -> list[str]:
    if os.getuid() != 0:
        pytest.skip("switching users needs root")
    tool = shutil.which("setpriv")
    if tool is None:
        pytest.skip("no setpriv to run a command as another user")
    probe = subprocess.run([tool, "--reuid=65534", "--regid=65534", "--clear-groups",
                            sys.executable, "-P", "-c", "import awp.cli.entry"],
                           capture_output=True, timeout=60, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"user 65534 cannot run this awp: {probe.stderr[-200:]!r}")
    return [tool, "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["peers"], ["up"],
                                  ["send", "bob", "hi"], ["down"],
                                  ["web", "--listen", "127.0.0.1:0"]])
def test_another_users_daemon_is_permission_denied(homes, args):
    prefix = _as_nobody()
    h = homes("a")
    h.ok("up")
    before = daemon_pids(h.path)
    assert len(before) == 1
    os.chmod(os.path.dirname(h.path), 0o755)  # others may look in; the home stays 0700
    sock = os.path.join(h.path, "awp.sock")
    r = subprocess.run([*prefix, sys.executable, "-P", "-m", "awp", *args, "--home", h.path],
                       capture_output=True, text=True, timeout=90, env=h.env, cwd="/")
    assert r.returncode not in (0, 3), r.stdout + r.stderr
    assert f"permission denied on {sock}" in r.stderr, r.stderr  # awp.sock or awp.sock.path
    assert "the daemon belongs to another user" in r.stderr, \
        r.stderr
    assert "not running" not in r.stderr
    assert daemon_pids(h.path) == before  # no second daemon, and the first one untouched


def test_another_users_socket_in_a_readable_home(homes, tmp_path):
    """The home opened to others, the socket itself (0600) still refuses them."""
    prefix = _as_nobody()
    h = homes("a")
    h.ok("up")
    os.chmod(os.path.dirname(h.path), 0o755)
    os.chmod(h.path, 0o755)
    sock = os.path.join(h.path, "awp.sock")
    r = subprocess.run([*prefix, sys.executable, "-P", "-m", "awp", "status", "--home", h.path],
                       capture_output=True, text=True, timeout=90, env=h.env, cwd="/")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == (f"awp status: permission denied on {sock}: the daemon belongs to"
                        " another user (uid 0)\n")


def test_numbers_no_peer_can_read_are_refused_and_the_link_stays_up(homes):
    """``--data '{"a": NaN}'`` went out as ``NaN``: the peer closed on it, and the
    outbox replayed it on every reconnect, so the link never stayed up again."""
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "worker")
    a.ok("up", "--name", "lead")
    a.ok("connect", b.address)
    for data in ('{"a": NaN}', '{"a": [Infinity]}', '{"a": -1e999}'):
        r = a.run("send", "worker", "--data", data, "poison")
        assert r.returncode == 1 and "--data is not valid JSON" in r.stderr, r.stderr
    # the local API itself refuses them, whatever client sent them
    with pytest.raises(ApiFailure) as e, LocalClient(os.path.join(a.path, "awp.sock")) as c:
        c.request("POST", "/v1/send",
                  b'{"peer":"worker","parts":[{"k":"data","data":{"a":1e999}}]}')
    assert (e.value.status, e.value.code) == (400, "bad_json") and "out of range" in str(e.value)
    r = a.ok("send", "worker", "--data", '{"a": 1.5e308}', "fine")
    assert "delivered" in r.stdout, r.stdout
    assert "connected (out)" in a.ok("peers").stdout
    with open(os.path.join(b.path, "daemon.log")) as f:
        assert "bad_frame" not in f.read()
    # a line an older version stored with NaN in it is still shown, not a 500
    key = json.loads(a.ok("peers", "--json").stdout)[0]["key"]
    line = ('{"t":"msg","id":"01M8RGR02DWWHR0Y7Z1XQHH57B","ts":"2026-12-01T09:59:59.821Z",'
            '"th":"thr_legacy1","parts":[{"k":"data","data":{"a":NaN}}]}')
    with sqlite3.connect(os.path.join(a.path, "awp.db"), timeout=10) as con:
        con.execute("INSERT INTO log (peer, dir, t, id, th, ts, at, line) VALUES"
                    " (?, 'out', 'msg', '01M8RGR02DWWHR0Y7Z1XQHH57B', 'thr_legacy1', 0, 0, ?)",
                    (key, line))
    assert "NaN" in a.ok("read", "thr_legacy1", "--json").stdout


def test_a_lone_surrogate_in_a_body_is_replaced_not_a_500(make_node):
    """``{"peer": "\\ud800"}`` reached SQLite as a string no UTF-8 writer takes: a 500
    (found by tests/fuzz/test_fuzz_localapi.py)."""
    a, b = make_node("a").start(), make_node("b").start()
    b.connect(a)
    with pytest.raises(ApiFailure) as e:
        a.api("POST", "/v1/bye", b'{"peer":"\\ud800"}')
    assert e.value.status == 404 and e.value.code == "unknown_peer"
    sent = a.api("POST", "/v1/send", b'{"peer":"%s","parts":[{"k":"text","text":"a\\udc00b"}]}'
                 % b.key.encode())
    got = wait_for(lambda: [m for m in b.inbound() if m["id"] == sent["id"]], 20, "delivered")
    assert "a\ufffdb" in json.dumps(got[0], ensure_ascii=False), got[0]


def test_out_of_range_numbers_and_wrong_types_are_400_not_500(make_node):
    """Each of these was a 500 (found by tests/fuzz/test_fuzz_localapi.py or beside it):
    a count past SQLite's integers, a ttl whose milliseconds are no integer, a bool
    where a name goes."""
    a, b = make_node("a").start(), make_node("b").start()
    b.connect(a)
    a.api("POST", "/v1/board/topic", {"name": "jobs", "read": "open", "post": "open"})
    topic = f"{a.key}/jobs"
    for method, path, body in [
            ("POST", "/v1/board/get", {"topic": topic, "n": 2 ** 64}),
            ("POST", "/v1/board/revoke", {"topic": topic, "peer": True}),
            ("POST", "/v1/grant", {"peer": b.key, "caps": ["fs:read"], "ttl": 1e308}),
            ("POST", "/v1/read", {"n": 1e308}),
            ("GET", "/v1/web/log?after=18446744073709551616", None)]:
        with pytest.raises(ApiFailure) as e:
            a.api(method, path, body)
        assert e.value.status == 400 and e.value.code == "bad_request", (path, e.value)
    with open(a.log_path) as f:
        assert "Traceback" not in f.read()


def test_a_line_an_older_version_queued_with_nan_is_dropped_at_start(make_node):
    """Such a line made every peer close, and the replay sent it first on each
    reconnect: the link never stayed up."""
    a, b = make_node("a").start(), make_node("b").start()
    a.connect(b)
    a.stop()
    line = ('{"t":"msg","id":"01M8RGR02DWWHR0Y7Z1XQHH57C","ts":"2026-12-01T09:59:59.821Z",'
            '"th":"thr_legacy2","parts":[{"k":"data","data":{"a":NaN}}]}')
    with sqlite3.connect(os.path.join(a.home, "awp.db"), timeout=10) as con:
        con.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES"
                    " (?, '01M8RGR02DWWHR0Y7Z1XQHH57C', 'msg', 'thr_legacy2', ?, ?)",
                    (b.key, line, int(time.time() * 1000)))
        con.execute("INSERT INTO outbox (peer, id, t, th, line, created) VALUES"
                    " (?, '01M8RGR02DWWHR0Y7Z1XQHH57D', 'msg', 'thr_legacy2', ?, ?)",
                    (b.key, line.replace("57C", "57D").replace("NaN", '"NaN"'),
                     int(time.time() * 1000)))
    a.start()
    sent = a.send(b.key, "after the upgrade")
    wait_for(lambda: {m["id"] for m in b.inbound()} >= {sent["id"], "01M8RGR02DWWHR0Y7Z1XQHH57D"},
             20, "the readable lines delivered")
    with sqlite3.connect(os.path.join(a.home, "awp.db"), timeout=10) as con:
        assert con.execute("SELECT count(*) FROM outbox WHERE id = '01M8RGR02DWWHR0Y7Z1XQHH57C'"
                           ).fetchone()[0] == 0
    with open(b.log_path) as f:
        assert "bad_frame" not in f.read()
    with open(a.log_path) as f:
        assert "dropped line 01M8RGR02DWWHR0Y7Z1XQHH57C" in f.read()
