"""Time stamps as logs print them, to UTC: zones, ISO 8601 forms, and the year of a year-less stamp."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from attribution.timeparse import TimeError, YearGuesser, format_utc, parse_iso, parse_when, resolve_zone

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


# -- times a person types: every option, query parameter and dashboard field that takes one ----------------------

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize("value,expected", [
    ("now", NOW), ("now-7d", datetime(2026, 11, 24, 9, 30, tzinfo=UTC)), ("now - 90m", datetime(2026, 12, 1, 8, 0,
                                                                                                  tzinfo=UTC)),
    ("now+1h", datetime(2026, 12, 1, 10, 30, tzinfo=UTC)), ("now-2w", datetime(2026, 11, 17, 9, 30, tzinfo=UTC)),
    ("today", datetime(2026, 12, 1, tzinfo=UTC)), ("Yesterday", datetime(2026, 11, 30, tzinfo=UTC)),
    ("2026-11-30T08:00:00Z", datetime(2026, 11, 30, 8, tzinfo=UTC)), ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
    # a bare age is that long ago (#32: `--since 7d` was refused while `prune --older-than 180d` took it)
    ("7d", datetime(2026, 11, 24, 9, 30, tzinfo=UTC)), ("12h", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
    ("180d", datetime(2026, 6, 4, 9, 30, tzinfo=UTC)), ("90m", datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),
    ("2 weeks ago", datetime(2026, 11, 17, 9, 30, tzinfo=UTC)), ("30 min", datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
    ("now-1 day", datetime(2026, 11, 30, 9, 30, tzinfo=UTC)), ("45s", datetime(2026, 12, 1, 9, 29, 15, tzinfo=UTC)),
])
def test_times_a_person_types(value, expected):
    assert parse_when(value, NOW) == expected


@pytest.mark.parametrize("value", ["last tuesday", "now-7", "now-7y", "7", "7 months", "-7d", "now-9999999d", ""])
def test_a_time_that_is_not_one_gets_one_wording(value):
    forms = r"\(use an ISO 8601 time .*now-7d, .*7d or 12h \(that long ago\)"
    with pytest.raises(TimeError, match=r"not a time: .* " + forms):
        parse_when(value, NOW)


def test_an_age_beyond_the_calendar_is_out_of_range():
    with pytest.raises(TimeError, match="out of range"):
        parse_when("999999w", NOW)
