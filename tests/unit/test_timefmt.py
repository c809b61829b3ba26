"""Timestamps: RFC 3339 UTC with milliseconds out, any RFC 3339 in."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from awp.wire.timefmt import format_ts, format_ts_seconds, now_ms, parse_ts

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def ms_of(dt: datetime) -> int:
    return int(dt.timestamp()) * 1000 + dt.microsecond // 1000


BASE = datetime(2026, 9, 25, 17, 3, 11, 123000, tzinfo=UTC)
BASE_MS = ms_of(BASE)


def test_format_ts_shape_and_value():
    assert format_ts(BASE_MS) == "2026-09-25T17:03:11.123Z"
    assert TS_RE.match(format_ts(now_ms()))


def test_format_ts_is_right_whichever_second_came_before():
    # the date part is kept per second: jumping between seconds, forwards and
    # back, and across midnight must never reuse the wrong one
    times = [BASE_MS, BASE_MS + 1, BASE_MS + 999, BASE_MS + 1000, BASE_MS - 1,
             BASE_MS, ms_of(datetime(2026, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
             ms_of(datetime(2027, 1, 1, tzinfo=UTC)), BASE_MS + 1000]
    for ms in times:
        want = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        assert format_ts(ms) == f"{want}{ms % 1000:03d}Z", ms


def test_format_ts_pads_milliseconds_and_fields():
    assert format_ts(0) == "1970-01-01T00:00:00.000Z"
    assert format_ts(5) == "1970-01-01T00:00:00.005Z"
    assert format_ts(1_000 * 86_400 * 31 + 61_042) == "1970-02-01T00:01:01.042Z"
    ms = ms_of(datetime(2001, 2, 3, 4, 5, 6, 70_000, tzinfo=UTC))
    assert format_ts(ms) == "2001-02-03T04:05:06.070Z"


def test_format_ts_seconds():
    assert format_ts_seconds(BASE_MS) == "2026-09-25T17:03:11Z"


def test_round_trip():
    for ms in (0, 1, 999, BASE_MS, now_ms(), 253402300799999):
        assert parse_ts(format_ts(ms)) == ms


def test_parse_millis():
    assert parse_ts("2026-09-25T17:03:11.123Z") == BASE_MS


def test_parse_whole_seconds():
    assert parse_ts("2026-09-25T17:03:11Z") == BASE_MS - 123


def test_parse_fraction_shorter_than_millis():
    assert parse_ts("2026-09-25T17:03:11.1Z") == BASE_MS - 23
    assert parse_ts("2026-09-25T17:03:11.12Z") == BASE_MS - 3


def test_parse_nanoseconds_truncated():
    assert parse_ts("2026-09-25T17:03:11.123456789Z") == BASE_MS
    assert parse_ts("2026-09-25T17:03:11.123999999Z") == BASE_MS  # truncated, not rounded
    assert parse_ts("2026-09-25T17:03:11.000000001Z") == BASE_MS - 123


def test_parse_positive_offset():
    # 19:03:11.123+02:00 is 17:03:11.123Z
    assert parse_ts("2026-09-25T19:03:11.123+02:00") == BASE_MS
    dt = datetime(2026, 9, 25, 19, 3, 11, 123000, tzinfo=timezone(timedelta(hours=2)))
    assert parse_ts("2026-09-25T19:03:11.123+02:00") == ms_of(dt)


def test_parse_negative_offset_with_minutes():
    # 11:33:11-05:30 is 17:03:11Z
    assert parse_ts("2026-09-25T11:33:11-05:30") == BASE_MS - 123
    dt = datetime(2026, 9, 25, 11, 33, 11, tzinfo=timezone(-timedelta(hours=5, minutes=30)))
    assert parse_ts("2026-09-25T11:33:11-05:30") == ms_of(dt)


def test_parse_offset_crossing_midnight():
    assert parse_ts("2026-09-26T01:03:11.123+08:00") == BASE_MS
    assert parse_ts("2026-09-24T23:03:11.123-18:00") == BASE_MS


def test_parse_zero_offset_equals_z():
    assert parse_ts("2026-09-25T17:03:11.123+00:00") == BASE_MS
    assert parse_ts("2026-09-25T17:03:11.123-00:00") == BASE_MS


def test_parse_lowercase_z_and_t():
    assert parse_ts("2026-09-25T17:03:11.123z") == BASE_MS
    assert parse_ts("2026-09-25t17:03:11.123z") == BASE_MS


def test_parse_leap_second_clamped():
    assert parse_ts("2016-12-31T23:59:60Z") == parse_ts("2016-12-31T23:59:59Z")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        "2026-09-25",
        "17:03:11Z",
        "2026-09-25T17:03:11",  # no zone
        "2026-09-25T17:03:11.Z",  # empty fraction
        "2026-09-25T17:03Z",
        "2026-9-25T17:03:11Z",
        "2026-09-25T17:03:11+0200",
        "2026-09-25T17:03:11+02",
        "2026-09-25T17:03:11 Z",
        " 2026-09-25T17:03:11Z",
        "2026-09-25T17:03:11ZZ",
        "2026-13-25T17:03:11Z",  # month 13
        "2026-02-30T17:03:11Z",  # no such day
        "2026-09-25T24:03:11Z",  # hour 24
        "2026-09-25T17:60:11Z",  # minute 60
        "2026-09-25T17:03:11Z\n",  # trailing newline
        "٢٠٢٦-09-25T17:03:11Z",  # non-ASCII digits
        "1790000000123",
    ],
)
def test_parse_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_ts(bad)


@pytest.mark.parametrize("bad", [None, 1790000000123, 1.5, b"2026-09-25T17:03:11Z", [], {}])
def test_parse_rejects_non_strings(bad):
    with pytest.raises(ValueError):
        parse_ts(bad)


def test_now_ms_is_close_to_wall_clock():
    import time

    a = int(time.time() * 1000)
    n = now_ms()
    b = int(time.time() * 1000)
    assert a - 1 <= n <= b + 1


def test_parse_ts_of_a_burst_skips_nothing_it_must_check():
    """Stamps sharing the last one's second take a short way: the same values,
    and what is not a stamp still raises."""
    base = "2026-09-25T17:03:11"
    assert parse_ts(base + ".123Z") == BASE_MS
    assert parse_ts(base + ".124Z") == BASE_MS + 1
    assert parse_ts(base + ".999Z") == BASE_MS + 876
    assert parse_ts(base + ".000Z") == BASE_MS - 123
    for bad in (base + ".1a3Z", base + ". 12Z", base + ".-12Z", base + ".\u0661\u0662\u0663Z",
                base + ".123z\n"):
        with pytest.raises(ValueError):
            parse_ts(bad)
    assert parse_ts(base + ".500+01:00") == BASE_MS + 377 - 3_600_000
    assert parse_ts("2026-09-25T17:03:12.123Z") == BASE_MS + 1000
    assert parse_ts(base + ".123Z") == BASE_MS  # and back
    assert parse_ts("2016-12-31T23:59:60.500Z") == parse_ts("2016-12-31T23:59:59.500Z")


def test_a_rising_clock_never_repeats_a_millisecond():
    from awp.wire.timefmt import RisingClock

    clock = RisingClock()
    readings = [clock.next(1000) for _ in range(3)] + [clock.next(999), clock.next(5000)]
    assert readings == [1000, 1001, 1002, 1003, 5000]
    live = [clock.next() for _ in range(200)]  # many in one real millisecond
    assert len(set(live)) == 200 and live == sorted(live)
