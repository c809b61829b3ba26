"""One claimed item, worked by one command: run, renew, report, complete or fail.

The command gets the item's text on stdin, its files in a fresh directory
(``AWP_ITEM_DIR``) and ``AWP_TOPIC``, ``AWP_ITEM``, ``AWP_LEASE``,
``AWP_ITEM_DIR``, ``AWP_POSTED_BY`` in its environment.  From the claim to
the completion the lease is renewed by a thread of this process
(:mod:`awp.work.renewal`), so a job of an hour under a ten-minute lease
stays held, and a worker that dies stops renewing: the item goes back when
its lease ends.

The command runs under a keeper (:mod:`awp.work.reaper`) in a session of
its own: on ``--timeout``, on release and when the worker dies (SIGKILL
included) the keeper ends every process the command started, ``setsid``
ones too, and on normal exit what it left running.

Exit 0: stdout becomes a reply to the item (:mod:`awp.work.output`: read
once and bounded by the topic's ``max_post``; a text part for UTF-8 that
fits, a file part with the exact bytes otherwise, a note for what was cut)
and the lease is completed.  Non-zero, or ``--timeout``: a reply with the
exit status and the tail of stderr, and the lease fails (the owner's
``attempts`` decide between another try and a dead item).  Every result
reply carries a data part (:data:`RESULT_MIME`) that says which, so tools
can count results without parsing text.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.home import is_down
from .api import ApiFailure, Daemon, Gone
from .output import Spool, Tail, drain, result_parts
from .renewal import OWNER_WAIT_S, RENEW_RETRY_S, Renewal

SaveBytes = Callable[[str, object, bytes], str]

RESULT_MIME = "application/vnd.awp.work+json"
STDERR_TAIL = 2000  # bytes of stderr a failure reply quotes (and all that is kept of it)
RECORD_SLACK = 4096  # a post's bytes besides its parts: keys, grant, signature, topic
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a command being stopped
KEEPER_SLACK_S = 5.0  # beyond the grace, for the keeper to end all and exit
RATE_WAIT_S = 60.0  # a reply over the topic's rate waits this long for room
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
STOP = b"s"  # to the keeper: stop the command (end of file alone means the worker died)


@dataclass
class Outcome:
    """How one item ended, for the worker's log line and its counts."""

    item: str
    state: str  # done, failed, released, lost, left (the daemon was stopped under it)
    exit: int | None = None
    secs: float = 0.0
    why: str = ""


@dataclass
class Options:
    command: list[str]
    save_bytes: SaveBytes  # writes an item's files (see save_parts)
    timeout: float = 0.0  # seconds; 0: none
    workdir: str = ""  # where item directories are made ("" the system's temp dir)
    keep_dirs: bool = False
    max_post: int = 65536

    @property
    def budget(self) -> int:
        """What a result reply's parts may take of the topic's ``max_post``."""
        return max(0, self.max_post - RECORD_SLACK)


def item_text(parts: list) -> str:
    """What the command reads on stdin: the item's text and code parts."""
    return "\n".join(p["text"] for p in parts if isinstance(p, dict)
                     and p.get("k") in ("text", "code") and isinstance(p.get("text"), str))


def save_parts(parts: list, directory: str, save_bytes: SaveBytes) -> None:
    """Write the item's file parts into ``directory`` with ``save_bytes`` (the CLI's safe
    writer: names another host chose, never replacing what is there)."""
    for p in parts:
        if isinstance(p, dict) and p.get("k") == "file":
            try:
                data = base64.b64decode(str(p.get("data") or ""), validate=True)
            except ValueError:
                continue
            save_bytes(directory, p.get("name"), data)


@dataclass
class Ran:
    """A command that ended: how, its status, what was kept of its output, its directory."""

    ended: str  # ok, error, timeout, stopped, down (awp down), lost
    code: int | None
    secs: float
    out: Spool
    err: Tail
    directory: str


@dataclass
class Job:
    """A claim answer (``/v1/board/claim``) being worked."""

    claim: dict
    opts: Options
    home: str
    stop: threading.Event  # the worker is stopping: finish within the grace, then release
    grace_until: list[float] = field(default_factory=list)  # set when stop is set
    started: float = 0.0
    renewal: Renewal | None = None

    @property
    def topic(self) -> str:
        return self.claim["topic"]

    @property
    def lease(self) -> str:
        return self.claim["lease"]

    @property
    def item(self) -> dict:
        return self.claim.get("item") or {}

    @property
    def until_ms(self) -> int:
        return self.renewal.until_ms if self.renewal else int(self.claim.get("until") or 0)

    def run(self) -> Outcome:
        return self.report(self.execute())

    def execute(self) -> Ran:
        """Run the command to its end (the slot's part); the lease is renewed from here
        until :meth:`report` is through."""
        self.renewal = Renewal(self.home, self.topic, self.lease,
                               int(self.claim.get("until") or 0)).start()
        self.started = time.monotonic()
        h = self.item.get("hash", "")
        out = err = None
        directory = ""
        try:
            directory = tempfile.mkdtemp(prefix=f"awp-item-{h[:10]}-",
                                         dir=self.opts.workdir or None)
            out = Spool(self.opts.budget, self.opts.workdir)
            err = Tail(STDERR_TAIL)
            save_parts(self.item.get("parts") or [], directory, self.opts.save_bytes)
            ended, code = self._run(directory, out, err)
        except BaseException:
            self.renewal.finish()
            for s in (out, err):
                if s is not None:
                    s.close()
            if directory:
                self._drop(directory)
            raise
        return Ran(ended, code, time.monotonic() - self.started, out, err, directory)

    def report(self, ran: Ran) -> Outcome:
        """Reply and complete, or fail, or release (may run beside the next item's command)."""
        api = Daemon(self.home)
        h = self.item.get("hash", "")
        try:
            if ran.ended == "lost":
                return Outcome(h, "lost", ran.code, ran.secs, "the lease was lost")
            if ran.ended == "down":
                return Outcome(h, "left", ran.code, ran.secs, "the daemon was stopped (awp"
                               " down); the item goes back when its lease ends")
            if ran.ended == "stopped":
                self._op(api, "release")
                return Outcome(h, "released", ran.code, ran.secs, "the worker is stopping")
            if ran.ended == "ok":
                return self._succeed(api, ran.out, ran.secs)
            why = (f"timed out after {self.opts.timeout:g}s" if ran.ended == "timeout"
                   else f"exit status {ran.code}")
            return self._fail(api, ran.err, ran.code, ran.secs, why)
        finally:
            if self.renewal is not None:
                self.renewal.finish()
            api.close()
            ran.out.close()
            ran.err.close()
            self._drop(ran.directory)

    def _drop(self, directory: str) -> None:
        if not self.opts.keep_dirs:
            shutil.rmtree(directory, ignore_errors=True)

    # -- running -----------------------------------------------------------------------

    def _env(self, directory: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(AWP_TOPIC=self.topic, AWP_ITEM=self.item.get("hash", ""),
                   AWP_LEASE=self.lease, AWP_ITEM_DIR=directory,
                   AWP_POSTED_BY=str(self.item.get("author", "")))
        return env

    def _run(self, directory: str, out: Spool, err: Tail) -> tuple[str, int | None]:
        """Run the command under its keeper to its end; (how it ended, its exit status)."""
        watch_r, watch_w = os.pipe()
        argv = [sys.executable, "-I", REAPER, str(watch_r), f"{KILL_GRACE_S:g}",
                "" if self.opts.keep_dirs else directory, "--", *self.opts.command]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self._env(directory),
                                    pass_fds=(watch_r,), start_new_session=True)
        except OSError as e:
            os.close(watch_w)
            err.take(f"cannot run {self.opts.command[0]}: {e}\n".encode())
            return "error", 127
        finally:
            os.close(watch_r)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [drain(proc.stdout, out), drain(proc.stderr, err)]
        threading.Thread(target=_feed, args=(proc, item_text(self.item.get("parts") or [])),
                         daemon=True).start()
        try:
            ended = self._wait(proc, watch_w)
        finally:
            os.close(watch_w)  # without a stop first: the keeper reads the worker as gone
            if proc.poll() is None:
                _kill_group(proc)
        for t in readers:  # the keeper ended every writer: the pipes are at their end
            t.join(KILL_GRACE_S)
        code = proc.returncode
        return ended or ("ok" if code == 0 else "error"), code

    def _wait(self, proc: subprocess.Popen, watch_w: int) -> str:
        """Wait for the command's end, a timeout, the worker's stop or a lost lease;
        "" when the command ended by itself."""
        deadline = self.started + self.opts.timeout if self.opts.timeout else 0.0
        assert self.renewal is not None
        while True:
            now = time.monotonic()
            wake = min(deadline or now + 0.5, now + 0.5)
            try:
                proc.wait(timeout=max(0.0, wake - now))
                return ""
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if deadline and now >= deadline:
                _stop(proc, watch_w)
                return "timeout"
            if self.stop.is_set() and self.grace_until and now >= self.grace_until[0]:
                _stop(proc, watch_w)
                return "stopped"
            if self.renewal.lost.is_set():
                _stop(proc, watch_w)
                return "lost"
            if self.renewal.down.is_set() or is_down(self.home):  # awp down: stop now
                _stop(proc, watch_w)
                return "down"

    # -- reporting ---------------------------------------------------------------------

    def _op(self, api: Daemon, op: str) -> None:
        """Complete, fail or release; while the owner is away, ask again every second.

        The daemon keeps such an operation and sends it when the owner is
        back too, but on a slower beat: asking here gets a completion in
        before the lease runs out, so the item is not handed out again.
        """
        body = {"topic": self.topic, "lease": self.lease, "op": op, "timeout": OWNER_WAIT_S}
        while True:
            try:
                res = api.call("POST", "/v1/board/lease", body)
            except (ApiFailure, Gone):
                return  # refused: the lease already ended (or a kept copy got there first)
            if not res.get("queued") or time.time() * 1000 >= self.until_ms:
                return
            time.sleep(RENEW_RETRY_S)

    def _reply(self, api: Daemon, parts: list[dict]) -> None:
        """Post a reply to the item; over the topic's rate, wait for room (up to a minute)."""
        body = {"parent": self.item.get("hash", ""), "parts": parts, "topic": self.topic}
        deadline = time.monotonic() + RATE_WAIT_S
        while True:
            try:
                api.call("POST", "/v1/board/post", body)
                return
            except ApiFailure as e:
                if e.status != 429 or time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def _result(self, result: str, code: int | None, secs: float, **more: object) -> dict:
        data = {"result": result, "exit": code, "ms": int(secs * 1000), "lease": self.lease,
                **more}
        return {"k": "data", "mime": RESULT_MIME, "data": data}

    def _succeed(self, api: Daemon, out: Spool, secs: float) -> Outcome:
        h = self.item.get("hash", "")
        tries = result_parts(out.kept(), out.total, self.opts.budget, self.opts.max_post)
        for parts, shown in tries:
            try:
                self._reply(api, [*parts, self._result("done", 0, secs, bytes=out.total,
                                                       posted=shown)])
                break
            except ApiFailure as e:
                if e.status != 413:
                    return self._fail_to_report(api, h, secs, str(e))
            except Gone as e:
                return self._fail_to_report(api, h, secs, str(e))
        else:
            return self._fail_to_report(api, h, secs, "not even a note fits this topic's posts")
        self._op(api, "complete")
        return Outcome(h, "done", 0, secs)

    def _fail_to_report(self, api: Daemon, h: str, secs: float, why: str) -> Outcome:
        self._op(api, "fail")
        return Outcome(h, "failed", 0, secs, f"the result could not be posted: {why}")

    def _fail(self, api: Daemon, err: Tail, code: int | None, secs: float,
              why: str) -> Outcome:
        tail = err.kept().decode("utf-8", "replace")
        text = f"failed: {why} after {secs:.1f}s"
        if tail.strip():
            text += f"\nstderr (last {len(err.kept())} of {err.total} bytes):\n{tail}"
        try:
            self._reply(api, [{"k": "text", "text": text},
                              self._result("failed", code, secs, why=why)])
        except (ApiFailure, Gone):
            pass  # the failure itself still counts below
        self._op(api, "fail")
        return Outcome(self.item.get("hash", ""), "failed", code, secs, why)


def _feed(proc: subprocess.Popen, text: str) -> None:
    """Write the item's text to the command's stdin (a command may never read it)."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(text.encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _stop(proc: subprocess.Popen, watch_w: int) -> None:
    """Ask the keeper to end the command (SIGTERM, SIGKILL after the grace, everything the
    command started included); a keeper that does not exit in time is killed with its
    group, and the command dies with it (its parent-death signal)."""
    try:
        os.write(watch_w, STOP)
    except OSError:
        pass
    try:
        proc.wait(timeout=KILL_GRACE_S + KEEPER_SLACK_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
