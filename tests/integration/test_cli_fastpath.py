"""The common verbs' fast path says exactly what the typer path says, and stays light.

Each command line runs twice against the same daemons: once as usual (the
fast path takes it) and once with ``AWP_FASTPATH=0`` (typer parses it); the
output, the errors and the exit status must be the same.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from nodes import wait_for
from test_cli_support import ROOT, cli_root_fixture, homes_fixture  # noqa: F401


def both(h, *args: str):
    fast = h.run(*args)
    h.env["AWP_FASTPATH"] = "0"
    try:
        slow = h.run(*args)
    finally:
        del h.env["AWP_FASTPATH"]
    return fast, slow


def _ages(text: str) -> str:
    """Ages ("working 2s", "47s ago", "just now") move on between the two runs, and a
    table's columns widen with them (9s, then 10s)."""
    text = re.sub(r"\b\d+[smhd]\b", "N", text)
    text = text.replace("[just now]", "[N ago]").replace("  just now", "  N ago")
    return re.sub(r" {2,}", "  ", text)


VOLATILE = {"rtt_ms", "last_seen", "last_success", "updated", "my_since", "their_since"}


def _stable(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _stable(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_stable(v) for v in obj]
    return obj


def same(h, *args: str) -> subprocess.CompletedProcess:
    fast, slow = both(h, *args)
    if "--json" in args and fast.returncode == 0:
        assert slow.returncode == 0 and fast.stderr == slow.stderr
        assert _stable(json.loads(fast.stdout)) == _stable(json.loads(slow.stdout)), args
        return fast
    assert (fast.returncode, _ages(fast.stdout), _ages(fast.stderr)) == \
        (slow.returncode, _ages(slow.stdout), _ages(slow.stderr)), args
    return fast


def test_fast_and_typer_paths_agree(homes):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "bee")
    a.ok("connect", b.address)
    r = a.ok("send", "bee", "--subject", "first", "hello", "--data", '{"n":1}')
    th = r.stdout.split(" in ")[1].split()[0]
    b.ok("state", th, "working")
    wait_for(lambda: "working" in a.ok("threads").stdout, 10, "the state")
    a.ok("tail", "--once")  # tail --once marks read: both runs then see nothing unread
    for args in (["peers"], ["peers", "--json"], ["threads"], ["threads", "--json"],
                 ["threads", "--open", "--wide"], ["read", th, "--no-mark"],
                 ["read", "--no-mark", "-n", "1", "--json"], ["read", "bee", "--no-mark"],
                 ["tail", "--once"], ["wait", "--timeout", "0.5s", "--json"],
                 ["wait", "--thread", th, "--state", "done", "--timeout", "0.2s"],
                 ["send"], ["send", "hi there"], ["send", "nobody", "hi"],
                 ["read", "-n", "0"], ["wait", "--state", "done"],
                 ["send", "bee", "x", "--wait-ack", "soon"]):
        same(a, *args)
    # status differs only in how long the daemon has been up
    fast, slow = both(a, "status", "--json")
    assert fast.returncode == slow.returncode == 0
    f, s = json.loads(fast.stdout), json.loads(slow.stdout)
    assert f["key"] == s["key"] and f["peers"] == s["peers"]
    # Not running: exit 3 from both.
    c = homes("c")
    r = same(c, "status")
    assert r.returncode == 3
    # The send itself goes through on the fast path.
    r = a.ok("send", "bee", "--thread", th, "second")
    assert "(delivered)" in r.stdout or "(delivering)" in r.stdout


HEAVY = ("typer", "click", "httpx", "trio", "pydantic", "h11", "nacl", "sqlite3", "subprocess",
         "asyncio", "http", "urllib", "email", "rich", "json", "re", "enum", "shlex")


def _new_modules(home: str, code: str, stdin: str = "") -> list[str]:
    """Top-level modules ``code`` imports, run under ``-S`` so that nothing but awp's
    own imports is loaded (site and an editable install would bring re and enum)."""
    prog = ("import sys\nbefore = set(sys.modules)\nfrom awp.cli.entry import main\n" + code
            + "\nnew = {m.split('.')[0] for m in set(sys.modules) - before}\n"
            f"sys.stderr.write(repr(sorted(new & set({HEAVY!r}))))\n")
    p = subprocess.run([sys.executable, "-S", "-c", prog, home], capture_output=True,
                       text=True, cwd=ROOT, timeout=60, input=stdin,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT})
    return p.stderr.splitlines()[-1:] or [p.stderr]


def test_fast_verbs_and_a_quiet_hook_import_nothing_heavy(homes):
    a = homes("a")
    a.ok("up", "--name", "light")
    assert _new_modules(a.path, (
        "for argv in (['status'], ['peers'], ['threads'], ['read', '--no-mark'],\n"
        "             ['tail', '--once'], ['wait', '--timeout', '0.1s']):\n"
        "    main([*argv, '--home', sys.argv[1]])\n")) == ["[]"]
    # The hook after every tool call, with nothing new: not even re or enum.
    assert _new_modules(a.path, "main(['hook', 'inbox', '--home', sys.argv[1]])\n",
                        stdin='{"hook_event_name": "PostToolUse", "session_id": "s1"}') == ["[]"]


def _ids(text: str) -> str:
    """Post ids, hashes and lease ids differ between two posts of the same text."""
    return re.sub(r"\b[0-9a-f]{6,}(\.\d+)?\b", "ID", _ages(text))


def test_board_commands_agree_on_both_paths(homes):
    a, b = homes("a"), homes("b")
    b.ok("up", "--name", "bee")
    a.ok("up", "--name", "ay")
    a.ok("connect", b.address)
    for args in (["topic", "create", "ops", "--open", "--title", "Ops"],
                 ["topic", "create", "jobs", "--queue", "--lease", "5m"]):
        fast, slow = both(a, *args)
        assert fast.returncode == slow.returncode == 0
        assert "created topic" in fast.stdout and "exists already" in slow.stdout
    fast, slow = both(a, "post", "ops", "deploy", "42")
    assert fast.returncode == slow.returncode == 0
    assert _ids(fast.stdout) == _ids(slow.stdout), (fast.stdout, slow.stdout)
    a.ok("post", "jobs", "--lines", "-", input="one\ntwo\nthree\n")
    for args in (["topics"], ["topics", "--json"], ["get", "ops"], ["get", "ops", "--json"],
                 ["get", "ops", "-n", "0", "--since", "2h"], ["get", "ops", "--since", "soon"],
                 ["get", "ops", "-n", "-1"], ["get", "nosuch/ops"], ["topic", "show", "ops"],
                 ["queue", "jobs"], ["queue", "jobs", "--json"], ["topic", "set", "ops"],
                 ["topic", "grant", "ops", "bee", "--read", "--post"],
                 ["topic", "revoke", "ops"], ["post", "ops"], ["reply", "zzzzzz", "x"],
                 ["complete", "jobs", "nosuch.1"], ["claim", "jobs", "--timeout", "never"]):
        same(a, *args)
    fast, slow = both(a, "claim", "jobs")
    assert fast.returncode == slow.returncode == 0
    assert _ids(fast.stdout) != "" and "claimed" in fast.stdout and "claimed" in slow.stdout
    lease = fast.stdout.split("lease ")[1].split(",")[0]
    fast = a.run("complete", "jobs", lease)
    assert fast.returncode == 0 and "completed" in fast.stdout, fast.stderr
    b.ok("subscribe", "ay/ops", "--once", "--timeout", "10s")
    r = same(b, "get", "ay/ops", "--json")
    assert [p["text"] for p in json.loads(r.stdout)["posts"]] == ["deploy 42", "deploy 42"]


def test_help_is_the_same_on_both_paths(homes):
    a = homes("a")
    a.env["COLUMNS"] = "80"
    for args in (["--help"], ["-h"], ["get", "--help"], ["post", "ops", "-h"],
                 ["topic", "--help"], ["topic", "create", "--help"], ["help", "claim"],
                 ["help"], ["up", "--help"], ["send", "--help"]):
        fast, slow = _both_bare(a, *args)
        assert (fast.returncode, fast.stdout, fast.stderr) == \
            (slow.returncode, slow.stdout, slow.stderr), args
        assert fast.returncode == 0 and fast.stdout.startswith("Usage: awp"), args
    # awp help reads one way on both paths: every command word, --home dropped, any other
    # option judged by click (an unknown one is its usage error).
    for args, same_as in ((["help", "topic", "create"], ["topic", "create", "--help"]),
                          (["help", "--home", a.path, "claim"], ["claim", "--help"]),
                          (["help", f"--home={a.path}"], ["--help"])):
        fast, slow = _both_bare(a, *args)
        want = a.run(*same_as, home=False)
        assert fast.returncode == slow.returncode == 0, args
        assert fast.stdout == slow.stdout == want.stdout, args
    fast, slow = _both_bare(a, "help", "--bogus", "claim")
    assert fast.returncode == slow.returncode == 2, fast.stderr
    assert fast.stderr == slow.stderr and "No such option: --bogus" in fast.stderr


def _both_bare(h, *args: str):
    fast = h.run(*args, home=False)
    h.env["AWP_FASTPATH"] = "0"
    try:
        slow = h.run(*args, home=False)
    finally:
        del h.env["AWP_FASTPATH"]
    return fast, slow


def test_board_commands_and_help_import_nothing_heavy(homes):
    a = homes("a")
    a.ok("up", "--name", "light")
    a.ok("topic", "create", "jobs", "--queue")
    assert _new_modules(a.path, (
        "for argv in (['topics'], ['get', 'jobs'], ['post', 'jobs', 'x'], ['queue', 'jobs'],\n"
        "             ['topic', 'show', 'jobs'], ['claim', 'jobs'], ['claim', 'jobs', '--json'],\n"
        "             ['queue', 'jobs', '--json'],\n"
        "             ['subscribe', 'jobs', '--once', '--timeout', '0.1s']):\n"
        "    try:\n"
        "        main([*argv, '--home', sys.argv[1]])\n"
        "    except SystemExit:\n"
        "        pass\n")) == ["[]"]
    assert _new_modules(a.path, "main(['--help'])\nmain(['get', '--help'])\n") == ["[]"]


def test_the_program_ends_a_fast_command_without_the_interpreters_teardown(homes):
    """``awp`` (scripts/awp, ``python -m awp``) ends a fast-path command or a hook with
    ``os._exit`` once its output is flushed: no teardown (an exit handler shows it), all
    the output and the exit status kept.  A typer command ends the ordinary way."""
    a = homes("a")
    a.ok("up", "--name", "quick")
    prog = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('teardown\\n'))\n"
            "sys.argv = ['awp', *sys.argv[1:]]\n"
            "from awp.cli.entry import program\nprogram()\n")

    def program(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", prog, *args, "--home", a.path],
                              capture_output=True, text=True, cwd=ROOT, timeout=60,
                              env=a.env, stdin=subprocess.DEVNULL)

    r = program("status")
    assert r.returncode == 0 and r.stderr == "" and "quick" in r.stdout, r
    r = program("wait", "--timeout", "0s")
    assert r.returncode == 2 and "teardown" not in r.stderr, r
    r = program("hook", "inbox")
    assert r.returncode == 0 and r.stderr == "", r
    r = program("status", "--json")
    assert json.loads(r.stdout)["name"] == "quick"  # buffered output all there
    r = program("peers", "--bogus")  # not the fast path's: typer's usage error, typer's exit
    assert r.returncode == 2 and "teardown" in r.stderr, r
    # The daemon runs on the fast path too, and ends the ordinary way (its run is
    # replaced by one that returns at once: the exit is what is tested).
    daemon = prog.replace("from awp.cli.entry", "import awp.daemon.app as d\n"
                          "d.run = lambda home, flags: 3\nfrom awp.cli.entry")
    r = subprocess.run([sys.executable, "-c", daemon, "--home", a.path, "daemon"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60, env=a.env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 3 and r.stderr == "teardown\n", r
