"""``awp work``: real daemons, a real command, real kill -9.

alice owns a queue; bob (and carol) run ``awp work`` on it with a small
Python script as the command.  Each item must end done exactly once, with
one result reply carrying the command's stdout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from nodes import wait_for
from test_board_cli import subscribed
from test_cli_support import ROOT, cli_root_fixture, homes_fixture  # noqa: F401

from awp.localapi.client import LocalClient

RESULT_MIME = "application/vnd.awp.work+json"


def script(tmp_path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def worker(home, *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "awp", "work", "--home", home.path, *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=home.env, cwd=ROOT)


def queue(home, topic: str) -> dict[str, dict]:
    res = json.loads(home.ok("queue", topic, "--json").stdout)
    return {e["item"]["hash"]: e for e in res["items"]}


def results(home, topic: str) -> dict[str, list[dict]]:
    """Result replies (their data part) by the item they answer."""
    out: dict[str, list[dict]] = {}
    res = json.loads(home.ok("get", topic, "-n", "0", "--json").stdout)
    for p in res["posts"]:
        for part in p.get("parts", []):
            if part.get("k") == "data" and part.get("mime") == RESULT_MIME:
                out.setdefault(p["parent"], []).append({**part["data"], "text": p["text"]})
    return out


def setup(homes, *workers: str, lease: str = "1m", attempts: str = "3",
          limits: dict | None = None):
    """alice owns the queue ``jobs`` (her config.json holding ``limits``); each worker
    is up, connected to her, granted and subscribed."""
    a = homes("a")
    if limits:
        os.makedirs(a.path, mode=0o700, exist_ok=True)
        with open(os.path.join(a.path, "config.json"), "w") as f:
            json.dump({"limits": limits}, f)
    a.ok("up", "--name", "alice")
    a.ok("topic", "create", "jobs", "--queue", "--lease", lease, "--attempts", attempts,
         "--rate", "6000")
    ws = []
    for name in workers:
        w = homes(name)
        w.ok("up", "--name", name)
        w.ok("connect", a.address)
        a.ok("topic", "grant", "jobs", name)
        subscribed(w, "alice/jobs")
        ws.append(w)
    return a, ws


def posted_hash(r) -> str:
    return json.loads(r.stdout)["post"]["hash"]


def test_work_runs_the_command_and_replies_with_its_output(homes, tmp_path):
    a, (b,) = setup(homes, "bob")
    job = script(tmp_path, """\
        import os, sys
        text = sys.stdin.read()
        files = sorted(os.listdir(os.environ["AWP_ITEM_DIR"]))
        if "fail" in text:
            print("something broke", file=sys.stderr)
            sys.exit(3)
        print(f"{text.upper()} topic={os.environ['AWP_TOPIC'].split('/')[1]}"
              f" item={os.environ['AWP_ITEM'][:6]} by={os.environ['AWP_POSTED_BY'][:12]}"
              f" lease={bool(os.environ['AWP_LEASE'])} files={files}")
        """)
    note = tmp_path / "notes.txt"
    note.write_text("hello")
    ok = posted_hash(a.ok("post", "jobs", "say hi", "--file", str(note), "--json"))
    bad = posted_hash(a.ok("post", "jobs", "please fail", "--json"))
    p = worker(b, "alice/jobs", "--max-items", "2", "--concurrency", "2", "--", sys.executable,
               job)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    key = json.loads(a.ok("status", "--json").stdout)["key"]

    got = results(a, "jobs")
    assert [r["result"] for r in got[ok]] == ["done"]
    assert got[ok][0]["text"].startswith(
        f"SAY HI topic=jobs item={ok[:6]} by={key[:12]} lease=True files=['notes.txt']")
    assert [(r["result"], r["exit"]) for r in got[bad]] == [("failed", 3)]
    assert "exit status 3" in got[bad][0]["text"] and "something broke" in got[bad][0]["text"]
    q = queue(a, "jobs")
    assert q[ok]["status"] == "done"
    assert q[bad]["status"] == "open" and q[bad]["attempts"] == 1
    assert f"done {ok[:10]}" in out and f"failed {bad[:10]}" in out

    # awp queue shows who worked it; the owner adds the strikes its arbiter counts
    workers = a.ok("queue", "jobs").stdout.split("\n\n")[1].splitlines()
    assert workers[0].split() == ["WORKER", "HOLDS", "SINCE", "RENEWALS", "DONE", "FAILED",
                                  "EXPIRED", "STRIKES"]
    assert workers[1].split() == ["bob", "-", "-", "0", "1", "1", "0", "1"]
    # bob's agent, about to stop, hears that an item still waits on the queue it worked
    hook = b.run("hook", "stop", "--format", "text", input="{}")
    assert "alice/jobs: 1 open" in hook.stdout and "awp_claim topic=alice/jobs" in hook.stdout
    assert a.run("hook", "stop", "--format", "text", input="{}").stdout == ""  # never worked


def test_a_long_job_outlives_its_lease_and_once_finds_nothing(homes, tmp_path):
    a, (b,) = setup(homes, "bob", lease="2s")
    job = script(tmp_path, """\
        import time
        time.sleep(6)
        print("slow but done")
        """)
    h = posted_hash(a.ok("post", "jobs", "take your time", "--json"))
    p = worker(b, "alice/jobs", "--once", "--", sys.executable, job)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    assert [r["result"] for r in results(a, "jobs")[h]] == ["done"]
    q = queue(a, "jobs")[h]
    assert q["status"] == "done" and q["attempts"] == 0  # never expired while it ran
    r = subprocess.run([sys.executable, "-m", "awp", "work", "--home", b.path, "alice/jobs",
                        "--once", "--", "true"], capture_output=True, text=True, env=b.env,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "no open item" in r.stderr


def test_a_worker_killed_mid_item_gives_it_back_and_it_is_done_once(homes, tmp_path):
    """kill -9 of the worker (its daemon lives on): renewals stop, the lease runs
    out, the item returns and another worker does it; one result reply in all."""
    a, (b, c) = setup(homes, "bob", "carol", lease="3s")
    marker = tmp_path / "started"
    job = script(tmp_path, f"""\
        import os, sys, time
        open({str(marker)!r}, "a").write(os.environ["AWP_LEASE"] + "\\n")
        if os.environ.get("SLOW"):
            time.sleep(600)
        print("done by", os.environ.get("WHO"))
        """)
    h = posted_hash(a.ok("post", "jobs", "the item", "--json"))
    b.env.update(SLOW="1", WHO="bob")
    pb = worker(b, "alice/jobs", "--", sys.executable, job)
    wait_for(lambda: marker.exists() and marker.read_text(), 60, "bob's command started")
    first = marker.read_text().split()[0]
    os.kill(pb.pid, signal.SIGKILL)
    pb.wait()
    c.env.update(WHO="carol")
    pc = worker(c, "alice/jobs", "--max-items", "1", "--", sys.executable, job)
    out, err = pc.communicate(timeout=90)
    assert pc.returncode == 0, err
    leases = marker.read_text().split()
    assert leases[0] == first and len(leases) == 2 and leases[1] != first
    got = results(a, "jobs")[h]
    assert len(got) == 1 and got[0]["text"].startswith("done by carol\n")
    q = queue(a, "jobs")[h]
    assert q["status"] == "done" and q["attempts"] == 1  # bob's expired lease cost one


def test_sigterm_releases_what_the_worker_holds(homes, tmp_path):
    a, (b,) = setup(homes, "bob")
    marker = tmp_path / "started"
    job = script(tmp_path, f"""\
        import time
        open({str(marker)!r}, "w").write("x")
        time.sleep(600)
        """)
    h = posted_hash(a.ok("post", "jobs", "long", "--json"))
    p = worker(b, "alice/jobs", "--grace", "1s", "--", sys.executable, job)
    wait_for(marker.exists, 60, "the command started")
    wait_for(lambda: queue(a, "jobs")[h]["status"] == "claimed", 30, "claimed at alice")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert f"released {h[:10]}" in out
    wait_for(lambda: queue(a, "jobs")[h]["status"] == "open", 30, "released at alice")
    assert queue(a, "jobs")[h]["attempts"] == 0  # a release costs no attempt


def test_a_result_reply_is_never_evidence_the_item_is_done(homes, tmp_path):
    """Issue 40.2, laundered results: bob, a granted holder, replies to his item with a
    "done" result part and lets the lease go without completing. Only the arbiter's
    ``done`` record for a lease ends an item, so carol's worker runs the command for it
    (and for the item a stranger "answered") and completes both itself."""
    a, (b, c, d) = setup(homes, "bob", "carol", "dave", lease="2s")
    marker = tmp_path / "ran"
    job = script(tmp_path, f"""\
        open({str(marker)!r}, "a").write("ran\\n")
        print("worked")
        """)
    laundered = posted_hash(a.ok("post", "jobs", "laundered", "--json"))
    with LocalClient.for_home(b.path, 60) as cl:
        got = cl.post("/v1/board/claim", {"topic": "alice/jobs"})
        assert got["item"]["hash"] == laundered
        cl.post("/v1/board/post", {"parent": laundered, "parts": [
            {"k": "text", "text": "bob's answer"},
            {"k": "data", "mime": RESULT_MIME, "data": {"result": "done", "lease": got["lease"]}}]})
        cl.post("/v1/board/lease", {"topic": "alice/jobs", "op": "release",
                                    "lease": got["lease"]})
    wait_for(lambda: queue(a, "jobs")[laundered]["status"] == "open", 30, "bob's release")
    fake = posted_hash(a.ok("post", "jobs", "not done", "--json"))
    subscribed(d, "alice/jobs")
    with LocalClient.for_home(d.path, 60) as cl:
        cl.post("/v1/board/post", {"parent": fake, "parts": [
            {"k": "text", "text": "trust me"},
            {"k": "data", "mime": RESULT_MIME, "data": {"result": "done"}}]})
    wait_for(lambda: len(results(c, "alice/jobs").get(laundered, [])) == 1, 30,
             "bob's reply at carol")
    p = worker(c, "alice/jobs", "--max-items", "2", "--", sys.executable, job)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    assert marker.read_text() == "ran\nran\n"  # both items ran: a reply proved nothing
    q = queue(a, "jobs")
    assert q[laundered]["status"] == "done" and q[fake]["status"] == "done"
    got = results(a, "jobs")
    assert [r["text"].split("\n")[0] for r in got[laundered]] == ["bob's answer", "worked"]
    assert "without running" not in out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


ESCAPEE = """\
    import os, subprocess, sys, time
    # the command's own child, in a session of its own (out of the command's group)
    kid = subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(600)"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open({pids!r}, "a").write(f"{{os.getpid()}} {{kid.pid}}\\n")
    time.sleep(600)
    """


def test_a_timeout_ends_the_command_and_the_child_it_setsid(homes, tmp_path):
    """--timeout: the command and its setsid child are gone, the item failed, the item's
    directory and the temp folder empty."""
    a, (b,) = setup(homes, "bob")
    pids = tmp_path / "pids"
    job = script(tmp_path, ESCAPEE.format(pids=str(pids)))
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    b.env["TMPDIR"] = str(tmp)
    h = posted_hash(a.ok("post", "jobs", "hang", "--json"))
    p = worker(b, "alice/jobs", "--once", "--timeout", "3s", "--workdir", str(work), "--",
               sys.executable, job)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    cmd, kid = map(int, pids.read_text().split())
    assert not _alive(cmd) and not _alive(kid)
    assert [r["result"] for r in results(a, "jobs")[h]] == ["failed"]
    assert "timed out after 3s" in out
    assert os.listdir(work) == [] and os.listdir(tmp) == []


def test_sigkill_of_the_worker_ends_the_command_and_its_setsid_child(homes, tmp_path):
    a, (b,) = setup(homes, "bob")
    pids = tmp_path / "pids"
    job = script(tmp_path, ESCAPEE.format(pids=str(pids)))
    work = tmp_path / "work"
    work.mkdir()
    posted_hash(a.ok("post", "jobs", "hang", "--json"))
    p = worker(b, "alice/jobs", "--workdir", str(work), "--", sys.executable, job)
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60,
             "the command and its child started")
    cmd, kid = map(int, pids.read_text().split())
    assert _alive(cmd) and _alive(kid)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    wait_for(lambda: not _alive(cmd) and not _alive(kid), 15, "the command and its child gone")
    wait_for(lambda: os.listdir(work) == [], 15, "the item's directory removed")


def test_output_is_bounded_by_the_topic_and_binary_kept_exactly(homes, tmp_path):
    """With posts of 16 KiB: 50 MB of text stdout is cut to what fits (a note says so), 4 MB
    of stderr costs nothing on disk, binary stdout comes back byte for byte as a file part,
    and nothing stays in the temp folder; the spool never grows past the post's size."""
    import base64

    a, (b,) = setup(homes, "bob")
    a.ok("topic", "set", "jobs", "--max-post", "16KiB")
    spooled = tmp_path / "spooled"
    job = script(tmp_path, f"""\
        import os, stat, sys
        what = sys.stdin.read()
        if "big" in what:
            sys.stderr.buffer.write(b"e" * 4_000_000)
            for _ in range(50):
                sys.stdout.buffer.write(b"x" * 1_000_000)
            sys.stdout.flush()
            # the largest file this command and the processes above it hold open now
            # (the spool is one of them, unlinked): the topic's size, not the output's
            biggest, pid = 0, os.getpid()
            for _ in range(3):
                for fd in os.listdir(f"/proc/{{pid}}/fd"):
                    try:
                        st = os.stat(f"/proc/{{pid}}/fd/{{fd}}")
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        biggest = max(biggest, st.st_size)
                with open(f"/proc/{{pid}}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
            open({str(spooled)!r}, "w").write(str(biggest))
        else:
            sys.stdout.buffer.write(bytes(range(256)) * 8)
        """)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    b.env["TMPDIR"] = str(tmp)
    big = posted_hash(a.ok("post", "jobs", "big", "--json"))
    binary = posted_hash(a.ok("post", "jobs", "binary", "--json"))
    p = worker(b, "alice/jobs", "--max-items", "2", "--", sys.executable, job)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert os.listdir(tmp) == []
    assert int(spooled.read_text()) <= 16384
    posts = {q["parent"]: q for q in json.loads(a.ok("get", "jobs", "-n", "0", "--json").stdout)
             ["posts"] if q.get("parent")}
    got = results(a, "jobs")
    assert [r["result"] for r in got[big]] == [r["result"] for r in got[binary]] == ["done"]
    assert got[big][0]["bytes"] == 50_000_000 and 8000 < got[big][0]["posted"] <= 16384
    assert "[output cut: the command wrote 50000000 bytes" in posts[big]["text"]
    assert set(posts[big]["text"].split("\n")[0]) == {"x"}
    files = [x for x in posts[binary]["parts"] if x.get("k") == "file"]
    assert len(files) == 1 and files[0]["mime"] == "application/octet-stream"
    assert base64.b64decode(files[0]["data"]) == bytes(range(256)) * 8
    assert "\ufffd" not in posts[binary]["text"]


def test_awp_down_stops_the_worker_and_it_does_not_start_the_daemon_again(homes, tmp_path):
    """The user's awp down holds: the worker ends its command and exits 3 instead of
    starting the daemon again; awp up clears it, and a worker started then works."""
    a, (b,) = setup(homes, "bob")
    pids = tmp_path / "pids"
    job = script(tmp_path, ESCAPEE.format(pids=str(pids)))
    posted_hash(a.ok("post", "jobs", "hang", "--json"))
    p = worker(b, "alice/jobs", "--", sys.executable, job)
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60,
             "the command started")
    cmd, kid = map(int, pids.read_text().split())
    assert b.ok("down").stdout == "awp stopped\n"
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert "the daemon was stopped (awp down)" in err
    assert not _alive(cmd) and not _alive(kid)
    assert b.run("status").returncode == 3  # still down: nothing started it again
    assert not os.path.exists(os.path.join(b.path, "daemon.pid"))
    b.ok("up")
    assert not os.path.exists(os.path.join(b.path, "daemon.down"))
