"""bench/mesh.py runs end to end on a tiny line and prints every figure.

The timings themselves are not asserted (a shared 2-core machine moves them
by 2x and more); what is: each figure prints with its target and a verdict,
the relay killed -9 heals without anyone connecting, and every post reaches
every host (a line of 4 is well inside 8 links).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from nodes import ROOT

FIGURE = re.compile(r"\(target [^)]*\) (ok|MISS)$")


def test_mesh_bench_prints_every_figure_and_heals():
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env.pop("AWP_BENCH_KEEP", None)
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "mesh.py"), "--hosts", "4", "--topology",
         "line", "--posts", "40", "--calm", "10", "--rate", "10", "--kills", "2", "--down", "1",
         "--settle", "30"],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    out = r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    figures = {ln.split(":")[0]: ln for ln in out.splitlines() if FIGURE.search(ln)}
    assert set(figures) == {"spread, line of 4", "healing, line of 4", "presence, line of 4"}, out
    assert "0 of 30 deliveries missing" in figures["spread, line of 4"], out
    assert re.search(r"p99 [\d.]+ s; 0 of 2 not healed", figures["healing, line of 4"]), out
    assert "100.00% of (post, host) pairs present" in figures["presence, line of 4"], out
    assert r.returncode in (0, 1), r.stderr  # 1: a timing target missed on this machine
