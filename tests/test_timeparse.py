"""Time stamps as logs print them, to UTC: zones, ISO 8601 forms, and the year of a year-less stamp."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from attribution.timeparse import TimeError, YearGuesser, format_utc, parse_iso, resolve_zone

UTC = timezone.utc


@pytest.mark.parametrize("name, offset", [(None, 0), ("UTC", 0), ("Z", 0), ("gmt", 0), ("+09:00", 9 * 60),
                                          ("-0500", -5 * 60), ("UTC+5:30", 5 * 60 + 30), ("+3", 3 * 60)])
def test_fixed_offsets_and_utc_names(name, offset):
    assert resolve_zone(name).utcoffset(None) == timedelta(minutes=offset)


def test_an_iana_zone_follows_daylight_saving():
    berlin = resolve_zone("Europe/Berlin")
    assert datetime(2026, 1, 15, 12, tzinfo=berlin).utcoffset() == timedelta(hours=1)
    assert datetime(2026, 7, 15, 12, tzinfo=berlin).utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize("name", ["Mars/Olympus", "+24:00", "not a zone"])
def test_an_unknown_zone_or_an_offset_of_a_day_is_refused(name):
    with pytest.raises(TimeError):
        resolve_zone(name)


@pytest.mark.parametrize("text, want", [
    ("2026-03-10T09:14:37Z", datetime(2026, 3, 10, 9, 14, 37, tzinfo=UTC)),
    ("2026-03-10 18:14:37+09:00", datetime(2026, 3, 10, 9, 14, 37, tzinfo=UTC)),
    ("2026-03-10T18:14:37+0900", datetime(2026, 3, 10, 9, 14, 37, tzinfo=UTC)),
    ("2026-03-10T09:14:37,250Z", datetime(2026, 3, 10, 9, 14, 37, 250000, tzinfo=UTC)),
    ("2026-04-22T21:30:51.870495804Z", datetime(2026, 4, 22, 21, 30, 51, 870495, tzinfo=UTC)),
])
def test_iso_forms_that_logs_print(text, want):
    assert parse_iso(text) == want


def test_a_naive_iso_time_is_read_in_the_given_zone():
    assert parse_iso("2026-03-10T18:14:37", resolve_zone("Asia/Tokyo")) == datetime(2026, 3, 10, 9, 14, 37, tzinfo=UTC)


def test_a_bad_iso_time_is_a_time_error():
    with pytest.raises(TimeError, match="not an ISO 8601 time"):
        parse_iso("yesterday")


def test_a_year_less_december_line_of_a_january_job_lands_in_the_old_year():
    g = YearGuesser(datetime(2027, 1, 1, 0, 5, tzinfo=UTC), datetime(2027, 1, 1, 2, tzinfo=UTC))
    assert g.place(12, 31, 23, 59, 58) == datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert g.place(1, 1, 1, 0, 0) == datetime(2027, 1, 1, 1, 0, tzinfo=UTC)


def test_feb_29_takes_the_nearest_leap_year():
    g = YearGuesser(datetime(2028, 3, 1, tzinfo=UTC), datetime(2028, 3, 2, tzinfo=UTC))
    assert g.place(2, 29, 12, 0, 0) == datetime(2028, 2, 29, 12, tzinfo=UTC)


def test_a_year_less_stamp_is_read_in_the_zone_of_the_log():
    g = YearGuesser(datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 2, tzinfo=UTC), resolve_zone("+02:00"))
    assert g.place(6, 1, 12, 0, 0) == datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


def test_format_utc_writes_z_and_keeps_microseconds_only_when_there_are_some():
    assert format_utc(None) is None
    assert format_utc(datetime(2026, 3, 10, 18, 14, 37, tzinfo=resolve_zone("+09:00"))) == "2026-03-10T09:14:37Z"
    assert format_utc(datetime(2026, 3, 10, 9, 14, 37, 5, tzinfo=UTC)) == "2026-03-10T09:14:37.000005Z"
