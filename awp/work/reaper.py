"""The keeper between ``awp work`` and one item's command: no process of it outlives it.

A process group alone does not hold a command's processes: a child that
calls ``setsid`` leaves the group, and a worker killed with SIGKILL can
signal nothing.  So every command is started under this small process (run
by file path with ``python -I``: stdlib only, nothing of ``awp`` imported),
which

* makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a
  descendant whose parent exits, ``setsid`` or not, becomes its child, so
  every process the command started stays in its tree and can be found
  (through ``/proc``);
* watches a pipe whose other end only the worker holds: end of file means
  the worker is gone (killed, crashed) or asks it to stop; either way
  everything below it gets SIGTERM, then SIGKILL after the grace, and on a
  worker's death the item's directory is removed (nobody else will);
* sets ``PR_SET_PDEATHSIG`` on the command, so the command itself dies
  even if this keeper is killed with SIGKILL;
* when the command exits, ends what it left running (an item's processes
  end with the item) and exits with the command's status: the same code,
  or the same signal.

Where there is no ``/proc`` or ``prctl`` (not Linux) only the command's
process group is signalled; docs/threat-model.md says what an escapee can
do there.

Usage: ``python -I reaper.py FD GRACE DIR -- COMMAND [ARGS...]`` where
``FD`` is the read end of the worker's pipe, ``GRACE`` seconds between
SIGTERM and SIGKILL and ``DIR`` the item directory to remove on the
worker's death ("" for none).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP = b"s"  # the worker's "stop the command" (then it closes its end); EOF alone: it died


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:
    """In the command (before exec): SIGKILL when this keeper dies, however it dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from ``/proc``); [] where there is none."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                after = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if after[0] != b"Z":
            children.setdefault(int(after[1]), []).append(int(name))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _signal_all(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except OSError:
        pass
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _reap() -> None:
    """Collect every exited child (orphans of the command land here as a subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_all(cmd: subprocess.Popen, grace: float) -> None:
    """SIGTERM everything below this process, SIGKILL what is left after ``grace``."""
    _signal_all(cmd.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        cmd.poll()
        _reap()
        if cmd.returncode is not None and not descendants(os.getpid()):
            return
        time.sleep(0.02)
    for _ in range(100):  # a process forking while it is killed: until none is left
        _signal_all(cmd.pid, signal.SIGKILL)
        try:
            cmd.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        _reap()
        if not descendants(os.getpid()):
            return
        time.sleep(0.01)


def _exit_as(code: int) -> None:
    """Exit the way the command did: its status, or killed by its signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF if code >= 0 else 1)


def main(argv: list[str]) -> None:
    fd, grace, directory = int(argv[0]), float(argv[1]), argv[2]
    command = argv[4:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: stopping.append(s))
    signal.signal(signal.SIGCHLD, lambda _s, _f: None)  # wakes the select below
    try:
        cmd = subprocess.Popen(command, process_group=0, preexec_fn=_die_with_parent)
    except OSError as e:
        print(f"cannot run {command[0]}: {e}", file=sys.stderr, flush=True)
        os._exit(127)
    watching = True
    while cmd.poll() is None and not stopping:
        ready, _, _ = select.select([fd, wake_r] if watching else [wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
        if watching and fd in ready:
            said = os.read(fd, 1)
            watching = False
            if said != STOP and directory:
                end_all(cmd, grace)  # the worker died: nobody else cleans up after it
                shutil.rmtree(directory, ignore_errors=True)
                os._exit(1)
            stopping.append(signal.SIGTERM)
    end_all(cmd, grace)
    _exit_as(cmd.returncode if cmd.returncode is not None else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
