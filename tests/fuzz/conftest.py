"""Hypothesis profiles for the fuzz tests.

``ci`` (the default) keeps every fuzz test together well under half a minute
on a small machine, so the suite can run them on every change; ``long`` is
what ``bench/fuzz.py`` uses for runs of many minutes.  Pick one with
``AWP_FUZZ_PROFILE``.  No example database: a failure is reported with its
example, which then becomes an ``@example`` or a unit test.  ``ci`` is
derandomized: every run of the suite tries the same examples, so a red CI
means a change broke something; finding new bugs is ``long``'s job.
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

# No deadline and no health checks: on a loaded machine they fail for the
# machine's sake, not the code's; the properties are what is being tested.
settings.register_profile(
    "ci", max_examples=60, deadline=None, database=None, print_blob=True, derandomize=True,
    suppress_health_check=list(HealthCheck))
settings.register_profile(
    "long", max_examples=2000, deadline=None, database=None, print_blob=True,
    suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("AWP_FUZZ_PROFILE", "ci"))
