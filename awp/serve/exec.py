"""Serving ``exec`` requests: run a command, stream its output to scratch files.

``exec`` is not confined to the root: the root is only the default working
directory (PROFILE.md). The command runs in its own session / process group,
which is killed (SIGKILL) on timeout or when the caller cancels.
"""

from __future__ import annotations

import codecs
import inspect
import itertools
import os
import shlex
import signal
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from awp.serve.requests import INLINE_LIMIT

DEFAULT_TIMEOUT = 600.0
#: default cap on each output blob (the default blob limit)
DEFAULT_MAX_BLOB = 50 * 1024 * 1024
#: after the command exits, how long to wait for its output pipes to close
#: (a background child may hold them open)
DRAIN_GRACE = 2.0
#: characters of the latest output line in a progress message
PROGRESS_LINE_MAX = 160

_READ_CHUNK = 64 * 1024
_TAIL_BYTES = 2048
_feed_seq = itertools.count(1)  # orders output across streams (which wrote last)

#: ``on_progress(text, data)``; ``data`` is ``{"elapsed_ms": int, "line": str}``.
ProgressFn = Callable[[str, dict], "Awaitable[Any] | Any"]


class ExecError(Exception):
    """Bad exec request data; ``str(e)`` is the result's error."""


def _fail(error: str, started: float) -> dict:
    return {
        "exit": -1,
        "duration_ms": int((trio.current_time() - started) * 1000),
        "stdout": "",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": error,
    }


def _parse(root: str, data: object) -> tuple[list[str], str, dict[str, str], float, bytes | None]:
    if not isinstance(data, dict):
        raise ExecError("request data must be an object")
    cmd = data.get("cmd")
    if isinstance(cmd, str):
        if not cmd.strip():
            raise ExecError("cmd is empty")
        argv = ["/bin/sh", "-c", cmd]
    elif isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
        argv = list(cmd)
    elif cmd is None:
        raise ExecError("cmd is required")
    else:
        raise ExecError("cmd must be a string or a non-empty list of strings")
    if any("\x00" in a for a in argv):
        raise ExecError("cmd contains a NUL byte")

    cwd_req = data.get("cwd")
    if cwd_req is None or cwd_req == "":
        cwd = root
    elif not isinstance(cwd_req, str) or "\x00" in cwd_req:
        raise ExecError("cwd must be a string")
    else:
        cwd = os.path.normpath(os.path.join(root, cwd_req))
    if not os.path.isdir(cwd):
        raise ExecError(f"cwd is not a directory: {cwd_req if cwd_req else cwd}")

    env = dict(os.environ)
    env_req = data.get("env")
    if env_req is not None:
        if not isinstance(env_req, dict):
            raise ExecError("env must be an object of strings")
        for k, v in env_req.items():
            if not isinstance(k, str) or not k or "=" in k or "\x00" in k:
                raise ExecError(f"bad env name: {k!r}")
            if v is None:
                env.pop(k, None)
            elif isinstance(v, str) and "\x00" not in v:
                env[k] = v
            else:
                raise ExecError(f"env value for {k} must be a string")

    timeout = data.get("timeout")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ExecError("timeout must be a positive number of seconds")
    try:
        timeout = float(timeout)
    except OverflowError:  # an integer past any float: answer, do not die
        raise ExecError("timeout is too large") from None

    stdin = data.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise ExecError("stdin must be a string")
    return argv, cwd, env, timeout, (stdin.encode("utf-8", "surrogatepass") if stdin else None)


class _Sink:
    """One output stream: first 64 KiB in memory, everything (to a cap) on disk."""

    def __init__(self, label: str, scratch_dir: str, max_blob: int) -> None:
        self.label = label
        fd, self.path = tempfile.mkstemp(prefix=f"exec-{label}-", suffix=".txt", dir=scratch_dir)
        self.fd: int | None = fd
        self.max_blob = max_blob
        self.head = bytearray()
        self.tail = b""
        self.total = 0
        self.on_disk = 0
        self.last_seq = 0
        self.eof = trio.Event()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = INLINE_LIMIT + 1 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        if self.fd is not None and self.on_disk < self.max_blob:
            part = chunk[: self.max_blob - self.on_disk]
            view = memoryview(part)
            done = 0
            while done < len(part):
                done += os.write(self.fd, view[done:])
            self.on_disk += len(part)
        self.tail = (self.tail + chunk)[-_TAIL_BYTES:]
        self.last_seq = next(_feed_seq)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def discard(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def finish(self, result: dict, blobs: list[tuple[str, str]]) -> None:
        """Fill ``<label>``, ``<label>_truncated`` and attach the blob if needed."""
        self.close()
        head = bytes(self.head)
        if self.total <= INLINE_LIMIT:
            try:
                result[self.label] = head.decode("utf-8")
                result[f"{self.label}_truncated"] = False
                self.discard()
                return
            except UnicodeDecodeError:
                pass
        # cut at 64 KiB without splitting a character at the cut
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        result[self.label] = dec.decode(head[:INLINE_LIMIT], final=self.total <= INLINE_LIMIT)
        result[f"{self.label}_truncated"] = True
        if self.total > self.on_disk:
            result[f"{self.label}_blob_truncated"] = True
        blobs.append((f"{self.label}.txt", self.path))


def latest_line(*sinks: _Sink) -> str:
    """The last non-empty output line of whichever stream wrote most recently."""
    live = [s for s in sinks if s.tail]
    if not live:
        return ""
    s = max(live, key=lambda x: x.last_seq)
    text = s.tail.decode("utf-8", "replace")
    for seg in reversed(text.replace("\r", "\n").split("\n")):
        seg = "".join(ch for ch in seg if ch.isprintable()).strip()
        if seg:
            return seg if len(seg) <= PROGRESS_LINE_MAX else seg[: PROGRESS_LINE_MAX - 1] + "…"
    return ""


def _killpg(proc: trio.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, OSError):
        pass


async def _pump(stream: Any, sink: _Sink) -> None:
    try:
        while True:
            chunk = await stream.receive_some(_READ_CHUNK)
            if not chunk:
                break
            sink.feed(chunk)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass
    finally:
        sink.eof.set()


async def _feed_stdin(stream: Any, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass


async def run_exec(
    root: str,
    data: object,
    *,
    on_progress: ProgressFn | None = None,
    progress_every: float = 10.0,
    scratch_dir: str,
    max_blob: int = DEFAULT_MAX_BLOB,
) -> tuple[dict, list[tuple[str, str]]]:
    """Serve an ``exec`` request ``{cmd, cwd?, env?, timeout?, stdin?}``.

    Returns ``(result, blobs)``. ``result`` is ``{exit, duration_ms, stdout,
    stderr, stdout_truncated, stderr_truncated}`` plus ``error`` on a timeout
    (``"timed out after 5s"``, ``exit`` is then the killing signal, ``-9``) or
    when the command could not start (``exit: -1``). ``blobs`` is a list of
    ``(name, path)``: ``("stdout.txt", ...)`` / ``("stderr.txt", ...)`` holding
    the full output of a stream that was over 64 KiB or not UTF-8; the files are
    in ``scratch_dir`` and the caller owns (and removes) them.

    ``on_progress(text, data)`` (sync or async) is called while the command runs,
    first after ``progress_every`` seconds and then at most once per
    ``progress_every`` seconds; ``text`` is like ``"running 12s: <latest line>"``
    and ``data`` is ``{"elapsed_ms", "line"}``. A failing callback is ignored. The
    last callback has returned before ``run_exec`` returns.

    Cancelling the caller kills the process group, removes the scratch files
    and re-raises.
    """
    started = trio.current_time()
    try:
        argv, cwd, env, timeout, stdin = _parse(root, data)
    except ExecError as e:
        return _fail(str(e), started), []

    try:
        out = _Sink("stdout", scratch_dir, max_blob)
    except OSError as e:
        return _fail(f"scratch directory unusable: {e.strerror or e}", started), []
    try:
        err = _Sink("stderr", scratch_dir, max_blob)
    except OSError as e:
        out.discard()
        return _fail(f"scratch directory unusable: {e.strerror or e}", started), []
    try:
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        out.discard()
        err.discard()
        what = e.strerror or str(e)
        return _fail(f"could not start {argv[0]!r}: {what}", started), []
    except BaseException:
        out.discard()
        err.discard()
        raise

    timed_out = False
    stop = trio.Event()
    done_ok = False
    try:
        async with trio.open_nursery() as outer:
            if on_progress is not None:
                outer.start_soon(_ticker, on_progress, progress_every, started, stop, out, err)
            try:
                async with trio.open_nursery() as inner:
                    inner.start_soon(_pump, proc.stdout, out)
                    inner.start_soon(_pump, proc.stderr, err)
                    if stdin is not None:
                        inner.start_soon(_feed_stdin, proc.stdin, stdin)
                    with trio.move_on_after(timeout) as cs:
                        await proc.wait()
                    if cs.cancelled_caught:
                        timed_out = True
                        _killpg(proc)
                        await proc.wait()
                    stop.set()
                    with trio.move_on_after(DRAIN_GRACE):
                        await out.eof.wait()
                        await err.eof.wait()
                    inner.cancel_scope.cancel()
            finally:
                stop.set()
        done_ok = True
    finally:
        if proc.returncode is None:
            _killpg(proc)
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await proc.wait()
        for s in (proc.stdout, proc.stderr, proc.stdin):
            if s is not None:
                with trio.CancelScope(shield=True):
                    try:
                        await s.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
        if not done_ok:
            out.discard()
            err.discard()

    result: dict = {
        "exit": proc.returncode,
        "duration_ms": int((trio.current_time() - started) * 1000),
    }
    blobs: list[tuple[str, str]] = []
    out.finish(result, blobs)
    err.finish(result, blobs)
    if timed_out:
        result["error"] = f"timed out after {timeout:g}s"
    return result, blobs


async def _ticker(
    on_progress: ProgressFn,
    every: float,
    started: float,
    stop: trio.Event,
    out: _Sink,
    err: _Sink,
) -> None:
    every = max(float(every), 0.05)
    next_at = started + every
    while True:
        with trio.move_on_at(next_at):
            await stop.wait()
        if stop.is_set():
            return
        now = trio.current_time()
        elapsed = now - started
        line = latest_line(out, err)
        text = f"running {int(elapsed)}s" + (f": {line}" if line else "")
        try:
            r = on_progress(text, {"elapsed_ms": int(elapsed * 1000), "line": line})
            if inspect.isawaitable(r):
                await r
        except Exception:
            pass  # progress is best effort; never break the command
        next_at = trio.current_time() + every


def command_text(cmd: object, limit: int = 80) -> str:
    """A request's ``cmd`` as one short line of text."""
    if isinstance(cmd, list):
        try:
            text = shlex.join(str(a) for a in cmd)
        except Exception:
            text = " ".join(map(str, cmd))
    elif isinstance(cmd, str):
        text = cmd
    else:
        text = "?"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(result: dict, cmd: object) -> str:
    """One line for the result msg's text: ``exit 0 in 8.1s: make test``.

    With an error: ``exit -9 in 1.0s: sleep 30 (timed out after 1s)``.
    """
    secs = (result.get("duration_ms") or 0) / 1000
    text = f"exit {result.get('exit')} in {secs:.1f}s: {command_text(cmd)}"
    if result.get("error"):
        text += f" ({result['error']})"
    return text
