"""Days typed into the dashboard's filters and export links (`?since=2026-12-01&until=…`).

A filter day becomes a range of timestamps: its start (00:00 UTC) and, for an inclusive "until",
the next midnight. Both must be times that Python and both databases hold, so a day is accepted
only from 0001-01-01 to 9999-12-30: 9999-12-31 has no next midnight (OverflowError). Anything
else is refused with the field named, never ignored: a filter silently dropped would show (or
export) more than the person asked for.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

FIRST_DAY = date.min
LAST_DAY = date.max - timedelta(days=1)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


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
        raise FilterError(field, f"{shown!r} is not a day written YYYY-MM-DD")
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
