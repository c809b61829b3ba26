"""Running the awp daemon as a systemd *user* service.

Stdlib only, and nothing here needs the daemon: the CLI's ``service`` command
calls these functions and prints what they return.

API (every function takes the home as given on the command line; it is made
absolute the way :func:`awp.base.home.resolve_home` does):

``unit_text(awp_argv, home, *, extra_env=None) -> str``
    The unit file: ``Type=notify`` (the daemon sends ``READY=1``), restart on
    failure, stop with SIGTERM, installed into ``default.target``.
``unit_name(home) -> str``
    ``awp.service`` for ``~/.awp``, else ``awp-<8 hex of sha256(home)>.service``.
``unit_dir(env=None) -> str``
    ``$XDG_CONFIG_HOME/systemd/user``, else ``~/.config/systemd/user``.
``awp_command() -> list[str]``
    The argv that runs this installation of awp.
``install(home, awp_argv=None, *, start=True, ...) -> dict``
    Write the unit (atomically, 0644), then ``systemctl --user daemon-reload``
    and ``systemctl --user enable [--now] UNIT``.  When a daemon already holds
    the home's lock, ``enable`` only, then: the service is that daemon ->
    ``restart`` it if the unit changed; it is not (started on demand) -> a
    warning to ``awp down`` first (starting would fail on the lock; the CLI
    may stop that daemon and call install again).  Keys: ``unit``,
    ``unit_path``, ``home``, ``changed`` (the file's content changed),
    ``enabled``, ``started``, ``commands_run`` (argv lists, in order),
    ``warnings`` (what went wrong, with what to do) and ``notes`` (advice,
    e.g. lingering).  Raises :class:`ServiceError` (an ``OSError``) only when
    the unit cannot be written; systemctl failures become warnings.
``uninstall(home, ...) -> dict``
    ``systemctl --user disable --now UNIT``, remove the file, daemon-reload.
    Idempotent.  Keys: ``unit``, ``unit_path``, ``home``, ``removed``,
    ``commands_run``, ``warnings``.
``status(home, ...) -> dict``
    Keys: ``unit``, ``unit_path``, ``home``, ``installed``, ``systemctl``
    (whether it exists), ``active`` / ``enabled`` (what ``systemctl --user
    is-active`` / ``is-enabled`` print, or None), ``daemon_running`` (a daemon
    holds the home's lock, however it was started), ``linger``,
    ``up_to_date`` (when ``awp_argv`` is given: the installed file is what
    install would write now), ``commands_run``, ``warnings``.
``verify(unit_path, runner=subprocess.run) -> str | None``
    ``systemd-analyze verify --user``'s complaints, or None.

Every function that runs programs takes ``runner`` (called like
``subprocess.run``) and ``which`` (called like ``shutil.which``) so tests can
fake both; ``env`` is only used to find the unit directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..base.files import write_atomic
from ..base.home import DEFAULT_HOME, is_locked, read_pid

DOCS_URL = "https://docs.agentwireprotocol.com/reference/cli"
QUICK_TIMEOUT = 30.0  # daemon-reload, is-active, disable ...
START_TIMEOUT = 120.0  # enable --now waits for READY=1 (TimeoutStartSec is 90 s)

Runner = Callable[..., Any]
Which = Callable[[str], "str | None"]


class ServiceError(OSError):
    """The unit file cannot be written or removed; the message says which and why."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


# --- the unit file ------------------------------------------------------------------


def _norm_home(home: str) -> str:
    return os.path.abspath(os.path.expanduser(home))


def unit_name(home: str) -> str:
    """``awp.service`` for the default home, ``awp-<hash>.service`` for any other."""
    home = _norm_home(home)
    if home == _norm_home(DEFAULT_HOME):
        return "awp.service"
    digest = hashlib.sha256(home.encode("utf-8", "surrogateescape")).hexdigest()
    return f"awp-{digest[:8]}.service"


def unit_dir(env: Mapping[str, str] | None = None) -> str:
    """Where user units live: ``$XDG_CONFIG_HOME/systemd/user`` or ``~/.config/...``."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(xdg):  # the XDG spec says to ignore relative values
        home = env.get("HOME") or os.path.expanduser("~")
        xdg = os.path.join(home, ".config")
    return os.path.join(xdg, "systemd", "user")


# Words systemd takes as they are (after %-escaping); anything else is quoted.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _c_escape(s: str) -> str:
    """Escape for the inside of a double-quoted systemd word (C-style escapes)."""
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), s)


def _check_text(s: str, what: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8, which a unit file needs: {s!r}") from None


def _exec_word(arg: str, *, first: bool) -> str:
    """One ExecStart= word: ``%`` as ``%%``, ``$`` as ``$$``, quoted when needed.

    The executable itself undergoes no ``$`` expansion, and systemd refuses
    one containing quotes, backslashes or control characters.
    """
    _check_text(arg, "a command-line argument")
    if first:
        if not os.path.isabs(arg):
            raise ValueError(f"the executable must be an absolute path: {arg!r}")
        if re.search(r"[\x00-\x1f\x7f\"'\\]", arg):
            raise ValueError(
                f"systemd refuses an executable path with quotes, backslashes or control "
                f"characters: {arg!r}; install awp elsewhere")
    s = arg.replace("%", "%%")
    if not first:
        s = s.replace("$", "$$")
    if _PLAIN.fullmatch(arg):
        return s
    return f'"{_c_escape(s)}"'


def exec_line(argv: Sequence[str]) -> str:
    """argv as the value of ``ExecStart=``."""
    if not argv:
        raise ValueError("empty command line")
    return " ".join(_exec_word(a, first=i == 0) for i, a in enumerate(argv))


def _environment_line(name: str, value: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"not an environment variable name: {name!r}")
    _check_text(value, f"the value of {name}")
    return f'Environment="{_c_escape(f"{name}={value}".replace("%", "%%"))}"'


def unit_text(
    awp_argv: Sequence[str], home: str, *, extra_env: Mapping[str, str] | None = None
) -> str:
    """The unit that runs ``<awp_argv> daemon --home HOME`` under the user's systemd."""
    home = _norm_home(home)
    _check_text(home, "the home")
    env_lines = [_environment_line("AWP_HOME", home)]
    for k, v in (extra_env or {}).items():
        if k == "AWP_HOME":
            raise ValueError("AWP_HOME comes from the home; do not pass it in extra_env")
        env_lines.append(_environment_line(k, v))
    # Description= takes specifiers but no quoting or escapes.
    shown = _CONTROL.sub("?", home).replace("%", "%%")
    lines = [
        "# Written by awp (awp.daemon.service); reinstalling overwrites it.",
        "[Unit]",
        f"Description=awp peer daemon ({shown})",
        f"Documentation={DOCS_URL}",
        "After=network-online.target",
        "Wants=network-online.target",
        # A daemon that keeps failing (for one, another daemon holds the home's
        # lock) is given up on instead of being restarted every 2 s forever.
        "StartLimitIntervalSec=60",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=" + exec_line([*awp_argv, "daemon", "--home", home]),
        *env_lines,
        "Restart=on-failure",
        "RestartSec=2",
        "TimeoutStopSec=20",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


# --- which awp ----------------------------------------------------------------------


def _same_installation(script: str) -> bool:
    """Whether ``script`` is the console script of the Python running this code.

    Best effort: a Python script whose ``#!`` interpreter lives in the same
    directory as ``sys.executable`` (the same venv, pipx environment or
    prefix), or that sits next to it.  A binary (the Go awp) never matches.
    """
    try:
        with open(script, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if not head.startswith(b"#!") or b"awp" not in head:
        return False
    first = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not first or "python" not in " ".join(first):
        return False
    exe = os.path.abspath(sys.executable) if sys.executable else ""
    if not exe:
        return False
    interp = first[0]
    try:
        if os.path.basename(interp) == "env":  # "#!/usr/bin/env python3": only next to us
            return os.path.samefile(os.path.dirname(os.path.abspath(script)),
                                    os.path.dirname(exe))
        return os.path.samefile(os.path.dirname(interp), os.path.dirname(exe))
    except OSError:
        return False


def awp_command(which: Which | None = None) -> list[str]:
    """The argv that runs this awp: its ``awp`` script when found, else ``python -I -m awp``.

    A console script puts its own directory, not the current one, on
    ``sys.path``; the interpreter form runs with isolated imports
    (:mod:`awp.base.selfcmd`), so neither runs code from the directory it starts in.
    """
    which = which or shutil.which
    exe = os.path.abspath(sys.executable) if sys.executable else ""
    candidates = [which("awp")]
    if exe:
        candidates.append(os.path.join(os.path.dirname(exe), "awp"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK) and _same_installation(c):
            return [os.path.abspath(c)]
    from ..base.selfcmd import python_argv

    return list(python_argv())


# --- systemctl ----------------------------------------------------------------------


def _run(result: dict, runner: Runner, argv: list[str], timeout: float = QUICK_TIMEOUT):
    """Run a command, record it, and turn any failure into a warning.

    Returns the completed process, or None when it could not run at all.
    """
    result["commands_run"].append(argv)
    try:
        return runner(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        result["warnings"].append(f"{' '.join(argv)} did not finish in {timeout:.0f} s")
    except (OSError, subprocess.SubprocessError) as e:
        result["warnings"].append(f"{' '.join(argv)} could not run: {e}")
    return None


def _systemctl(result: dict, runner: Runner, *args: str, timeout: float = QUICK_TIMEOUT) -> bool:
    """``systemctl --user ARGS``; True when it succeeded, else a warning is added."""
    argv = ["systemctl", "--user", *args]
    r = _run(result, runner, argv, timeout)
    if r is None:
        return False
    if r.returncode != 0:
        why = ((r.stderr or "").strip() or (r.stdout or "").strip() or "no output")
        result["warnings"].append(f"{' '.join(argv)} failed (exit {r.returncode}): {why}")
        return False
    return True


def _linger() -> bool | None:
    """Whether the user's services keep running after logout (``loginctl enable-linger``)."""
    try:
        import pwd

        user = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return None
    return os.path.exists(os.path.join("/var/lib/systemd/linger", user))


def _locate(home: str, env: Mapping[str, str] | None) -> tuple[str, str, str]:
    home = _norm_home(home)
    name = unit_name(home)
    return home, name, os.path.join(unit_dir(env), name)


def _write_unit(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` atomically with mode 0644; whether it changed."""
    try:
        with open(path, encoding="utf-8") as f:
            before = f.read()
    except (OSError, UnicodeDecodeError):
        before = None
    d = os.path.dirname(path)
    try:
        os.makedirs(d, mode=0o755, exist_ok=True)
    except OSError as e:
        raise ServiceError(e.errno, f"cannot create {d}: {e.strerror}") from None
    try:
        write_atomic(path, text, 0o644)
    except OSError as e:
        raise ServiceError(e.errno, f"cannot write {path}: {e.strerror or e}") from None
    return before != text


def install(
    home: str,
    awp_argv: Sequence[str] | None = None,
    *,
    start: bool = True,
    runner: Runner = subprocess.run,
    env: Mapping[str, str] | None = None,
    which: Which | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict:
    """Write the unit and enable it (and start it, unless ``start`` is false).

    ``awp_argv`` defaults to :func:`awp_command`.  Raises :class:`ServiceError`
    when the unit cannot be written and ``ValueError`` when the command line
    cannot be expressed in a unit; never raises for systemctl.
    """
    which = which or shutil.which
    home, name, path = _locate(home, env)
    argv = list(awp_argv) if awp_argv else awp_command(which)
    if not os.path.isabs(argv[0]):
        found = which(argv[0])
        if found:
            argv[0] = os.path.abspath(found)
    text = unit_text(argv, home, extra_env=extra_env)
    changed = _write_unit(path, text)
    result: dict = {
        "unit": name, "unit_path": path, "home": home, "changed": changed,
        "enabled": False, "started": False, "commands_run": [], "warnings": [], "notes": [],
    }
    now = " --now" if start else ""
    if not which("systemctl"):
        result["warnings"].append(
            f"systemctl not found: start it with systemctl --user enable{now} {name}"
            " on a machine with systemd")
        return result
    ok = _systemctl(result, runner, "daemon-reload")
    if ok and start and is_locked(home):
        # A daemon already runs for this home: the service itself (a reinstall),
        # or one another command started on demand, which a service start would
        # only collide with (the home's lock) and fail.
        ok = _systemctl(result, runner, "enable", name)
        result["enabled"] = ok
        r = _run(result, runner, ["systemctl", "--user", "is-active", name]) if ok else None
        if r is not None and (r.stdout or "").strip() == "active":
            if changed:
                result["started"] = _systemctl(result, runner, "restart", name,
                                               timeout=START_TIMEOUT)
            else:
                result["started"] = True
        elif ok:
            pid = read_pid(home)
            who = f" (pid {pid})" if pid else ""
            result["warnings"].append(
                f"an awp daemon started outside systemd is running for this home{who}:"
                f" stop it with awp down, then systemctl --user start {name}")
    elif ok:
        args = ["enable", "--now", name] if start else ["enable", name]
        ok = _systemctl(result, runner, *args, timeout=START_TIMEOUT if start else QUICK_TIMEOUT)
        result["enabled"] = ok
        result["started"] = ok and start
    if not ok:
        result["warnings"].append(
            f"the unit is written to {path}; once the user's systemd is reachable run:"
            f" systemctl --user daemon-reload && systemctl --user enable{now} {name}")
    elif _linger() is False:
        result["notes"].append(
            "the service runs while you are logged in; to keep it running after logout:"
            " loginctl enable-linger")
    return result


def uninstall(
    home: str,
    *,
    runner: Runner = subprocess.run,
    env: Mapping[str, str] | None = None,
    which: Which | None = None,
) -> dict:
    """Stop and disable the service and remove its unit; nothing to do is not an error."""
    which = which or shutil.which
    home, name, path = _locate(home, env)
    installed = os.path.lexists(path)
    result: dict = {
        "unit": name, "unit_path": path, "home": home, "removed": False,
        "commands_run": [], "warnings": [],
    }
    systemctl = bool(which("systemctl"))
    ok = systemctl and installed
    if ok:
        ok = _systemctl(result, runner, "disable", "--now", name)
    # enable's symlink, if disable could not remove it (no systemctl, no bus).
    wants = os.path.join(os.path.dirname(path), "default.target.wants", name)
    if os.path.islink(wants):
        try:
            os.unlink(wants)
        except OSError as e:
            result["warnings"].append(f"cannot remove {wants}: {e.strerror}")
    if installed:
        try:
            os.unlink(path)
            result["removed"] = True
        except FileNotFoundError:
            pass
        except OSError as e:
            raise ServiceError(e.errno, f"cannot remove {path}: {e.strerror}") from None
        if ok:
            _systemctl(result, runner, "daemon-reload")
        elif not systemctl:
            result["warnings"].append(
                f"systemctl not found: if the service is running elsewhere, stop it with"
                f" systemctl --user disable --now {name}")
    return result


def status(
    home: str,
    *,
    runner: Runner = subprocess.run,
    env: Mapping[str, str] | None = None,
    which: Which | None = None,
    awp_argv: Sequence[str] | None = None,
) -> dict:
    """Where the unit is, whether it is installed, and what systemd says about it."""
    which = which or shutil.which
    home, name, path = _locate(home, env)
    installed = os.path.isfile(path)
    result: dict = {
        "unit": name, "unit_path": path, "home": home, "installed": installed,
        "systemctl": False, "active": None, "enabled": None,
        "daemon_running": is_locked(home), "linger": None, "up_to_date": None,
        "commands_run": [], "warnings": [],
    }
    if installed and awp_argv:
        try:
            with open(path, encoding="utf-8") as f:
                result["up_to_date"] = f.read() == unit_text(awp_argv, home)
        except (OSError, UnicodeDecodeError, ValueError):
            result["up_to_date"] = False
    if not which("systemctl"):
        return result
    result["systemctl"] = True
    result["linger"] = _linger()
    for key, verb in (("active", "is-active"), ("enabled", "is-enabled")):
        r = _run(result, runner, ["systemctl", "--user", verb, name])
        if r is None:
            continue
        # Non-zero exits are answers too ("inactive", "disabled"); only an
        # empty stdout means systemctl could not tell.
        answer = (r.stdout or "").strip()
        if answer:
            result[key] = answer.splitlines()[0]
        else:
            why = (r.stderr or "").strip() or f"exit {r.returncode}"
            result["warnings"].append(f"systemctl --user {verb} {name}: {why}")
    return result


def verify(
    unit_path: str, runner: Runner = subprocess.run, *, which: Which | None = None
) -> str | None:
    """``systemd-analyze verify --user``'s complaints about a unit file.

    None when it has none, or when systemd-analyze is not installed or cannot
    run.  Warnings that do not fail the command (an unknown value "ignored")
    count as complaints when they name the unit.  Without ``XDG_RUNTIME_DIR``
    (a container, a cron job) a private temporary one is used.
    """
    which = which or shutil.which
    if not which("systemd-analyze"):
        return None
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="awp-verify-") as rt:
        if not os.path.isdir(env.get("XDG_RUNTIME_DIR") or ""):
            env["XDG_RUNTIME_DIR"] = rt
        try:
            r = runner(["systemd-analyze", "verify", "--user", unit_path],
                       capture_output=True, text=True, timeout=QUICK_TIMEOUT, check=False, env=env)
        except (OSError, subprocess.SubprocessError):
            return None
    out = "\n".join(x.strip() for x in (r.stdout or "", r.stderr or "") if x.strip())
    base = os.path.basename(unit_path)
    if r.returncode != 0 or any(base in line for line in out.splitlines()):
        return out or f"systemd-analyze verify exited {r.returncode}"
    return None
