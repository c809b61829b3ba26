"""Numbers from a peer: what counts as a count, and values no float can hold."""

from __future__ import annotations

import pytest

from awp.serve.exec import ExecError, _parse
from awp.wire.numbers import INT64_MAX, is_count


@pytest.mark.parametrize("v,ok", [
    (0, True), (1, True), (INT64_MAX, True), (INT64_MAX + 1, False), (-1, False),
    (True, False), (False, False), (1.0, False), ("1", False), (None, False),
])
def test_is_count(v, ok):
    assert is_count(v) is ok


def test_exec_timeout_too_large_for_a_float_is_a_request_error(tmp_path):
    """float(10**400) raised OverflowError out of the request, which then got no answer."""
    with pytest.raises(ExecError):
        _parse(str(tmp_path), {"cmd": ["true"], "timeout": 10 ** 400})
    assert _parse(str(tmp_path), {"cmd": ["true"], "timeout": 10 ** 30})[3] == 1e30
