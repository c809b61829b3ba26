"""``awp service install --work ARGS``: run ``awp work ARGS`` as a systemd user unit.

A worker is a unit of its own beside the daemon's (``awp service install``
first): systemd restarts a worker that dies, stops it with SIGTERM (the
worker then releases what it holds, or finishes within its ``--grace``) and
waits :data:`STOP_SLACK_S` longer than the grace before it kills what is
left.  One unit per home and argument list, so a host can run workers for
several queues.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from ..base.durations import parse_duration
from . import service
from .service import Runner, Which

STOP_SLACK_S = 30  # beyond the worker's --grace: its claim's long poll and its releases


def parse_work(args: str) -> list[str]:
    """The ``awp work`` arguments of ``--work "TOPIC [OPTIONS] -- COMMAND [ARGS]"``."""
    words = shlex.split(args)
    if not words or "--" not in words or words.index("--") == len(words) - 1:
        raise ValueError('--work takes "TOPIC [OPTIONS] -- COMMAND [ARGS...]", as awp work does')
    return words


def _grace(words: Sequence[str]) -> float:
    head = list(words[:words.index("--")])
    for i, w in enumerate(head):
        if w == "--grace" and i + 1 < len(head):
            return parse_duration(head[i + 1])
        if w.startswith("--grace="):
            return parse_duration(w.split("=", 1)[1])
    return 0.0


def worker_unit_name(home: str, words: Sequence[str]) -> str:
    digest = hashlib.sha256("\0".join([service._norm_home(home), *words]).encode(
        "utf-8", "surrogateescape")).hexdigest()
    return f"awp-work-{digest[:8]}.service"


def worker_unit_text(awp_argv: Sequence[str], home: str, words: Sequence[str],
                     cwd: str | None = None) -> str:
    """The worker's unit; ``cwd`` (default: where install runs) is its
    ``WorkingDirectory=``, so a relative command (``-- ./run-job.sh``) runs
    where the user meant it to, not in systemd's ``/``."""
    home = service._norm_home(home)
    cwd = os.path.abspath(cwd or os.getcwd())
    service._check_text(cwd, "the working directory")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in cwd):
        raise ValueError(f"a unit cannot name a working directory with control characters:"
                         f" {cwd!r}")
    daemon = service.unit_name(home)
    topic = words[0].replace("%", "%%")
    stop = int(_grace(words)) + STOP_SLACK_S
    return "\n".join([
        "# Written by awp (awp.daemon.work_service); reinstalling overwrites it.",
        "[Unit]",
        f"Description=awp work on {topic}",
        f"Documentation={service.DOCS_URL}",
        f"After={daemon} network-online.target",
        f"Wants={daemon}",
        "StartLimitIntervalSec=60",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + service.exec_line([*awp_argv, "work", "--home", home, *words]),
        "WorkingDirectory=" + cwd.replace("%", "%%"),  # a path to the end of the line
        service._environment_line("AWP_HOME", home),
        "Restart=on-failure",
        "RestartSec=5",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={stop}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])


def install_worker(home: str, words: Sequence[str], awp_argv: Sequence[str] | None = None, *,
                   start: bool = True, runner: Runner = subprocess.run,
                   env: Mapping[str, str] | None = None, which: Which | None = None) -> dict:
    """Write the worker's unit and enable (and start) it; keys as :func:`service.install`."""
    which = which or shutil.which
    argv = list(awp_argv) if awp_argv else service.awp_command(which)
    name = worker_unit_name(home, words)
    path = os.path.join(service.unit_dir(env), name)
    changed = service._write_unit(path, worker_unit_text(argv, home, words))
    result: dict = {"unit": name, "unit_path": path, "home": service._norm_home(home),
                    "changed": changed, "enabled": False, "started": False,
                    "commands_run": [], "warnings": [], "notes": []}
    daemon_unit = os.path.join(service.unit_dir(env), service.unit_name(home))
    if not os.path.exists(daemon_unit):
        result["warnings"].append(
            "the daemon is not a service for this home: run awp service install first, or the"
            " worker starts a daemon of its own that stops with it")
    if not which("systemctl"):
        result["warnings"].append(f"systemctl not found: enable {name} on a machine with"
                                  " systemd")
        return result
    ok = service._systemctl(result, runner, "daemon-reload")
    if ok:
        ok = service._systemctl(result, runner, "enable", name)
        result["enabled"] = ok
    if ok and start:
        verb = "restart" if changed else "start"
        result["started"] = service._systemctl(result, runner, verb, name)
    return result


def uninstall_worker(home: str, words: Sequence[str], *, runner: Runner = subprocess.run,
                     env: Mapping[str, str] | None = None, which: Which | None = None) -> dict:
    """Stop, disable and remove the worker's unit (idempotent)."""
    which = which or shutil.which
    name = worker_unit_name(home, words)
    path = os.path.join(service.unit_dir(env), name)
    result: dict = {"unit": name, "unit_path": path, "home": service._norm_home(home),
                    "removed": False, "commands_run": [], "warnings": []}
    if which("systemctl"):
        service._systemctl(result, runner, "disable", "--now", name)
    try:
        os.unlink(path)
        result["removed"] = True
    except FileNotFoundError:
        pass
    if which("systemctl"):
        service._systemctl(result, runner, "daemon-reload")
    return result
