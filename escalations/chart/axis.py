"""The chart's time axis: the range that fits the requests and the nearest deadline, and its ticks."""

from __future__ import annotations

from datetime import datetime, timedelta

from escalations.chart.model import Axis


def clock_format(multi_day: bool) -> str:
    return "%b %d %H:%M" if multi_day else "%H:%M:%S"


# Tick spacings a reader can count in, seconds to a week.
_TICK_STEPS_S = (
    *(1, 2, 5, 10, 15, 30),
    *(60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200),
    *(86400, 172800, 604800),
)


def time_ticks(t0: datetime, t1: datetime, *, most: int = 6) -> tuple[list[datetime], str]:
    """Round times between t0 and t1 (every 5 min on the quarter hours, not 03:39:08) and their format."""
    span = (t1 - t0).total_seconds()
    step = next((s for s in _TICK_STEPS_S if span / s <= most), _TICK_STEPS_S[-1])
    epoch = t0.timestamp()
    first = datetime.fromtimestamp((epoch // step + (1 if epoch % step else 0)) * step, tz=t0.tzinfo)
    ticks = []
    moment = first
    while moment <= t1:
        ticks.append(moment)
        moment += timedelta(seconds=step)
    if step >= 86400:
        fmt = "%b %d"
    elif (t1 - t0) >= timedelta(hours=20) or t0.date() != t1.date():
        fmt = "%b %d %H:%M"
    else:
        fmt = "%H:%M" if step >= 60 else "%H:%M:%S"
    return ticks, fmt


# While an operation is watched, the nearest deadline ahead is on the axis unless it is farther than
# FAR_FACTOR times the span so far (and more than NEAR_AT_LEAST from the start): a deadline hours
# ahead of a job minutes old would squash every request into the left edge. Any other deadline is
# on the axis only when it is NEARBY, costing the picture at most a third of its width.
FAR_FACTOR = 3
NEAR_AT_LEAST = timedelta(minutes=15)
NEARBY = 1.5
MIN_SPAN = timedelta(minutes=1)


def time_axis(
    *,
    start: datetime,
    data_end: datetime,
    deadline_at: datetime,
    business_deadline_at: datetime | None,
    live: bool,
) -> Axis:
    """The time axis: it fits the requests and the nearest deadline; farther deadlines are edge markers.

    `data_end` is the latest moment the chart must show (the last request, a grant, the end, and
    "now" while the operation is watched). While watched, the nearest deadline after it is on the
    axis too (where polling must stop), unless it is far; once the operation ended, the axis fits
    what happened. Deadlines after the axis come back as `beyond`, soonest first.
    """
    data_end = max(data_end, start)
    ahead = sorted(
        (moment, kind)
        for moment, kind in ((deadline_at, "deadline"), (business_deadline_at, "business"))
        if moment is not None and moment > data_end
    )
    end = data_end
    for index, (moment, _) in enumerate(ahead):
        if live and index == 0:
            near = moment - start <= max((data_end - start) * FAR_FACTOR, NEAR_AT_LEAST)
        else:
            near = moment - start <= max(end - start, MIN_SPAN) * NEARBY
        if not near:
            break
        end = moment
    end = max(end, start + MIN_SPAN)
    return Axis(start=start, end=end, beyond=tuple((m, k) for m, k in ahead if m > end))
