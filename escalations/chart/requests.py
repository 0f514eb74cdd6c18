"""`request_chart`: an operation's status checks and authorizations in, a Chart out (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from escalations.chart.annotations import annotate, line_items
from escalations.chart.axis import clock_format, time_axis, time_ticks
from escalations.chart.budget import BudgetScale, budget_scale, draw_budget
from escalations.chart.marks import planned_marks, request_marks
from escalations.chart.model import Chart, Tick
from escalations.chart.rows import CheckRow, GrantRow
from escalations.chart.scale import CountScale, TimeScale


def request_chart(
    *,
    checks: Sequence[CheckRow],
    authorizations: Sequence[GrantRow],
    created_at: datetime,
    deadline_at: datetime,
    business_deadline_at: datetime | None,
    now: datetime,
    completed_at: datetime | None = None,
    first_number: int = 1,
    planned: Sequence[datetime] = (),
    check_spacing_s: float | None = None,
    business_stop: bool = False,
) -> Chart:
    """`checks` oldest first (at most the latest ones); `first_number` is the number of the first of them.

    `planned`: the checks still to come in the current window (operations.polling.window.upcoming_checks),
    `check_spacing_s` its pacing; `business_stop`: polling stopped at the business deadline.
    """
    chart = Chart()
    live = completed_at is None
    # The checks still to come in a human's window are part of what the axis must show.
    data_points = [created_at, *(c.sent_at for c in checks), *(a.granted_at for a in authorizations)]
    data_points += [completed_at if completed_at is not None else now, *planned]
    axis = time_axis(
        start=created_at,
        data_end=max(data_points),
        deadline_at=deadline_at,
        business_deadline_at=business_deadline_at,
        live=live,
    )
    xs = TimeScale.across(axis, left=chart.left, width=chart.plot_width)
    # Vertical lines and edge markers first: their labels decide how tall the band above the plot is.
    ordered = sorted(authorizations, key=lambda a: a.number)
    grants = sorted((a for a in authorizations if getattr(a, "number", 1) > 1), key=lambda a: a.granted_at)
    lines = line_items(
        scale=xs,
        ordered=ordered,
        grants=grants,
        deadline_at=deadline_at,
        business_deadline_at=business_deadline_at,
        business_stop=business_stop,
        now=now if live else None,
    )
    annotate(chart=chart, scale=xs, axis=axis, lines=lines, clock=clock_format(xs.multi_day))
    last_number = first_number + len(checks) - 1
    budget = budget_scale(authorizations=authorizations, last_number=last_number, planned=len(planned))
    ys = CountScale(bottom=chart.bottom, height=chart.plot_height, y_max=budget.top * 1.08)
    request_marks(chart=chart, checks=checks, grants=grants, first_number=first_number, xs=xs, ys=ys)
    planned_marks(chart=chart, planned=planned, after=last_number, spacing_s=check_spacing_s, xs=xs, ys=ys)
    draw_budget(chart=chart, budget=budget, ordered=ordered, xs=xs, ys=ys)
    _ticks(chart=chart, xs=xs, ys=ys, budget=budget)
    chart.summary = (
        f"{last_number} status requests ({len(checks)} drawn) between {xs.start:%b %d %H:%M} and "
        f"{xs.end:%b %d %H:%M} UTC; {chart.errors} error answers; current budget "
        f"{ordered[-1].max_status_requests if ordered else '—'}; deadline {deadline_at:%Y-%m-%d %H:%M} UTC"
        + (f"; business deadline {business_deadline_at:%Y-%m-%d %H:%M} UTC" if business_deadline_at else "")
    )
    return chart


def _ticks(*, chart: Chart, xs: TimeScale, ys: CountScale, budget: BudgetScale) -> None:
    tick_times, tick_format = time_ticks(xs.start, xs.start + timedelta(seconds=xs.span_s))
    chart.x_ticks = [
        Tick(pos=xs.x(moment), label=moment.strftime(tick_format), at=moment, fmt=tick_format) for moment in tick_times
    ]
    top = int(budget.top)
    step = max(1, round(top / 4))
    chart.y_ticks = [Tick(pos=ys.y(v), label=str(v)) for v in range(0, top + 1, step)]
