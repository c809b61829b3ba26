"""The command line that runs this awp again, as a child or from a config file.

Whenever awp starts its own Python code in another process (the daemon
started on demand, the systemd unit, the commands ``awp bootstrap`` writes
into harness configs), the child must run *this* installation's code and
nothing from the directory it happens to start in.  ``python -m awp`` puts the
current directory first on ``sys.path``, so a project that contains an
``awp/`` package would have its own code run by every awp command started
inside it.

So children run with isolated imports (``-I``: no current directory, no
``PYTHONPATH``, no user site).  ``-I`` can also hide awp itself, when it was
found through ``PYTHONPATH``, the user site or a source checkout; one quick
probe tells, and then the child is told where awp lives instead
(``-I -c`` with that directory put first on ``sys.path``).

Stdlib only and cheap to import: the CLI's daemon start imports it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

#: How long the one probe of ``python -I`` may take.
PROBE_TIMEOUT = 20.0

_PROBE = "import awp, sys; sys.stdout.write(awp.__file__)"


def python() -> str:
    """The absolute path of the running interpreter."""
    return os.path.abspath(sys.executable) if sys.executable else "python3"


def package_dir() -> str:
    """The directory holding the ``awp`` package that is running now."""
    import awp

    return os.path.dirname(os.path.dirname(os.path.abspath(awp.__file__)))


def isolated_finds_us(exe: str) -> bool:
    """Whether ``exe -I`` imports the very awp that is running now.

    True for an ordinary or an editable install in the interpreter's own
    site-packages; false when awp is reachable only through ``PYTHONPATH``,
    the user site or the current directory.
    """
    import awp

    try:
        res = subprocess.run([exe, "-I", "-c", _PROBE], cwd="/", stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    if res.returncode != 0:
        return False
    try:
        return os.path.samefile(res.stdout.decode("utf-8", "replace"), awp.__file__)
    except OSError:
        return False


def pinned_code(root: str) -> str:
    """``-c`` code that runs the awp CLI found in ``root`` (and nowhere else first).

    It ends in ``# awp`` so that hook commands written with it still read as
    awp's own (``... awp' hook inbox``) to ``awp bootstrap``.
    """
    return (f"import sys; sys.path.insert(0, {root!r}); sys.argv[0] = 'awp'; "
            "from awp.cli.entry import program; program()  # awp")


def python_argv() -> tuple[str, ...]:
    """The argv prefix that runs this awp's CLI with isolated imports.

    ``(python, "-I", "-m", "awp")`` when that finds this installation, else
    ``(python, "-I", "-c", <code naming this installation's directory>)``.
    """
    return _argv_for(python(), package_dir())


@functools.lru_cache(maxsize=4)
def _argv_for(exe: str, root: str) -> tuple[str, ...]:
    if isolated_finds_us(exe):
        return (exe, "-I", "-m", "awp")
    return (exe, "-I", "-c", pinned_code(root))
