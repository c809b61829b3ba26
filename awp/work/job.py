"""One claimed item, worked by one command: run, renew, report, complete or fail.

The command gets the item's text on stdin, its files in a fresh directory
(``AWP_ITEM_DIR``) and ``AWP_TOPIC``, ``AWP_ITEM``, ``AWP_LEASE``,
``AWP_ITEM_DIR``, ``AWP_POSTED_BY`` in its environment.  While it runs the
lease is renewed half way through what is left of it, so a job of an
hour under a ten-minute lease stays held; the renewing is done by this
process, so a worker that dies stops renewing and the item goes back when
its lease ends (the command dies with the worker: it is started with a
parent-death signal where the system has one).

Exit 0: stdout becomes a reply to the item (a text part when it fits the
topic's ``max_post``, else a file part, else a note saying where it was
kept) and the lease is completed.  Non-zero, or ``--timeout``: a reply with
the exit status and the tail of stderr, and the lease fails (the owner's
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
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from .api import ApiFailure, Daemon, Gone

SaveBytes = Callable[[str, object, bytes], str]

RESULT_MIME = "application/vnd.awp.work+json"
STDERR_TAIL = 2000  # bytes of stderr a failure reply quotes
RECORD_SLACK = 4096  # a post's bytes besides its parts: keys, grant, signature, topic
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a command being stopped
RENEW_RETRY_S = 1.0
OWNER_WAIT_S = 3.0  # how long the daemon waits for the owner's answer to a lease operation
RATE_WAIT_S = 60.0  # a reply over the topic's rate waits this long for room


@dataclass
class Outcome:
    """How one item ended, for the worker's log line and its counts."""

    item: str
    state: str  # done, failed, released, lost
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
    host: str = ""  # named in "kept at HOST:PATH"


def _parent_death_signal() -> None:
    """In the child: die with the worker (Linux), so a killed worker leaves no orphan."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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
    """A command that ended: how, its status, its output files and its directory."""

    ended: str  # ok, error, timeout, stopped, lost
    code: int | None
    secs: float
    out: IO[bytes]
    err: IO[bytes]
    directory: str


@dataclass
class Job:
    """A claim answer (``/v1/board/claim``) being worked."""

    claim: dict
    opts: Options
    home: str
    stop: threading.Event  # the worker is stopping: finish within the grace, then release
    grace_until: list[float] = field(default_factory=list)  # set when stop is set
    until_ms: int = 0
    started: float = 0.0

    @property
    def topic(self) -> str:
        return self.claim["topic"]

    @property
    def lease(self) -> str:
        return self.claim["lease"]

    @property
    def item(self) -> dict:
        return self.claim.get("item") or {}

    def run(self) -> Outcome:
        return self.report(self.execute())

    def execute(self) -> Ran:
        """Run the command to its end, renewing the lease meanwhile (the slot's part)."""
        api = Daemon(self.home)
        self.until_ms = int(self.claim.get("until") or 0)
        self.started = time.monotonic()
        h = self.item.get("hash", "")
        directory = tempfile.mkdtemp(prefix=f"awp-item-{h[:10]}-", dir=self.opts.workdir or None)
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115  (closed by report)
        try:
            save_parts(self.item.get("parts") or [], directory, self.opts.save_bytes)
            ended, code = self._run(api, directory, out, err)
        except BaseException:
            out.close()
            err.close()
            self._drop(directory)
            raise
        finally:
            api.close()
        return Ran(ended, code, time.monotonic() - self.started, out, err, directory)

    def report(self, ran: Ran) -> Outcome:
        """Reply and complete, or fail, or release (may run beside the next item's command)."""
        api = Daemon(self.home)
        h = self.item.get("hash", "")
        try:
            if ran.ended == "lost":
                return Outcome(h, "lost", ran.code, ran.secs, "the lease was lost")
            if ran.ended == "stopped":
                self._op(api, "release")
                return Outcome(h, "released", ran.code, ran.secs, "the worker is stopping")
            if ran.ended == "ok":
                return self._succeed(api, ran.out, ran.secs)
            why = (f"timed out after {self.opts.timeout:g}s" if ran.ended == "timeout"
                   else f"exit status {ran.code}")
            return self._fail(api, ran.err, ran.code, ran.secs, why)
        finally:
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

    def _run(self, api: Daemon, directory: str, out, err) -> tuple[str, int | None]:
        """Run the command to its end; (how it ended, its exit status)."""
        try:
            proc = subprocess.Popen(self.opts.command, stdin=subprocess.PIPE, stdout=out,
                                    stderr=err, env=self._env(directory),
                                    start_new_session=True, preexec_fn=_parent_death_signal)
        except OSError as e:
            err.write(f"cannot run {self.opts.command[0]}: {e}\n".encode())
            return "error", 127
        threading.Thread(target=_feed, args=(proc, item_text(self.item.get("parts") or [])),
                         daemon=True).start()
        deadline = self.started + self.opts.timeout if self.opts.timeout else 0.0
        next_renew = self._renew_due()
        while True:
            now = time.monotonic()
            wake = min(x for x in (next_renew, deadline or next_renew, now + 0.5))
            try:
                code = proc.wait(timeout=max(0.0, wake - now))
                return ("ok" if code == 0 else "error"), code
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if deadline and now >= deadline:
                _stop(proc)
                return "timeout", proc.returncode
            if self.stop.is_set() and self.grace_until and now >= self.grace_until[0]:
                _stop(proc)
                return "stopped", proc.returncode
            if now >= next_renew:
                state = self._renew(api)
                if state == "lost":
                    _stop(proc)
                    return "lost", proc.returncode
                next_renew = self._renew_due() if state == "renewed" else now + RENEW_RETRY_S

    def _renew_due(self) -> float:
        """Half way through the lease's remaining time: the other half is the margin for an
        owner that is restarting, or a daemon that is."""
        left = max(0.0, self.until_ms / 1000 - time.time())
        return time.monotonic() + max(0.5, left / 2)

    def _renew(self, api: Daemon) -> str:
        """renewed; retry (the owner or our daemon is away for now); lost."""
        try:
            res = api.call("POST", "/v1/board/lease",
                           {"topic": self.topic, "lease": self.lease, "op": "renew",
                            "timeout": OWNER_WAIT_S}, wait=OWNER_WAIT_S, within=2.0)
        except Gone:
            return "retry" if time.time() * 1000 < self.until_ms else "lost"
        except ApiFailure as e:
            if e.code == "refused" or time.time() * 1000 >= self.until_ms:
                return "lost"
            return "retry"
        self.until_ms = int(res.get("until") or self.until_ms)
        return "renewed"

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

    def _succeed(self, api: Daemon, out, secs: float) -> Outcome:
        h = self.item.get("hash", "")
        out.seek(0, os.SEEK_END)
        size = out.tell()
        budget = self.opts.max_post - RECORD_SLACK
        out.seek(0)
        data = out.read(budget + 1) if size <= budget else b""
        tries: list[list[dict]] = []
        if data and len(data) <= budget:
            text = data.decode("utf-8", "replace")
            if len(text.encode("utf-8")) <= budget:
                tries.append([{"k": "text", "text": text}])
            if len(base64.b64encode(data)) <= budget:
                tries.append([{"k": "file", "name": "output.txt", "mime": "text/plain",
                               "size": len(data), "data": base64.b64encode(data).decode()}])
        elif size == 0:
            tries.append([{"k": "text", "text": "(no output)"}])
        for parts in tries:
            try:
                self._reply(api, [*parts, self._result("done", 0, secs, bytes=size)])
                break
            except ApiFailure as e:
                if e.status != 413:
                    return self._fail_to_report(api, h, secs, str(e))
            except Gone as e:
                return self._fail_to_report(api, h, secs, str(e))
        else:
            where = self._keep_output(out, h)
            out.seek(0)
            head = out.read(1000).decode("utf-8", "replace")
            note = (f"output of {size} bytes is larger than this topic's posts"
                    f" ({self.opts.max_post} bytes); kept at {self.opts.host}:{where}."
                    f" It begins:\n{head}")
            try:
                self._reply(api, [{"k": "text", "text": note},
                                  self._result("done", 0, secs, bytes=size, kept=where)])
            except (ApiFailure, Gone) as e:
                return self._fail_to_report(api, h, secs, str(e))
        self._op(api, "complete")
        return Outcome(h, "done", 0, secs)

    def _keep_output(self, out, h: str) -> str:
        base = self.opts.workdir or tempfile.gettempdir()
        fd, path = tempfile.mkstemp(prefix=f"awp-output-{h[:10]}-", suffix=".txt", dir=base)
        out.seek(0)
        with os.fdopen(fd, "wb") as f:
            shutil.copyfileobj(out, f)
        return path

    def _fail_to_report(self, api: Daemon, h: str, secs: float, why: str) -> Outcome:
        self._op(api, "fail")
        return Outcome(h, "failed", 0, secs, f"the result could not be posted: {why}")

    def _fail(self, api: Daemon, err, code: int | None, secs: float, why: str) -> Outcome:
        err.seek(0, os.SEEK_END)
        size = err.tell()
        err.seek(max(0, size - STDERR_TAIL))
        tail = err.read().decode("utf-8", "replace")
        text = f"failed: {why} after {secs:.1f}s"
        if tail.strip():
            text += f"\nstderr (last {min(size, STDERR_TAIL)} bytes):\n{tail}"
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


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the command's process group, SIGKILL it if it is still there after a grace."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
