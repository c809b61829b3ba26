"""The tailcat transport's own logic, in-process, with a fake tailcat program.

The fake (a small Python script) speaks just enough of tailcat's command line:
``genkey --key FILE`` writes a key and prints an address, ``serve ... --json
exec -- CMD`` prints ``{"listenAddr": ...}`` and then behaves as FAKE_TC_MODE
says, and pipe mode (``tailcat <address>``) echoes stdin to stdout.  The real
program is exercised in tests/integration/test_tailcat.py.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import trio

from awp.transport import streams, tailcat, tailcat_listen
from awp.transport.tailcat import TailcatError, validate_address
from awp.wire.address import Address, parse_address


def _addr(seed: int = 1) -> str:
    import cbor2

    wire = {"p": bytes([seed]) * 32, "k": bytes([seed + 1]) * 32, "q": bytes([seed + 2]) * 32,
            "i": 900}
    return "tc" + base64.urlsafe_b64encode(cbor2.dumps(wire)).decode().rstrip("=")


FAKE = textwrap.dedent(r'''
    #!/usr/bin/env python3
    import json, os, sys, time, subprocess
    args = sys.argv[1:]
    marker = os.environ.get("FAKE_TC_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write(" ".join(args) + "\n")
    mode = os.environ.get("FAKE_TC_MODE", "ok")
    ADDR = os.environ["FAKE_TC_ADDR"]
    if args[:1] == ["genkey"]:
        key = args[args.index("--key") + 1]
        with open(key, "w") as f:
            json.dump({"Private": "privkey:00"}, f)
        print(ADDR)
        sys.exit(0)
    if args[:1] == ["serve"]:
        if mode == "fail":
            print("2026/01/01 00:00:00 relay exploded", file=sys.stderr, flush=True)
            sys.exit(3)
        if mode == "hang":
            time.sleep(3600)
        # a grandchild in the same process group, like an exec'd connection
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(json.dumps({"listenAddr": ADDR}), flush=True)
        print("# Server listening", file=sys.stderr, flush=True)
        if mode != "norelay":
            print("2026/01/01 00:00:00 magicsock: derp-900 connected; connGen=1",
                  file=sys.stderr, flush=True)
        time.sleep(3600)
    # pipe mode: echo, or fail like a client that cannot reach its server
    if mode == "dialfail":
        print("2026/01/01 00:00:00 tailcat Ping: context deadline exceeded", file=sys.stderr)
        sys.exit(1)
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        os.write(1, data)
''').lstrip()


@pytest.fixture
def env(monkeypatch):
    """A home, the fake program, and the transport set up against it."""
    root = tempfile.mkdtemp(prefix="awptc", dir="/tmp")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    fake = os.path.join(root, "tailcat")
    with open(fake, "w") as f:
        f.write(FAKE.replace("/usr/bin/env python3", sys.executable))
    os.chmod(fake, 0o755)
    marker = os.path.join(root, "calls")
    monkeypatch.setenv("AWP_TAILCAT_BIN", fake)
    monkeypatch.setenv("FAKE_TC_ADDR", _addr())
    monkeypatch.setenv("FAKE_TC_MARKER", marker)
    monkeypatch.delenv("AWP_TAILCAT_DERPMAP_URL", raising=False)
    monkeypatch.delenv("AWP_TAILCAT_REGION", raising=False)
    monkeypatch.setattr(tailcat_listen, "BACKOFF_START", 0.1)
    monkeypatch.setattr(tailcat, "_binary_cache", {})
    errors: list[str | None] = []
    cfg = tailcat.setup(home, report=errors.append)
    yield {"root": root, "home": home, "fake": fake, "marker": marker, "cfg": cfg,
           "errors": errors}
    tailcat.teardown()
    shutil.rmtree(root, ignore_errors=True)


def _calls(env) -> list[str]:
    try:
        with open(env["marker"]) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- addresses ---------------------------------------------------------------------------


def test_valid_address_passes():
    validate_address(_addr())
    assert parse_address(_addr()).kind == "tailcat"


@pytest.mark.parametrize("bad, why", [
    ("", "expected tc"),
    ("tc" + "a" * 10, "expected tc"),
    ("tc" + "!" * 40, "expected tc"),
    ("xx" + "A" * 40, "expected tc"),
    ("tc" + "A" * 60, "no server key"),  # decodes to zeros: CBOR 0, not a record
    ("tc" + base64.urlsafe_b64encode(b"\xa1\x61p\x41\x00" + b"\x00" * 30).decode().rstrip("="),
     "no server key"),
])
def test_malformed_address_is_refused(bad, why):
    with pytest.raises(TailcatError) as e:
        validate_address(bad)
    assert why in str(e.value)


def test_malformed_address_fails_before_anything_is_spawned(env):
    async def main():
        with pytest.raises(streams.TransportError) as e:
            await streams.dial(Address(kind="tailcat", tailcat="tc" + "A" * 60), timeout=5)
        assert "bad tailcat address" in str(e.value)

    trio.run(main)
    assert _calls(env) == []


def test_listen_on_a_tailcat_address_is_refused(env):
    async def main():
        with pytest.raises(TailcatError, match="takes no address"):
            await streams.listen(Address(kind="tailcat", tailcat=_addr()))

    trio.run(main)


def test_missing_binary_is_a_clear_error(env, monkeypatch):
    monkeypatch.setenv("AWP_TAILCAT_BIN", "/nonexistent/tailcat")
    tailcat.setup(env["home"])

    async def main():
        with pytest.raises(TailcatError, match="tailcat program not found"):
            await streams.dial(Address(kind="tailcat", tailcat=_addr()), timeout=5)

    trio.run(main)


# -- dialing -----------------------------------------------------------------------------


def test_dial_pipes_through_the_child_and_half_closes(env):
    async def main():
        stream = await streams.dial(Address(kind="tailcat", tailcat=_addr()), timeout=5)
        assert streams.peer_description(stream).startswith("tailcat tc")
        pid = stream.child.pid
        await stream.send_all(b"hello over a pipe\n")
        got = b""
        with trio.fail_after(5):
            while len(got) < 18:
                got += await stream.receive_some()
        assert got == b"hello over a pipe\n"
        await stream.send_eof()
        with trio.fail_after(5):
            assert await stream.receive_some() == b""
        await stream.aclose()
        assert stream.child.returncode is not None
        assert not _alive(pid)

    trio.run(main)
    assert _calls(env)[-1] == _addr()  # pipe mode: just the address


def test_dial_failure_carries_tailcats_error(env, monkeypatch):
    monkeypatch.setenv("FAKE_TC_MODE", "dialfail")

    async def main():
        stream = await streams.dial(Address(kind="tailcat", tailcat=_addr()), timeout=5)
        with trio.fail_after(10), pytest.raises(trio.BrokenResourceError) as e:
            await stream.receive_some()
        assert "context deadline exceeded" in str(e.value)
        await stream.aclose()

    trio.run(main)


def test_dial_passes_the_private_derp_map(env, monkeypatch):
    monkeypatch.setenv("AWP_TAILCAT_DERPMAP_URL", "http://127.0.0.1:1/map.json")
    tailcat.setup(env["home"])

    async def main():
        stream = await streams.dial(Address(kind="tailcat", tailcat=_addr()), timeout=5)
        await stream.aclose()

    trio.run(main)
    assert _calls(env)[-1] == f"--derpmap-url http://127.0.0.1:1/map.json {_addr()}"


def test_aclose_kills_a_stuck_child(env):
    async def main():
        stream = await streams.dial(Address(kind="tailcat", tailcat=_addr()), timeout=5)
        pid = stream.child.pid
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.aclose()  # forceful: no grace wait
        assert not _alive(pid)

    trio.run(main)


# -- listening and supervision -------------------------------------------------------------


async def _echo_handler(stream):
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data)
        await stream.send_eof()


def test_listener_reports_the_address_and_bridges_connections(env):
    seen = []

    async def handler(stream):
        seen.append(stream.peer_description)
        await _echo_handler(stream)

    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            with trio.fail_after(15):
                bound = await nursery.start(lst.serve, handler)
            assert bound == Address(kind="tailcat", tailcat=_addr())
            assert lst.bound == bound
            home = env["home"]
            for name in ("tailcat.private.json", "tailcat.json", "tailcat.sock"):
                assert stat.S_IMODE(os.stat(os.path.join(home, name)).st_mode) == 0o600, name
            with open(os.path.join(home, "tailcat.json")) as f:
                assert json.load(f)["address"] == _addr()
            # a connection the way tailcat makes it: the bridge, with stdio as the tunnel
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-I", "-S", os.path.join(home, "tailcat-bridge.py"),
                 lst.sock_path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env={**os.environ, "TAILCAT_PEER_KEY": "nodekey:abcdef0123456789abcdef",
                     "TAILCAT_REMOTE_ADDR": "[fd7a::1]:1234"})
            await proc.stdin.send_all(b"ping through the bridge")
            await proc.stdin.aclose()
            out = b""
            with trio.fail_after(10):
                while chunk := await proc.stdout.receive_some():
                    out += chunk
                assert await proc.wait() == 0
            assert out == b"ping through the bridge"
            assert seen == ["tailcat nodekey:abcdef012345..."]
            await lst.aclose()
            nursery.cancel_scope.cancel()
        assert not os.path.exists(os.path.join(env["home"], "tailcat.sock"))

    trio.run(main)
    calls = _calls(env)
    assert calls[0].startswith("genkey --key ") and calls[0].endswith("--fixed-region")
    assert calls[1].startswith("serve --key ") and " --json " in calls[1]
    assert " exec -- " in calls[1]


def test_killed_child_comes_back_with_the_same_address(env):
    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            with trio.fail_after(15):
                await nursery.start(lst.serve, _echo_handler)
            first = lst.child.pid
            with open(os.path.join(env["home"], "tailcat.pid")) as f:
                assert int(f.read()) == first
            os.kill(first, signal.SIGKILL)
            with trio.fail_after(15):
                while lst.child is None or lst.child.pid == first or lst.restarts < 1:
                    await trio.sleep(0.02)
                while lst.last_error:
                    await trio.sleep(0.02)
            assert lst.address == _addr()
            assert "killed by SIGKILL" in next(e for e in env["errors"] if e)
            assert env["errors"][-1] is None  # cleared once it is back
            await lst.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
    # genkey once; serve twice
    assert [c.split()[0] for c in _calls(env)] == ["genkey", "serve", "serve"]


def test_failing_child_is_retried_with_backoff_and_reported(env, monkeypatch):
    monkeypatch.setenv("FAKE_TC_MODE", "fail")

    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            nursery.start_soon(lst.serve, _echo_handler)
            with trio.fail_after(15):
                while lst.restarts < 3:
                    await trio.sleep(0.02)
            assert lst.last_error == "tailcat exited with status 3: relay exploded"
            assert lst.address == ""
            await lst.aclose()
            nursery.cancel_scope.cancel()

    t0 = time.monotonic()
    trio.run(main)
    # 0.1 + 0.2 s of backoff at least between the three attempts
    assert time.monotonic() - t0 >= 0.3


def test_child_that_prints_no_address_is_restarted(env, monkeypatch):
    monkeypatch.setenv("FAKE_TC_MODE", "hang")
    monkeypatch.setattr(tailcat_listen, "ADDRESS_TIMEOUT", 0.5)

    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            nursery.start_soon(lst.serve, _echo_handler)
            with trio.fail_after(15):
                while lst.restarts < 1:
                    await trio.sleep(0.02)
                pid = lst.child.pid if lst.child else None
            assert "printed no address within 0.5s" in lst.last_error
            await lst.aclose()
            nursery.cancel_scope.cancel()
            if pid:
                assert not _alive(pid)

    trio.run(main)


def test_child_that_never_reaches_its_relay_is_restarted_quietly(env, monkeypatch):
    monkeypatch.setenv("FAKE_TC_MODE", "norelay")
    monkeypatch.setattr(tailcat_listen, "RELAY_TIMEOUT", 0.3)

    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            with trio.fail_after(15):
                await nursery.start(lst.serve, _echo_handler)
                while lst._watch_relay:
                    await trio.sleep(0.02)
            # two quick restarts, then it stops expecting the log line
            assert lst.restarts == tailcat_listen.RELAY_WATCH_GIVE_UP - 1
            assert not any(env["errors"])  # never shown as an error
            assert lst.child is not None and lst.child.alive()
            await lst.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_stopping_the_listener_kills_the_child_and_its_group(env):
    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            with trio.fail_after(15):
                await nursery.start(lst.serve, _echo_handler)
            pid = lst.child.pid
            # the fake started a grandchild in its process group
            with trio.fail_after(5):
                while True:
                    group = [p for p in os.listdir("/proc") if p.isdigit()
                             and _pgid(int(p)) == pid and int(p) != pid]
                    if group:
                        break
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        assert not _alive(pid)
        # SIGKILL to the group is delivered at once, but a busy machine may
        # take a moment to finish the grandchild's exit.
        deadline = time.monotonic() + 5
        while any(_alive(int(p)) for p in group) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(_alive(int(p)) for p in group)
        assert not os.path.exists(os.path.join(env["home"], "tailcat.pid"))

    trio.run(main)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_changed_relay_settings_make_a_new_key(env, monkeypatch):
    home = env["home"]
    with open(os.path.join(home, "tailcat.private.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(home, "tailcat.json"), "w") as f:
        json.dump({"derpmap_url": "http://old/map.json", "region": "", "address": "x"}, f)
    monkeypatch.setenv("AWP_TAILCAT_DERPMAP_URL", "http://new/map.json")
    tailcat.setup(home)

    async def main():
        async with trio.open_nursery() as nursery:
            lst = await streams.listen(Address(kind="tailcat"))
            with trio.fail_after(15):
                await nursery.start(lst.serve, _echo_handler)
            await lst.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert os.path.exists(os.path.join(home, "tailcat.private.json.old"))
    with open(os.path.join(home, "tailcat.json")) as f:
        assert json.load(f)["derpmap_url"] == "http://new/map.json"
    calls = _calls(env)
    assert calls[0].startswith("genkey") and "--derpmap-url http://new/map.json" in calls[0]
    assert "--full-address" in calls[1]  # a private map: peers need no configuration


def test_bridge_socket_moves_out_of_a_long_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    long_home = "/tmp/" + "x" * 120
    path = tailcat.bridge_socket_path(long_home)
    assert len(path.encode()) <= 107 and path.endswith("-tailcat.sock")
    assert tailcat.bridge_socket_path("/tmp/h") == "/tmp/h/tailcat.sock"


def test_bridge_passes_half_closes_both_ways(tmp_path):
    """The bridge on its own: EOF from either side reaches the other."""
    code_path = tmp_path / "bridge.py"
    code_path.write_text(tailcat_listen.BRIDGE_CODE)
    sock_path = str(tmp_path / "s.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(sock_path)
    srv.listen(1)
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(code_path), sock_path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        srv.settimeout(10)
        conn, _ = srv.accept()
        conn.settimeout(10)
        head = conn.recv(8)
        assert head[:6] == b"AWPTC1"
        n = int.from_bytes(head[6:8], "big")
        assert conn.recv(n) == b"- -"
        proc.stdin.write(b"up")
        proc.stdin.close()
        got = b""
        while chunk := conn.recv(100):
            got += chunk
        assert got == b"up"  # ... then EOF: stdin's close became a half-close
        conn.sendall(b"down")
        conn.shutdown(socket.SHUT_WR)
        assert proc.stdout.read() == b"down"
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        srv.close()
