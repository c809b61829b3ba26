"""bench/mesh.py runs end to end at small sizes and prints every figure.

The timings themselves are not asserted (a shared 2-core machine moves them
by 2x and more); what is: each figure prints with its target and a verdict;
on a topic whose readers were granted by key alone, the relay killed -9 heals
without anyone connecting and every post reaches every host; a flood evicts
no honest record; claims two hops away finish every item exactly once while
the owner is killed -9 twice and the daemons relink by themselves.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from nodes import ROOT

FIGURE = re.compile(r"\(target [^)]*\) (ok|MISS)$")


def run_bench(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("AWP_HOME", None)
    env.pop("AWP_BENCH_KEEP", None)
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "mesh.py"), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


def test_mesh_bench_prints_every_figure_and_heals():
    r = run_bench("--hosts", "4", "--topology", "line", "--posts", "40", "--calm", "10",
                  "--far", "5", "--rate", "10", "--kills", "2", "--down", "1", "--settle", "30")
    out = r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    figures = {ln.split(":")[0]: ln for ln in out.splitlines() if FIGURE.search(ln)}
    assert set(figures) == {"spread, line of 4", "stamped spread, line of 4",
                            "healing, line of 4", "presence, line of 4"}, out
    assert "0 of 30 deliveries missing" in figures["spread, line of 4"], out
    # from the far end: to the owner, stamped, and out to every other host
    assert "0 of 15 deliveries missing" in figures["stamped spread, line of 4"], out
    assert re.search(r"p99 [\d.]+ s; 0 of 2 not healed", figures["healing, line of 4"]), out
    assert "100.00% of (post, host) pairs present" in figures["presence, line of 4"], out
    assert r.returncode in (0, 1), r.stderr  # 1: a timing target missed on this machine


def test_mesh_bench_hostile_and_claims_scenarios():
    r = run_bench("--scenario", "hostile,claims", "--honest", "3", "--flood", "40", "--fresh",
                  "4", "--items", "30", "--claimants", "4", "--claim-hosts", "2", "--lease", "3")
    out = r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    hostile = [ln for ln in out.splitlines() if ln.startswith("hostile ") and "evicted" in ln]
    assert len(hostile) == 3 and all("evicted 0 of 6" in ln for ln in hostile), out
    assert re.search(r"claims +30 items.*finished more than once 0, lost 0 \(target 0\) ok", out), out
    relink = re.search(r"bob linked to alice again, no connect: ([\d.]+) s, ([\d.]+) s", out)
    assert relink, out
    assert r.returncode in (0, 1), r.stderr
