"""``awp daemon`` runs without typer: an idle daemon should not hold the CLI in memory."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The daemon's run is replaced by one that reports what got imported and
# exits with a code of its own, so the test needs no daemon at all.
_PROBE = """
import sys
import awp.daemon.app as d
def run(home, flags):
    print("typer" in sys.modules, "awp.cli.app" in sys.modules, home, flags.no_tailcat,
          flags.listen)
    return 3
d.run = run
from awp.cli.entry import main
raise SystemExit(main(sys.argv[1:]))
"""


def _probe(tmp_path, *args: str, fast: str = "1") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, AWP_FASTPATH=fast)
    return subprocess.run([sys.executable, "-c", _PROBE, "daemon", "--home", str(tmp_path),
                           *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_daemon_starts_without_typer_and_exits_with_its_status(tmp_path):
    r = _probe(tmp_path, "--no-tailcat", "--listen", "tcp:127.0.0.1:0")
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["False", "False", str(tmp_path), "True",
                                "['tcp:127.0.0.1:0']"]


def test_through_typer_the_daemon_gets_the_same_options(tmp_path):
    r = _probe(tmp_path, "--no-tailcat", "--listen", "tcp:127.0.0.1:0", fast="0")
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["True", "True", str(tmp_path), "True", "['tcp:127.0.0.1:0']"]
