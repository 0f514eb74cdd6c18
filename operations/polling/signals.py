"""Provider timing signals: Retry-After (RFC 9110 section 10.2.3) and body poll hints.

Parsing is strict on purpose: providers and proxies send garbage ("1.5", "+3", "120, 60",
"-1", dates in the past), and a client that trusts it either hammers the provider or sleeps for
years. Every value that is not understood is ignored with a note, never guessed at.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_DELTA_SECONDS = re.compile(r"[0-9]{1,19}")
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1)}
_DAY = r"(?P<wkday>Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?P<weekday>Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_MONTH = r"(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
_IMF = re.compile(rf"{_DAY}, (?P<day>[0-9]{{2}}) {_MONTH} (?P<year>[0-9]{{4}}) {_TIME} GMT")
# obsolete RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
_RFC850 = re.compile(rf"{_LONG_DAY}, (?P<day>[0-9]{{2}})-{_MONTH}-(?P<year>[0-9]{{2}}) {_TIME} GMT")
# obsolete asctime: Sun Nov  6 08:49:37 1994
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} (?P<day>[ 0-9][0-9]) {_TIME} (?P<year>[0-9]{{4}})")
_RFC3339 = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?P<frac>\.[0-9]{1,9})?"
    r"(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


@dataclass(frozen=True)
class Hint:
    """A provider-suggested wait. `delay_s` is None when the value was ignored; `note` says why."""

    delay_s: float | None
    note: str | None = None


def parse_http_date(value: str, *, now: datetime) -> datetime | None:
    """An HTTP-date in any of the three forms RFC 9110 section 5.6.7 requires recipients to accept."""
    for pattern in (_IMF, _RFC850, _ASCTIME):
        match = pattern.fullmatch(value)
        if match is None:
            continue
        year = int(match["year"])
        if pattern is _RFC850:
            # RFC 9110: a two-digit year that appears to be more than 50 years in the future is
            # in the past century.
            year += 2000
            if year > now.year + 50:
                year -= 100
        try:
            return datetime(
                year,
                _MONTHS[match["month"]],
                int(match["day"].strip()),
                int(match["hour"]),
                int(match["minute"]),
                int(match["second"]),
                tzinfo=UTC,
            )
        except ValueError:
            return None
    return None


def parse_rfc3339(value: str) -> datetime | None:
    match = _RFC3339.fullmatch(value)
    if match is None:
        return None
    offset = match["offset"].upper()
    text = f"{match['date']}T{match['time']}{(match['frac'] or '')[:7]}{'+00:00' if offset == 'Z' else offset}"
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def parse_retry_after(values: list[str], *, now: datetime, date_header: str | None) -> Hint | None:
    """Seconds to wait from a Retry-After header, or None when the response has none.

    An HTTP-date is measured against the provider's own Date header when it sent a valid one, so
    a provider whose clock is off by minutes still gets the wait it meant.
    """
    if not values:
        return None
    if len(values) > 1:
        return Hint(None, f"ignored {len(values)} Retry-After headers (ambiguous)")
    raw = values[0].strip(" \t")
    if _DELTA_SECONDS.fullmatch(raw):
        return Hint(float(int(raw)))
    when = parse_http_date(raw, now=now)
    if when is None:
        return Hint(None, f"ignored unparsable Retry-After {raw[:60]!r}")
    reference = parse_http_date(date_header.strip(" \t"), now=now) if date_header else None
    delay = (when - (reference or now)).total_seconds()
    if delay <= 0:
        return Hint(0.0, "Retry-After date is in the past")
    return Hint(delay)


def parse_poll_hint_seconds(value: object, *, absurd_s: float) -> Hint | None:
    """A body hint like `poll_after_seconds`: a non-negative JSON number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Hint(None, f"ignored non-numeric poll hint {str(value)[:40]!r}")
    if not math.isfinite(value):
        return Hint(None, "ignored non-finite poll hint")
    if value < 0:
        return Hint(None, f"ignored negative poll hint {value}")
    if value > absurd_s:
        return Hint(None, f"ignored absurd poll hint {value} s")
    return Hint(float(value))


def parse_poll_hint_time(value: object, *, now: datetime, absurd_s: float) -> Hint | None:
    """A body hint like `next_check_at`: an RFC 3339 time with an offset."""
    if value is None:
        return None
    if not isinstance(value, str):
        return Hint(None, f"ignored non-string next-check time {str(value)[:40]!r}")
    when = parse_rfc3339(value)
    if when is None:
        return Hint(None, f"ignored unparsable next-check time {value[:40]!r}")
    delay = (when - now).total_seconds()
    if delay > absurd_s:
        return Hint(None, f"ignored absurd next-check time {value[:40]!r}")
    if delay <= 0:
        return Hint(0.0, "next-check time is in the past")
    return Hint(delay)


def seconds(delay_s: float) -> timedelta:
    return timedelta(microseconds=round(delay_s * 1_000_000))
