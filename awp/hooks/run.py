"""``awp hook session-start|inbox|stop [--format F] [--home H]``.

Runs after every tool call of an agent, so it is built to cost nothing when
there is nothing to say: it is dispatched by ``awp.cli.entry`` before typer
is imported, talks to the daemon with the stdlib ``LocalClient``, and never
starts a daemon. With no daemon, or on any failure, it prints nothing and
exits 0: a hook must never break the harness it runs in.

Each run, when a daemon answers:

1. reads the hook's JSON input on stdin (malformed, huge or missing input
   is tolerated: the few fields used are then looked for by pattern);
2. in one request (``POST /v1/activity`` with ``"inbox": true, "mark":
   false``) records activity, with the model (the input's ``model``, or for
   Claude Code the newest assistant entry's ``message.model`` in the
   transcript at ``transcript_path``) and the harness detected from the
   environment, and takes the newest unread records, without marking them;
3. takes the new posts of subscribed board topics (``POST /v1/board/unread``,
   not marking them either): at session start and after tool calls always,
   before stopping only when there are messages to stop for (a broadcast is
   not a reason to keep an agent from finishing; its posts wait for the
   next hook);
4. prints the newest of them that fit what the harness shows
   (``present.text.HOOK_LIMITS``), framed as untrusted input in the
   harness's format, saying how many more wait (``stop``: a one-time block,
   and nothing at all when the input says a stop hook is already active);
5. only then marks read exactly what it printed (``POST /v1/seen``), and
   only when writing and flushing stdout succeeded: a hook whose stdout is a
   full disk or a pipe with no reader marks nothing and exits 1. A hook
   that gave up on a slow daemon printed nothing and marks nothing; a
   confirm lost after printing shows the same records again next time: a
   duplicate, never a loss.

A daemon without board routes (404), or one whose board answer fails or comes
too late, costs the hook its posts only: the messages it already took are
printed.

Usage errors and an unwritable stdout exit 1, not 2: to Claude Code, exit 2 from a
hook means "block".
"""

from __future__ import annotations

import os
import sys
import time

from awp.base.sockpath import find_socket
from awp.harness.identity import detect, normalize
from awp.localapi import cjson
from awp.localapi.client import ApiFailure, DaemonNotRunning, LocalClient, ProtocolError

EVENTS = ("session-start", "inbox", "stop")
FORMATS = ("claude", "codex", "gemini", "cursor", "text")

#: Inputs up to this size are parsed as JSON; bigger ones are scanned.
MAX_PARSE = 1 << 20
#: Never read more than this from stdin (the rest is left unread).
MAX_READ = 64 << 20
#: Bytes at the start of a huge or malformed input searched for the fields.
SCAN_HEAD = 256 * 1024
#: How long to wait for the first byte of stdin (a harness may leave it open).
FIRST_BYTE_WAIT = 0.5
#: How long reading stdin may take in all.
READ_DEADLINE = 3.0
#: All the hook's talk with the daemon (connecting and every request) must be
#: over within this. A healthy daemon answers in a few milliseconds; a hung one
#: must not cost the agent more than a blink on every tool call, so past it the
#: hook gives up and prints nothing.
DAEMON_BUDGET = 0.3
#: ``AWP_HOOK_BUDGET`` (seconds) replaces it on a machine too slow for the
#: default; it is held between these, so a typo cannot stall every tool call.
BUDGET_RANGE = (0.05, 10.0)
#: Transcript tail read per step, and at most in all, looking for the model.
TRANSCRIPT_BLOCK = 64 * 1024
TRANSCRIPT_MAX = 8 << 20
#: Most board posts one hook run asks for; the daemon counts the rest.
BOARD_LIMIT = 20
#: Most unread records one hook run asks for (the newest), and their line bytes:
#: enough to fill any harness's bound, small enough for the budget.
FETCH_NEWEST = 40
FETCH_BYTES = 256 * 1024
#: Time for telling the daemon what was printed, after printing it.
CONFIRM_BUDGET = 0.2

USAGE = (
    "usage: awp hook [session-start|inbox|stop] [--format claude|codex|gemini|cursor|text]"
    " [--home DIR]"
)


class UsageError(Exception):
    pass


# -- arguments and input ----------------------------------------------------------------

def parse_args(args: list[str]) -> tuple[str, str, str | None]:
    """``(event, format, home)``; the event is ``""`` when left to the input."""
    event = ""
    fmt = "claude"
    home = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--format", "--home"):
            if i + 1 >= len(args):
                raise UsageError(f"{a} needs a value")
            i += 1
            if a == "--format":
                fmt = args[i]
            else:
                home = args[i]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a.startswith("--home="):
            home = a.split("=", 1)[1]
        elif a.startswith("-"):
            raise UsageError(f"unknown option {a}")
        elif not event:
            event = a
        else:
            raise UsageError(f"unexpected argument {a!r}")
        i += 1
    fmt = fmt.strip().lower()
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if event and event not in EVENTS:
        raise UsageError(f"unknown hook event {event!r}: choose from {', '.join(EVENTS)}")
    return event, fmt, home


def read_stdin() -> bytes:
    """All of stdin (bounded in size and time); ``b""`` for a terminal or none."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return b""
    except (AttributeError, ValueError, OSError):
        return b""
    import select

    chunks: list[bytes] = []
    total = 0
    start = time.monotonic()
    while total < MAX_READ:
        wait = FIRST_BYTE_WAIT if not total else READ_DEADLINE - (time.monotonic() - start)
        if wait <= 0:
            break
        try:
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                break
            data = os.read(fd, 1 << 20)
        except (OSError, ValueError):
            break
        if not data:
            break
        chunks.append(data)
        total += len(data)
    return b"".join(chunks)


def _scan(raw: bytes) -> dict:
    """The top-level fields a hook uses, found by pattern in a huge or broken input.

    ``model`` is not taken this way: in a big tool call it may belong to the
    tool's own input.
    """
    import re

    out: dict = {}
    for key in ("hook_event_name", "transcript_path", "status"):
        m = re.search(rb'"%s"\s*:\s*"((?:[^"\\]|\\.)*)"' % key.encode(), raw)
        if m:
            try:
                out[key] = cjson.loads(b'"' + m.group(1) + b'"')
            except ValueError:
                pass
    m = re.search(rb'"stop_hook_active"\s*:\s*(true|false)', raw)
    if m:
        out["stop_hook_active"] = m.group(1) == b"true"
    m = re.search(rb'"loop_count"\s*:\s*(\d{1,9})', raw)
    if m:
        out["loop_count"] = int(m.group(1))
    return out


def parse_input(raw: bytes) -> dict:
    """The hook input as a dict; ``{}`` when there is none or it is unusable."""
    if not raw or not raw.strip():
        return {}
    if len(raw) <= MAX_PARSE:
        try:
            obj = cjson.loads(raw)
        except (ValueError, RecursionError):
            return _scan(raw[:SCAN_HEAD])
        return obj if isinstance(obj, dict) else {}
    return _scan(raw[:SCAN_HEAD])


def _text_field(data: dict, key: str) -> str:
    v = data.get(key)
    return v.strip() if isinstance(v, str) else ""


# -- the model ----------------------------------------------------------------------------

def _line_model(line: bytes) -> str:
    if b'"assistant"' not in line or b'"model"' not in line:
        return ""
    try:
        obj = cjson.loads(line)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(obj, dict) or obj.get("type") != "assistant" or obj.get("isSidechain"):
        return ""
    msg = obj.get("message")
    model = msg.get("model") if isinstance(msg, dict) else None
    if isinstance(model, str) and model.strip() and not model.startswith("<"):
        return model.strip()  # "<synthetic>" marks entries no model wrote
    return ""


def transcript_model(path: object) -> str:
    """The model of the newest assistant entry of a Claude Code transcript (JSONL).

    Read backwards from the end in blocks, so a long session costs the same
    as a short one; gives up after ``TRANSCRIPT_MAX`` bytes.
    """
    if not isinstance(path, str) or not path:
        return ""
    try:
        f = open(os.path.expanduser(path), "rb")  # noqa: SIM115 - closed below
    except (OSError, ValueError):
        return ""
    with f:
        try:
            pos = f.seek(0, os.SEEK_END)
        except OSError:
            return ""
        carry = b""
        scanned = 0
        while pos > 0 and scanned < TRANSCRIPT_MAX:
            size = min(TRANSCRIPT_BLOCK, pos)
            pos -= size
            scanned += size
            try:
                f.seek(pos)
                block = f.read(size) + carry
            except OSError:
                return ""
            lines = block.split(b"\n")
            if pos > 0:
                carry = lines[0]  # maybe the end of a line that starts earlier
                lines = lines[1:]
            for line in reversed(lines):
                model = _line_model(line)
                if model:
                    return model
    return ""


def input_model(data: dict) -> str:
    """The model the hook input names, or the one its Claude Code transcript shows."""
    model = data.get("model")
    if isinstance(model, dict):
        model = model.get("id") or model.get("name")
    if isinstance(model, str) and model.strip() and len(model) <= 200:
        return model.strip()
    return transcript_model(data.get("transcript_path"))


# -- output -------------------------------------------------------------------------------

def infer_event(hook_event: str) -> str:
    e = hook_event.replace("_", "").replace("-", "").lower()
    if e == "sessionstart":
        return "session-start"
    if e in ("stop", "afteragent"):
        return "stop"
    return "inbox"


def format_output(fmt: str, event: str, hook_event: str, text: str) -> str:
    """What to print for ``text`` in the harness's format (``""`` prints nothing)."""
    if not text:
        return ""
    if fmt == "text":
        return text
    if event == "stop":
        if fmt == "cursor":
            return cjson.dumps({"followup_message": text})
        return cjson.dumps({"decision": "block", "reason": text})
    if not hook_event:
        if event == "inbox" and fmt != "gemini":
            return text  # no event name to answer to: plain text (context where shown)
        # Gemini CLI parses stdout as JSON and nothing else: name the event our
        # bootstrap wires the hook to.
        hook_event = "SessionStart" if event == "session-start" else "AfterTool"
    if fmt == "cursor":
        return cjson.dumps({"additional_context": text})
    return cjson.dumps(
        {"hookSpecificOutput": {"hookEventName": hook_event, "additionalContext": text}})


def _write(out: str) -> bool:
    """Write and flush ``out``; ``False`` when it did not all reach stdout.

    Only a write that succeeded may be confirmed: text written into a full
    disk or a pipe nobody reads never reached the agent. After a failure
    stdout is pointed at ``/dev/null``, so the interpreter's own flush at
    exit cannot fail again and print a traceback into the harness.
    """
    if not out:
        return True
    data = (out if out.endswith("\n") else out + "\n").encode("utf-8", "replace")
    try:
        buf = getattr(sys.stdout, "buffer", None)
        if buf is not None:
            buf.write(data)
            buf.flush()
        else:
            sys.stdout.write(data.decode("utf-8"))
            sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        _silence_stdout()
        return False
    return True


def _silence_stdout() -> None:
    """Drop what is left in stdout's buffer and send any later write to ``/dev/null``."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


# -- the run -------------------------------------------------------------------------------

def _home(flag: str | None) -> str:
    raw = flag or os.environ.get("AWP_HOME") or "~/.awp"
    return os.path.abspath(os.path.expanduser(raw))


def _harness(fmt: str) -> tuple[str, bool]:
    """``(harness, explicit)`` for the activity report."""
    explicit = normalize(os.environ.get("AWP_HARNESS"))
    if explicit:
        return explicit, True
    found = detect(os.environ)  # type: ignore[arg-type]
    if not found and fmt in ("codex", "gemini", "cursor"):
        found = fmt
    return found, False


def _stop_silenced(data: dict) -> bool:
    if data.get("stop_hook_active") is True:
        return True
    loops = data.get("loop_count")
    if isinstance(loops, int) and not isinstance(loops, bool) and loops > 0:
        return True  # Cursor: this stop follows a follow-up we asked for
    return _text_field(data, "status") in ("aborted", "error")


class _Budgeted(LocalClient):
    """A client whose requests share one deadline, so two slow answers cannot add up."""

    def __init__(self, sock: str, budget: float) -> None:
        super().__init__(sock, timeout=budget)
        self._end = time.monotonic() + budget

    def request(self, *args: object, **kwargs: object) -> object:
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the hook's time for the daemon is used up")
        kwargs["timeout"] = left
        return super().request(*args, **kwargs)


_FAILURES = (DaemonNotRunning, ApiFailure, ProtocolError, ConnectionError, TimeoutError,
             OSError)


def _board(client: LocalClient) -> tuple[list[dict], int]:
    """New posts of subscribed topics, not marked read; ``([], 0)`` on any failure.

    Only the board part is lost then: a daemon from before the board (404), a
    board error or the budget running out must not cost the messages already
    taken.
    """
    try:
        res = client.post("/v1/board/unread", {"mark": False, "limit": BOARD_LIMIT})
    except _FAILURES:
        return [], 0
    if not isinstance(res, dict):
        return [], 0
    posts = res.get("posts")
    posts = [p for p in posts if isinstance(p, dict)] if isinstance(posts, list) else []
    more = res.get("more")
    return posts, more if isinstance(more, int) and not isinstance(more, bool) else 0


class Outcome:
    """What to print, and what to mark read once it is printed.

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect``, a
    cost the hook would pay after every tool call.
    """

    def __init__(self, text: str = "", seqs: list[int] | None = None,
                 board: dict[str, int] | None = None, sock: str = "") -> None:
        self.text = text
        self.seqs = seqs or []
        self.board = board or {}
        self.sock = sock

    def confirm(self) -> None:
        """Tell the daemon what was printed (``POST /v1/seen``), within its own budget.

        Called only after the text is written: if this fails, the records
        stay unread and the next hook shows them again (a duplicate, never a
        loss). A daemon from before ``/v1/seen`` marked them when it answered.
        """
        if not (self.seqs or self.board) or not self.sock:
            return
        try:
            # scaled with AWP_HOOK_BUDGET, so a slow machine's confirm gets its share too
            scale = daemon_budget(os.environ.get("AWP_HOOK_BUDGET")) / DAEMON_BUDGET
            with _Budgeted(self.sock, CONFIRM_BUDGET * scale) as client:
                client.post("/v1/seen", {"seqs": self.seqs, "board": self.board})
        except _FAILURES:
            pass


def _take(client: LocalClient, report: dict, silenced: bool) -> dict | None:
    """One round trip: record activity (and the model), and take the newest unread records.

    Nothing is marked read here (``"mark": false``); :meth:`Outcome.confirm` marks
    what was printed.
    """
    ask = {"inbox": not silenced, "mark": False, "newest": FETCH_NEWEST,
           "bytes": FETCH_BYTES}
    try:
        res = client.post("/v1/activity", {**report, **ask})
    except ApiFailure:
        res = None  # an older daemon, or a model it refused
    if not silenced and not (isinstance(res, dict) and "records" in res):
        res = client.post("/v1/inbox", {"mark": False})
    return res if isinstance(res, dict) else None


def _waiting(client: LocalClient) -> str:
    """Items waiting on queues this host worked, for an agent about to stop (``""``: none)."""
    try:
        res = client.post("/v1/board/waiting", {})
    except _FAILURES:
        return ""
    from ..present.work import waiting_text

    return waiting_text(res.get("topics") or []) if isinstance(res, dict) else ""


def daemon_budget(value: str | None) -> float:
    """The daemon budget: ``AWP_HOOK_BUDGET`` held inside ``BUDGET_RANGE``, or
    the default when unset or not a number (a hook never fails on its env)."""
    try:
        budget = float(value) if value else DAEMON_BUDGET
    except ValueError:
        return DAEMON_BUDGET
    if budget != budget:  # NaN
        return DAEMON_BUDGET
    low, high = BUDGET_RANGE
    return min(max(budget, low), high)


def run(event: str, fmt: str, home: str, data: dict) -> Outcome:
    """Talk to the daemon and say what to print (an empty text for nothing)."""
    hook_event = _text_field(data, "hook_event_name")
    if not event:
        event = infer_event(hook_event)
    try:
        sock = find_socket(home)
        if not os.path.exists(sock):
            return Outcome()  # no daemon (and none is started): nothing to say
        client = _Budgeted(sock, daemon_budget(os.environ.get("AWP_HOOK_BUDGET")))
    except OSError:
        return Outcome()
    posts: list[dict] = []
    more = 0
    with client:
        silenced = event == "stop" and _stop_silenced(data)
        report: dict = {"source": "hook"}
        harness, explicit = _harness(fmt)
        if harness:
            report["harness"] = harness
            if explicit:
                report["harness_explicit"] = True
        status = res = None
        try:
            if event == "session-start":
                status = client.get("/v1/status")
            model = input_model(data)
            if model:
                report["model"] = model
            res = _take(client, report, silenced)
        except _FAILURES:
            return Outcome()
        if silenced:
            return Outcome()
        records = res.get("records") if res else None
        records = ([r for r in records if isinstance(r, dict)] if isinstance(records, list)
                   else [])
        total = res.get("unread_total") if res else None
        total = total if isinstance(total, int) and not isinstance(total, bool) else 0
        if event != "stop" or records:
            posts, more = _board(client)
        waiting = _waiting(client) if event == "stop" and not records else ""
    from ..present import text as texts

    room = texts.HOOK_LIMITS[fmt]
    parts: list[str] = []
    if event == "session-start":
        ident = texts.identity_text(status if isinstance(status, dict) else {})
        parts.append(ident)
        room -= texts.measure(ident) + 2
    body, shown = texts.fit_messages(records, total, room, stop=event == "stop")
    if body:
        parts.append(body)
        room -= texts.measure(body) + 2
    board, upto = texts.fit_board(posts, more, room)
    if board:
        parts.append(board)
    if waiting and not parts and texts.measure(waiting) <= room:
        parts.append(waiting)  # an agent about to stop with nothing else to hear
    seqs = texts.unread_seqs(shown)
    text = format_output(fmt, event, hook_event, texts.join_texts(*parts))
    return Outcome(text, seqs, upto, sock) if text else Outcome()


def main(args: list[str]) -> int:
    try:
        event, fmt, home_flag = parse_args(list(args))
    except UsageError as e:
        sys.stderr.write(f"awp hook: {e}\n{USAGE}\n")
        return 1
    try:
        data = parse_input(read_stdin())
        outcome = run(event, fmt, _home(home_flag), data)
        if not _write(outcome.text):
            # nothing reached the agent: nothing is marked, and the harness hears it
            sys.stderr.write("awp hook: could not write the output; nothing was marked"
                             " read\n")
            return 1
        outcome.confirm()  # only once printed: a hook that gave up marks nothing
    except Exception as e:  # noqa: BLE001 - a hook must never break its harness
        if os.environ.get("AWP_HOOK_DEBUG"):
            sys.stderr.write(f"awp hook: {type(e).__name__}: {e}\n")
    return 0
