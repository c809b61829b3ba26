"""The ``limits`` config object: every key validated, sizes and durations parsed."""

import pytest

from awp.base.limits import Limits, describe, limits_from_config, parse_size


def test_defaults_when_absent():
    assert limits_from_config(None) == Limits()


def test_sizes_durations_counts_parse():
    lim = limits_from_config({"peer_stored_bytes": "2GiB", "write_timeout": "5s",
                              "connections": 10, "peer_lines_per_second": 50})
    assert lim.peer_stored_bytes == 2 * 1024 ** 3
    assert lim.write_timeout == 5.0
    assert lim.connections == 10
    assert lim.peer_lines_per_second == 50.0
    assert describe(lim)["connections"] == 10


@pytest.mark.parametrize("raw, words", [
    ({"nope": 1}, "limits.nope: unknown limit"),
    ({"grant_bytes": "lots"}, "limits.grant_bytes: expected a size"),
    ({"connections": 1.5}, "limits.connections: expected a whole number"),
    ({"connections": True}, "limits.connections: expected a number"),
    ({"write_timeout": "soon"}, "limits.write_timeout"),
    ("8MiB", "limits: expected an object"),
])
def test_bad_values_name_the_key(raw, words):
    with pytest.raises(ValueError) as e:
        limits_from_config(raw)
    assert words in str(e.value)


def test_parse_size_units():
    assert parse_size("64KiB") == 65536
    assert parse_size("8MB") == 8_000_000
    assert parse_size(12) == 12
    with pytest.raises(ValueError):
        parse_size(-1)
