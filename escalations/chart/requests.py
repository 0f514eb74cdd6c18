"""`request_chart`: an operation's status checks and authorizations in, a Chart out (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from escalations.chart.axis import clock_format, time_axis, time_ticks
from escalations.chart.labels import FIRST_ROW_Y, LABEL_FONT, ROW_H, pack, text_width
from escalations.chart.model import SOURCES, TOP, Chart, EdgeMarker, Mark, Tick, VLine, shape_path
from operations.decisions.options import human_duration


class CheckRow(Protocol):
    """What the chart reads of a status check (a StatusCheck row)."""

    @property
    def sent_at(self) -> datetime: ...
    @property
    def http_status(self) -> int | None: ...
    @property
    def transport_error(self) -> str: ...
    @property
    def provider_state(self) -> str | None: ...
    @property
    def delay_source(self) -> str | None: ...
    @property
    def next_poll_at(self) -> datetime | None: ...


class GrantRow(Protocol):
    """What the chart reads of an authorization (an Authorization row)."""

    @property
    def number(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def granted_at(self) -> datetime: ...
    @property
    def deadline_at(self) -> datetime: ...
    @property
    def max_status_requests(self) -> int: ...


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
    data_points = [created_at]
    data_points += [c.sent_at for c in checks]
    data_points += [a.granted_at for a in authorizations]
    data_points.append(completed_at if completed_at is not None else now)
    # The checks still to come in a human's window are part of what the axis must show.
    data_points += list(planned)
    axis = time_axis(
        start=created_at,
        data_end=max(data_points),
        deadline_at=deadline_at,
        business_deadline_at=business_deadline_at,
        live=live,
    )
    t0, t1 = axis.start, axis.end
    span = (t1 - t0).total_seconds() * 1.04
    multi_day = (t1 - t0) >= timedelta(hours=20) or t0.date() != t1.date()
    plot_w = chart.right - chart.left

    def x_of(moment: datetime) -> float:
        return round(chart.left + plot_w * max(0.0, (moment - t0).total_seconds()) / span, 1)

    def on_axis(moment: datetime) -> bool:
        return t0 <= moment <= t1

    # Vertical lines and edge markers first: their labels decide how tall the band above the plot is.
    ordered = sorted(authorizations, key=lambda a: a.number)
    grants = sorted(
        (a for a in authorizations if getattr(a, "number", 1) > 1),
        key=lambda a: a.granted_at,
    )
    clock = clock_format(multi_day)
    # (moment, prefix, with time, kind)
    lines: list[tuple[datetime, str, bool, str]] = []
    for auth in ordered[:-1]:
        old = auth.deadline_at
        # A deadline an extension replaced: drawn where it fell on the axis, dropped beyond it.
        if old != deadline_at and on_axis(old):
            lines.append((old, f"deadline #{auth.number} ", True, "old-deadline"))
    for grant in grants:
        who = getattr(grant, "granted_by_label", "").removeprefix("user:")
        lines.append((grant.granted_at, f"#{grant.number} {grant.kind.replace('_', ' ')} by {who}", False, "grant"))
    if on_axis(deadline_at):
        lines.append((deadline_at, "deadline ", True, "deadline"))
    if business_deadline_at is not None and on_axis(business_deadline_at):
        business = "polling stopped at the business deadline " if business_stop else "business deadline "
        lines.append((business_deadline_at, business, True, "business"))
    if live and on_axis(now):
        lines.append((now, "now", False, "now"))
    lines.sort(key=lambda item: item[0])
    edge_fmt = "%b %d %H:%M"
    names = {"deadline": "deadline ", "business": "business deadline "}
    edges = [(moment, names[kind], kind) for moment, kind in axis.beyond]

    def text_of(moment: datetime, prefix: str, with_time: bool, fmt: str) -> str:
        return prefix + (moment.strftime(fmt) if with_time else "")

    right_side = chart.left + plot_w * 0.7
    requests = [
        (x_of(moment), text_of(moment, prefix, timed, clock), "end" if x_of(moment) > right_side else "start")
        for moment, prefix, timed, _ in lines
    ]
    requests += [(float(chart.right), text_of(moment, prefix, True, edge_fmt), "end") for moment, prefix, _ in edges]
    placed = pack(requests, lo=2, hi=chart.width - 2)
    rows_used = max((spot.row for spot in placed), default=-1) + 1
    # The band above the plot holds every row of labels (the lines start 4 below the last one); the
    # picture grows by what more rows need.
    extra = max(0, FIRST_ROW_Y + ROW_H * (rows_used - 1) + 8 - TOP)
    chart.top += extra
    chart.bottom += extra
    chart.height += extra
    plot_h = chart.bottom - chart.top

    def label_y(row: int) -> float:
        return FIRST_ROW_Y + ROW_H * row

    for (moment, prefix, timed, kind), spot in zip(lines, placed[: len(lines)], strict=True):
        text = text_of(moment, prefix, timed, clock)
        chart.lines.append(
            VLine(
                x=x_of(moment),
                label=text,
                kind=kind,
                label_y=label_y(spot.row),
                anchor=spot.anchor,
                label_x=round(spot.text_x, 1),
                at=moment if timed else None,
                prefix=prefix,
                fmt=clock if timed else "",
            )
        )
    for (moment, prefix, kind), spot in zip(edges, placed[len(lines) :], strict=True):
        chart.edges.append(
            EdgeMarker(
                kind=kind,
                label=text_of(moment, prefix, True, edge_fmt),
                label_y=label_y(spot.row),
                at=moment,
                prefix=prefix,
                fmt=edge_fmt,
            )
        )

    budget_max = max(
        [getattr(a, "max_status_requests", 0) for a in authorizations]
        + [first_number + len(checks) - 1 + len(planned), 1]
    )
    # A budget far above the requests sent would squash every mark onto the axis: then the
    # budget is named above the plot instead of drawn.
    last_number = first_number + len(checks) - 1
    room = max(last_number * 1.6, 8)
    budget_shown = budget_max <= room * 1.5
    y_max = (budget_max if budget_shown else room) * 1.08
    chart.budget_note = "" if budget_shown else f"budget {budget_max} requests (above the chart)"

    def y_of(count: float) -> float:
        return round(chart.bottom - plot_h * count / y_max, 1)

    counts: dict[str, int] = {}
    previous = None
    for index, check in enumerate(checks):
        sent = check.sent_at
        if previous is None:
            source = "first"
        elif any(previous.sent_at <= g.granted_at <= sent for g in grants):
            source = "manual_extension"
        else:
            source = previous.delay_source if previous.delay_source in SOURCES else "other"
        previous = check
        counts[source] = counts.get(source, 0) + 1
        status = check.http_status
        transport = check.transport_error
        error = bool(transport) or (status is not None and status >= 400)
        chart.errors += int(error)
        answer = f"HTTP {status}" if status is not None else (transport or "no answer recorded")
        if transport and status is not None:
            answer += f" ({transport})"
        state = check.provider_state
        number = first_number + index
        # isoformat, not strftime: this runs once per mark, up to a thousand times per page.
        tooltip = f"request {number} · {sent.isoformat(' ', 'seconds')[:19]} UTC · {answer}"
        if state:
            tooltip += f" · state {state}"
        tooltip += f" · sent because: {SOURCES[source][0]}"
        if check.next_poll_at is not None:
            next_at = check.next_poll_at.isoformat()[11:19]
            tooltip += f" · next poll {next_at} UTC ({check.delay_source or '—'})"
        x, y = x_of(sent), y_of(number)
        shape = SOURCES[source][1]
        chart.marks.append(
            Mark(x=x, y=y, source=source, shape=shape, error=error, tooltip=tooltip, path=shape_path(shape, x, y))
        )
    chart.legend = [(key, label, shape, counts[key]) for key, (label, shape) in SOURCES.items() if counts.get(key)]
    pace = f", paced about every {human_duration(timedelta(seconds=check_spacing_s))}" if check_spacing_s else ""
    for index, moment in enumerate(planned, start=1):
        number = first_number + len(checks) - 1 + index
        tooltip = (
            f"planned check {index} of {len(planned)} (request {number}) · by about "
            f"{moment.isoformat(' ', 'seconds')[:19]} UTC{pace}; the provider's guidance may move it later"
        )
        chart.planned.append((x_of(moment), y_of(number), tooltip))

    # Budget: one step per authorization, from its grant to the next grant. Labels newest first, and
    # one that would overlap a newer one is left out (the step line still shows it).
    segments = []
    boxes: list[tuple[float, float, float, float]] = []
    for index, auth in enumerate(ordered):
        start = auth.granted_at if index else t0
        end = ordered[index + 1].granted_at if index + 1 < len(ordered) else t1
        if not budget_shown:
            break
        y = y_of(auth.max_status_requests)
        segments.append(f"M{x_of(start)},{y} H{x_of(max(start, min(end, t1)))}")
        if index + 1 < len(ordered):
            segments.append(f"V{y_of(ordered[index + 1].max_status_requests)}")
    if budget_shown:
        for index in range(len(ordered) - 1, -1, -1):
            auth = ordered[index]
            x = x_of(auth.granted_at if index else t0) + 3
            y = y_of(auth.max_status_requests) - 4
            text = f"budget {auth.max_status_requests}"
            box = (x, y - LABEL_FONT, x + text_width(text), y + 3)
            if any(box[0] < b[2] + 2 and b[0] < box[2] + 2 and box[1] < b[3] and b[1] < box[3] for b in boxes):
                continue
            boxes.append(box)
            chart.budget_labels.insert(0, (x, y, text))
    chart.budget_path = " ".join(segments)

    tick_times, tick_format = time_ticks(t0, t0 + timedelta(seconds=span))
    chart.x_ticks = [
        Tick(pos=x_of(moment), label=moment.strftime(tick_format), at=moment, fmt=tick_format) for moment in tick_times
    ]
    top = int(budget_max if budget_shown else room)
    step = max(1, round(top / 4))
    chart.y_ticks = [Tick(pos=y_of(v), label=str(v)) for v in range(0, top + 1, step)]
    chart.summary = (
        f"{last_number} status requests ({len(checks)} drawn) between {t0:%b %d %H:%M} and {t1:%b %d %H:%M} UTC; "
        f"{chart.errors} error answers; current budget {ordered[-1].max_status_requests if ordered else '—'}; "
        f"deadline {deadline_at:%Y-%m-%d %H:%M} UTC"
        + (f"; business deadline {business_deadline_at:%Y-%m-%d %H:%M} UTC" if business_deadline_at else "")
    )
    return chart
