"""Test modules need distinct basenames: pytest imports them by basename
(rootdir-relative packages are not used here), so two `test_x.py` in
different folders make collection fail on a clean clone."""

from collections import Counter
from pathlib import Path


def test_no_two_test_modules_share_a_basename():
    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
