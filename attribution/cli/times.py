"""The time options every command takes (`--since`, `--until`, `--as-of`, `--older-than`, `--start`): ISO 8601 or a
relative form (`now-30d`, `7d`, `yesterday`: timeparse.parse_when, which the API's query parameters and the
dashboard's fields read too); a bad one is bad input naming the option."""

from __future__ import annotations

from datetime import datetime, timezone

UTC = timezone.utc
#: The forms, for an option's help
FORMS = "ISO 8601, or now-7d, 7d (7 days ago), 12h, yesterday, ... (docs/cli.md)"


def when(option: str, value: str | None, now: datetime | None = None) -> datetime | None:
    """`value` of `option` as a time (relative forms from `now`, default: the current time); None when not given."""
    from attribution.errors import InputError
    from attribution.timeparse import TimeError, parse_when

    if value is None:
        return None
    try:
        return parse_when(value, now or datetime.now(UTC))
    except TimeError as exc:
        raise InputError(option, str(exc)) from None


__all__ = ["when"]
