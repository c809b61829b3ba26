"""Running the scenarios in connect or listen mode, and reporting the results."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from ..wire.ids import IdGenerator
from ..wire.keys import Identity
from .conn import Fail, Listener, PeerConn, Skip, Tracer
from .scenarios import SCENARIOS, Ctx, Scenario, handshake

PASS, FAIL, SKIP = "pass", "fail", "skip"
# How long the peer's command may take to wind down once the scenarios are done.
COMMAND_GRACE = 5.0


@dataclass
class Result:
    scenario: str
    status: str
    detail: str
    duration_ms: int


@dataclass
class Report:
    mode: str
    target: str
    runner_key: str
    results: list[Result]
    peer: dict | None = None
    command_exit: int | None = None

    @property
    def passed(self) -> int:
        return sum(r.status == PASS for r in self.results)

    @property
    def failed(self) -> int:
        return sum(r.status == FAIL for r in self.results)

    @property
    def skipped(self) -> int:
        return sum(r.status == SKIP for r in self.results)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def text(self) -> str:
        out = []
        for r in self.results:
            word = r.status.upper()
            out.append(f"{word} {r.scenario}: {r.detail}" if r.detail and r.status != PASS
                       else f"{word} {r.scenario}")
        out.append(f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped")
        return "\n".join(out)

    def as_json(self) -> dict:
        return {
            "mode": self.mode, "target": self.target, "runner_key": self.runner_key,
            "peer": self.peer, "command_exit": self.command_exit,
            "scenarios": [asdict(r) for r in self.results],
            "passed": self.passed, "failed": self.failed, "skipped": self.skipped,
        }

    def json_text(self) -> str:
        return json.dumps(self.as_json(), ensure_ascii=False, indent=2)


def select_scenarios(names: list[str]) -> list[Scenario]:
    """The chosen scenarios in catalogue order; ``ValueError`` naming unknown ones."""
    if not names:
        return list(SCENARIOS)
    known = {s.name for s in SCENARIOS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)} (see awp conform --list)")
    wanted = set(names)
    return [s for s in SCENARIOS if s.name in wanted]


def make_tracer(label: str, stream=None) -> Tracer:
    def trace(arrow: str, text: str) -> None:
        target = stream or sys.stderr
        try:
            target.write(f"[{label}] {arrow} {text}\n")
            target.flush()
        except (OSError, ValueError):
            pass
    return trace


class _Tracing:
    """A tracer whose label follows the scenario being run."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.label = ""

    def __call__(self, arrow: str, text: str) -> None:
        make_tracer(self.label)(arrow, text)

    def get(self) -> Tracer | None:
        return self if self.enabled else None


def _problems_since(conns: list[PeerConn], marks: dict[int, int]) -> list[str]:
    out: list[str] = []
    for c in conns:
        out += c.problems[marks.get(id(c), 0):]
    return out


def _finish(name: str, start: float, status: str, detail: str,
            problems: list[str]) -> Result:
    if status == FAIL and "non-JSON line" in detail:
        problems = [p for p in problems if not p.startswith(("line is not", "line of"))]
    if problems:
        shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)"
                                           if len(problems) > 3 else "")
        if status == PASS:
            status, detail = FAIL, f"schema: {shown}"
        elif status == FAIL:
            detail = f"{detail}; schema: {shown}"
    return Result(name, status, detail, int((time.monotonic() - start) * 1000))


def _run_one(scn: Scenario, ctx: Ctx, watched: list[PeerConn], *,
             from_start: bool = False) -> Result:
    """Run one scenario; schema problems of the peer's lines during it fail it
    (``from_start``: also those from before, i.e. a quiet handshake)."""
    start = time.monotonic()
    marks = {} if from_start else {id(c): len(c.problems) for c in watched}
    status, detail = PASS, ""
    try:
        detail = scn.run(ctx) or ""
    except Fail as e:
        status, detail = FAIL, str(e)
    except Skip as e:
        status, detail = SKIP, str(e)
    except TimeoutError:
        status, detail = FAIL, "timed out"
    except OSError as e:
        status, detail = FAIL, f"connection error: {e.strerror or e}"
    conns = list(dict.fromkeys([*watched, *ctx.conns]))
    if ctx.shared is not None and ctx.shared.conn not in conns:
        conns.append(ctx.shared.conn)
    return _finish(scn.name, start, status, detail, _problems_since(conns, marks))


def run_connect(address: str, scenarios: list[Scenario], *, timeout: float,
                trace: bool = False, board_topic: str = "", ca_file: str = "",
                owner_run: str = "") -> Report:
    """Each scenario on its own connection to ``address`` (``ca_file``: for wss://)."""
    identity = Identity.generate()
    ids = IdGenerator()
    tracing = _Tracing(trace)
    results: list[Result] = []
    peer: dict | None = None
    for scn in scenarios:
        tracing.label = scn.name
        ctx = Ctx(identity=identity, ids=ids, deadline=time.monotonic() + timeout,
                  tracer=tracing.get(), address=address, board_topic=board_topic,
                  ca_file=ca_file, owner_run=owner_run)
        try:
            res = _run_one(scn, ctx, [])
        finally:
            ctx.close()
        peer = peer or ctx.peer
        results.append(res)
    return Report("connect", address, identity.key, results, peer=peer)


class _Command:
    """The peer's command in listen mode: its own process group, output kept."""

    def __init__(self, template: str, address: str, trace: bool) -> None:
        self.cmdline = template.replace("{addr}", shlex.quote(address))
        self.trace = trace
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", self.cmdline], stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)
        if trace:
            make_tracer("run")("*", f"started: {self.cmdline}")

    def failed_early(self) -> str:
        code = self.proc.poll()
        if code is None or code == 0:
            return ""
        return f"the peer's command exited with status {code} before dialing in{self.tail()}"

    def tail(self, n: int = 3) -> str:
        try:
            self.log.seek(0)
            lines = self.log.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return (": " + " | ".join(lines[-n:])) if lines else ""

    def stop(self) -> int | None:
        """Let the command finish (bounded), then end its process group."""
        try:
            self.proc.wait(COMMAND_GRACE)
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.trace:
            try:
                self.log.seek(0)
                for ln in self.log.read().decode("utf-8", "replace").splitlines():
                    make_tracer("run")("|", ln)
            except OSError:
                pass
        self.log.close()
        return self.proc.returncode


def run_listen(listen: str, command: str, scenarios: list[Scenario], *, timeout: float,
               trace: bool = False, board_topic: str = "") -> Report:
    """Listen, run the peer's command, and run on its one inbound connection
    the scenarios that can share a connection (the others are skipped)."""
    identity = Identity.generate()
    ids = IdGenerator()
    tracing = _Tracing(trace)
    lst = Listener(listen)
    shared_ok = [s for s in scenarios if not s.own_connection]
    results: dict[str, Result] = {}
    for s in scenarios:
        if s.own_connection:
            results[s.name] = Result(
                s.name, SKIP, "needs its own connection (listen mode shares the one the peer"
                " dialed)", 0)
    exit_code: int | None = None
    peer: dict | None = None
    try:
        if shared_ok:
            cmd = _Command(command, lst.address, trace)
            try:
                peer = _listen_scenarios(lst, cmd, shared_ok, identity, ids, tracing, timeout,
                                         results, board_topic)
            finally:
                exit_code = cmd.stop()
    finally:
        lst.close()
    ordered = [results[s.name] for s in scenarios]
    return Report("listen", lst.address, identity.key, ordered, peer=peer,
                  command_exit=exit_code)


def _listen_scenarios(lst: Listener, cmd: _Command, todo: list[Scenario], identity: Identity,
                      ids: IdGenerator, tracing: _Tracing, timeout: float,
                      results: dict[str, Result], board_topic: str = "") -> dict | None:
    start = time.monotonic()
    first = todo[0]
    tracing.label = first.name
    try:
        sock = lst.accept(start + timeout, cmd.failed_early)
    except TimeoutError:
        why = f"no inbound connection within {timeout:g}s" + cmd.tail()
        for s in todo:
            results[s.name] = Result(s.name, FAIL, why, int((time.monotonic() - start) * 1000))
        return None
    except Fail as e:
        for s in todo:
            results[s.name] = Result(s.name, FAIL, str(e), int((time.monotonic() - start) * 1000))
        return None
    conn = PeerConn(sock, lst.address, ids, tracing.get())
    conn.note(f"accepted a connection on {lst.address}")
    try:
        ctx = Ctx(identity=identity, ids=ids, deadline=time.monotonic() + timeout,
                  tracer=tracing.get(), accepted=conn, board_topic=board_topic)
        rest = todo
        if first.name == "handshake":
            conn.scenario = first.name
            results[first.name] = _run_one(first, ctx, [conn])
            rest = todo[1:]
            if results[first.name].status != PASS and ctx.shared is None:
                for s in rest:
                    results[s.name] = Result(s.name, FAIL, "no session: the handshake failed", 0)
                return ctx.peer
        else:
            # No handshake scenario chosen: shake hands quietly; its problems
            # count against the first scenario, as in connect mode.
            try:
                ctx.shared = handshake(ctx, ctx.fresh(), strict=False)
            except Fail as e:
                for s in todo:
                    results[s.name] = Result(s.name, FAIL, f"handshake failed: {e}", 0)
                return ctx.peer
        for i, scn in enumerate(rest):
            tracing.label = scn.name
            conn.scenario = scn.name
            ctx.deadline = time.monotonic() + timeout
            results[scn.name] = _run_one(scn, ctx, [conn],
                                         from_start=i == 0 and first.name != "handshake")
    finally:
        conn.close()
    return ctx.peer
