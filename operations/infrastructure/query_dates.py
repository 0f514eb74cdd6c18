"""Days and times typed into the dashboard's filters and export links (`?since=2026-12-01&until=…`).

A bound is a day (`2026-12-01`) or a minute (`2026-12-01T14:30`), read in the time zone `tz` names
(an IANA name the browser reports, `America/Los_Angeles`; UTC when absent, as in older links). A
day becomes a range of timestamps: its start (local midnight) and, for an inclusive "until", the
next midnight; a minute starts there ("since") or ends there, inclusive ("until": up to the end
of that minute). Both must be times that Python and both databases hold, so a day is accepted
only from 0001-01-01 to 9999-12-30: 9999-12-31 has no next midnight (OverflowError). Anything
else is refused with the field named, never ignored: a filter silently dropped would show (or
export) more than the person asked for.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

FIRST_DAY = date.min
LAST_DAY = date.max - timedelta(days=1)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MINUTE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}):([0-9]{2})(?::[0-9]{2}(?:\.[0-9]+)?)?")
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+){0,2}")


class FilterError(ValueError):
    """A filter value that cannot be applied; `field` is the query parameter's name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_day(value: object, *, field: str) -> date | None:
    """The day a filter names (YYYY-MM-DD), None when empty; FilterError otherwise."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    shown = text[:40]
    if not _DAY.fullmatch(text):
        raise FilterError(field, f"{shown!r} is not a day written YYYY-MM-DD (or a time, YYYY-MM-DDTHH:MM)")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise FilterError(field, f"{shown!r} is not a real day") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise FilterError(field, f"{shown} is outside the days pollerdash can search ({FIRST_DAY} to {LAST_DAY})")
    return day


def day_start(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time.min, tzinfo=UTC)


def day_end(day: date | None) -> datetime | None:
    """The first instant after the day: "until" is a whole day, inclusive."""
    return None if day is None else datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)


def parse_zone(value: object, *, field: str = "tz") -> tzinfo:
    """The time zone a filter's bounds are read in: UTC when empty, else an IANA name."""
    text = "" if value is None else str(value).strip()
    if not text or text.upper() == "UTC":
        return UTC
    if len(text) > 64 or not _ZONE.fullmatch(text):
        raise FilterError(field, f"{text[:40]!r} is not a time zone name such as Europe/Paris")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise FilterError(field, f"{text!r} is not a time zone this server knows") from None


def parse_bound(value: object, *, field: str, zone: tzinfo, end: bool) -> datetime | None:
    """The instant a "since" (end=False) or "until" (end=True) bound names, None when empty.

    A day covers the whole day in `zone` (an "until" day up to the next local midnight); a minute
    is that local time. FilterError names the field otherwise."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    minute = _MINUTE.fullmatch(text)
    day = parse_day(minute.group(1) if minute else text, field=field)
    if day is None:
        return None
    if minute is None:
        local = datetime.combine(day + timedelta(days=1) if end else day, time.min)
    else:
        hour, mins = int(minute.group(2)), int(minute.group(3))
        if hour > 23 or mins > 59:
            raise FilterError(field, f"{text[:40]!r} is not a real time of day")
        local = datetime.combine(day, time(hour, mins)) + (timedelta(minutes=1) if end else timedelta(0))
    try:
        return local.replace(tzinfo=zone).astimezone(UTC)
    except OverflowError:
        raise FilterError(field, f"{text} is outside the days pollerdash can search in that time zone") from None
