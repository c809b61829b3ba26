"""Fuzz bench: the properties of tests/fuzz, run for minutes instead of seconds.

Every hypothesis test in tests/fuzz (the line splitter, envelope parsing, the
handshake, presence documents and batches, check_grant, addresses, canonical
JSON, the blob receiver, board records, policies and digests) is run in
rounds, round-robin, with fresh random examples each round, until the time
is up.  Then live daemons get the same generated lines as
tests/fuzz/test_fuzz_live.py and tests/fuzz/test_fuzz_board.py, and the same
local API requests as tests/fuzz/test_fuzz_localapi.py, many more of them.

Prints the examples run per target and every failure with its falsifying
example; exits 1 if anything failed.  A failure found here becomes an
``@example`` on the property (or a unit test) once the bug is fixed.

Run: python bench/fuzz.py [--minutes 10] [--only NAME] [--live 300]
(--only keeps targets whose name contains NAME; --live 0 skips the daemon.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_DIR = os.path.join(HERE, "..", "tests", "fuzz")
sys.path[:0] = [os.path.join(HERE, "..", "tests"), FUZZ_DIR]
os.environ["AWP_FUZZ_PROFILE"] = "long"

import conftest  # noqa: E402,F401  (registers and loads the "long" profile)
from hypothesis import settings  # noqa: E402

ROUND_EXAMPLES = 200  # per target per round: a few seconds each, so the clock is kept


def targets(only: str) -> list[tuple[str, Callable[[], None], list[int]]]:
    """(name, runnable test, [examples run]) for every hypothesis test in tests/fuzz."""
    out = []
    for fname in sorted(os.listdir(FUZZ_DIR)):
        if not (fname.startswith("test_fuzz_") and fname.endswith(".py")):
            continue
        mod = importlib.import_module(fname[:-3])
        for attr in sorted(vars(mod)):
            fn = getattr(mod, attr)
            if not attr.startswith("test_") or not hasattr(fn, "hypothesis"):
                continue
            name = f"{fname[len('test_fuzz_'):-3]}.{attr[len('test_'):]}"
            if only and only not in name:
                continue
            counter = [0]
            inner = fn.hypothesis.inner_test

            def counted(*a, _inner=inner, _counter=counter, **kw):
                _counter[0] += 1
                return _inner(*a, **kw)

            fn.hypothesis.inner_test = counted
            out.append((name, settings(max_examples=ROUND_EXAMPLES)(fn), counter))
    return out


def run_live(fuzz: Callable[..., int], examples: int, daemons: int) -> tuple[int, str]:
    """A live-daemon property with ``examples`` connections or requests, on
    ``daemons`` fresh daemons; (ran, failure)."""
    from nodes import Node

    root = tempfile.mkdtemp(prefix="awpfz", dir="/tmp")
    nodes = [Node(os.path.join(root, f"fz{i}"), name=f"fz{i}") for i in range(daemons)]
    try:
        for node in nodes:
            node.start()
        return fuzz(*nodes, examples), ""
    except Exception:
        return 0, traceback.format_exc()
    finally:
        for node in nodes:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="time for the pure targets")
    ap.add_argument("--only", default="", help="run targets whose name contains this")
    ap.add_argument("--live", type=int, default=300,
                    help="connections of generated lines against a live daemon (0: none)")
    args = ap.parse_args()

    todo = targets(args.only)
    failures: dict[str, str] = {}
    end = time.monotonic() + args.minutes * 60
    rounds = 0
    while todo and time.monotonic() < end:
        rounds += 1
        for name, run, _counter in todo:
            if name in failures or time.monotonic() >= end:
                continue
            try:
                run()
            except Exception:
                failures[name] = traceback.format_exc()
                print(f"FAILED {name}\n{failures[name]}", flush=True)
        if all(name in failures for name, _r, _c in todo):
            break

    print(f"\n{'target':70} {'examples':>10}  result")
    for name, _run, counter in todo:
        print(f"{name:70} {counter[0]:>10}  {'FAILED' if name in failures else 'ok'}")
    if args.live and not args.only:
        from test_fuzz_board import fuzz_board_live
        from test_fuzz_live import fuzz_live
        from test_fuzz_localapi import fuzz_localapi

        for name, fuzz, daemons in (
                ("live.daemon_survives_generated_lines", fuzz_live, 1),
                ("live.daemon_survives_generated_board_lines", fuzz_board_live, 1),
                ("live.local_api_answers_any_request_without_a_500", fuzz_localapi, 2)):
            ran, failure = run_live(fuzz, args.live, daemons)
            print(f"{name:70} {ran:>10}  {'FAILED' if failure else 'ok'}")
            if failure:
                failures[name] = failure
                print(failure)
    print(f"\n{rounds} rounds in {args.minutes:g} min; {len(failures)} failing target(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
