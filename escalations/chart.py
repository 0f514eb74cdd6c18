"""The status-request chart of the operation page, computed on the server (no JavaScript).

x is time, y the running count of status requests. Each request is a mark whose colour AND shape
say why it was sent at that moment (the delay source of the wait before it; a request right after
a human's extension is `manual_extension`). The request budget of each authorization is a step
line; the deadline, earlier deadlines, the business deadline and "now" are vertical lines with
text labels. Inside a window a human granted, the checks still to come are hollow marks; when the
business deadline stopped polling, its line says so. Pure: the caller passes rows and `now`; the
template draws the SVG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape

from django.utils.safestring import SafeString, mark_safe

from operations.decisions.options import human_duration

WIDTH, HEIGHT = 760, 250
LEFT, RIGHT, TOP, BOTTOM = 46, 18, 40, 34

SOURCES: dict[str, tuple[str, str]] = {
    # delay source -> (legend label, shape)
    "first": ("first request (right after registration)", "ring"),
    "local_backoff": ("local backoff", "circle"),
    "provider_retry_after": ("provider Retry-After", "square"),
    "provider_poll_hint": ("provider poll hint", "triangle"),
    "manual_extension": ("after a human's extension", "diamond"),
    "other": ("other", "circle"),
}


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    source: str
    shape: str
    error: bool
    tooltip: str
    path: str = ""  # triangle / diamond outline

    @property
    def box_x(self) -> float:
        return round(self.x - 4.5, 1)

    @property
    def box_y(self) -> float:
        return round(self.y - 4.5, 1)


@dataclass(frozen=True)
class VLine:
    x: float
    label: str
    kind: str  # deadline | old-deadline | business | now | grant
    label_y: float
    anchor: str


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    marks: list[Mark] = field(default_factory=list)
    lines: list[VLine] = field(default_factory=list)
    budget_path: str = ""
    budget_labels: list[tuple[float, float, str]] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    legend: list[tuple[str, str, str, int]] = field(default_factory=list)  # source, label, shape, count
    errors: int = 0
    # Checks still to come in a human's window: (x, y, tooltip), drawn hollow.
    planned: list[tuple[float, float, str]] = field(default_factory=list)
    summary: str = ""
    budget_note: str = ""

    @property
    def empty(self) -> bool:
        return not self.marks

    @property
    def plot_width(self) -> int:
        return self.right - self.left

    @property
    def plot_height(self) -> int:
        return self.bottom - self.top


def _clock(value: datetime, multi_day: bool) -> str:
    return value.strftime("%b %d %H:%M" if multi_day else "%H:%M:%S")


# Tick spacings a reader can count in, seconds to a week.
_TICK_STEPS_S = (
    *(1, 2, 5, 10, 15, 30),
    *(60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200),
    *(86400, 172800, 604800),
)


def _time_ticks(t0: datetime, t1: datetime, *, most: int = 6) -> tuple[list[datetime], str]:
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


def request_chart(
    *,
    checks: list[object],
    authorizations: list[object],
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
    points = [created_at, deadline_at]
    points += [c.sent_at for c in checks]  # type: ignore[attr-defined]
    points += [a.granted_at for a in authorizations] + [a.deadline_at for a in authorizations]  # type: ignore[attr-defined]
    if business_deadline_at is not None:
        points.append(business_deadline_at)
    if completed_at is not None:
        points.append(completed_at)
    t0 = created_at
    t1 = max(points)
    span = max((t1 - t0).total_seconds(), 60.0) * 1.04
    multi_day = (t1 - t0) >= timedelta(hours=20) or t0.date() != t1.date()
    plot_w = chart.right - chart.left
    plot_h = chart.bottom - chart.top

    def x_of(moment: datetime) -> float:
        return round(chart.left + plot_w * max(0.0, (moment - t0).total_seconds()) / span, 1)

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

    grants = sorted(
        (a for a in authorizations if getattr(a, "number", 1) > 1),
        key=lambda a: a.granted_at,  # type: ignore[attr-defined]
    )
    counts: dict[str, int] = {}
    previous = None
    for index, check in enumerate(checks):
        sent = check.sent_at  # type: ignore[attr-defined]
        if previous is None:
            source = "first"
        elif any(previous.sent_at <= g.granted_at <= sent for g in grants):  # type: ignore[attr-defined]
            source = "manual_extension"
        else:
            source = previous.delay_source if previous.delay_source in SOURCES else "other"  # type: ignore[attr-defined]
        previous = check
        counts[source] = counts.get(source, 0) + 1
        status = check.http_status  # type: ignore[attr-defined]
        transport = check.transport_error  # type: ignore[attr-defined]
        error = bool(transport) or (status is not None and status >= 400)
        chart.errors += int(error)
        answer = f"HTTP {status}" if status is not None else (transport or "no answer recorded")
        if transport and status is not None:
            answer += f" ({transport})"
        state = check.provider_state  # type: ignore[attr-defined]
        number = first_number + index
        # isoformat, not strftime: this runs once per mark, up to a thousand times per page.
        tooltip = f"request {number} · {sent.isoformat(' ', 'seconds')[:19]} UTC · {answer}"
        if state:
            tooltip += f" · state {state}"
        tooltip += f" · sent because: {SOURCES[source][0]}"
        if check.next_poll_at is not None:  # type: ignore[attr-defined]
            next_at = check.next_poll_at.isoformat()[11:19]  # type: ignore[attr-defined]
            tooltip += f" · next poll {next_at} ({check.delay_source or '—'})"  # type: ignore[attr-defined]
        x, y = x_of(sent), y_of(number)
        shape = SOURCES[source][1]
        chart.marks.append(
            Mark(x=x, y=y, source=source, shape=shape, error=error, tooltip=tooltip, path=_shape_path(shape, x, y))
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

    # Budget: one step per authorization, from its grant to the next grant.
    ordered = sorted(authorizations, key=lambda a: a.number)  # type: ignore[attr-defined]
    segments = []
    for index, auth in enumerate(ordered):
        start = auth.granted_at if index else t0  # type: ignore[attr-defined]
        end = ordered[index + 1].granted_at if index + 1 < len(ordered) else t1  # type: ignore[attr-defined]
        if not budget_shown:
            break
        y = y_of(auth.max_status_requests)  # type: ignore[attr-defined]
        segments.append(f"M{x_of(start)},{y} H{x_of(end)}")
        if index + 1 < len(ordered):
            segments.append(f"V{y_of(ordered[index + 1].max_status_requests)}")  # type: ignore[attr-defined]
        chart.budget_labels.append((x_of(start) + 3, y - 4, f"budget {auth.max_status_requests}"))  # type: ignore[attr-defined]
    chart.budget_path = " ".join(segments)

    lines: list[tuple[datetime, str, str]] = []
    for auth in ordered[:-1]:
        if auth.deadline_at != deadline_at:  # type: ignore[attr-defined]
            label = f"deadline #{auth.number} {_clock(auth.deadline_at, multi_day)}"  # type: ignore[attr-defined]
            lines.append((auth.deadline_at, label, "old-deadline"))  # type: ignore[attr-defined]
    for grant in grants:
        who = getattr(grant, "granted_by_label", "").removeprefix("user:")
        lines.append((grant.granted_at, f"#{grant.number} {grant.kind.replace('_', ' ')} by {who}", "grant"))  # type: ignore[attr-defined]
    lines.append((deadline_at, f"deadline {_clock(deadline_at, multi_day)}", "deadline"))
    if business_deadline_at is not None:
        label = f"business deadline {_clock(business_deadline_at, multi_day)}"
        lines.append((business_deadline_at, label + (" — polling stopped" if business_stop else ""), "business"))
    if completed_at is None and t0 <= now <= t1:
        lines.append((now, "now", "now"))
    lines.sort(key=lambda item: item[0])
    for index, (moment, label, kind) in enumerate(lines):
        x = x_of(moment)
        anchor = "end" if x > chart.left + plot_w * 0.7 else "start"
        # Stagger labels over three rows so neighbouring lines stay readable.
        chart.lines.append(VLine(x=x, label=label, kind=kind, label_y=12 + 11 * (index % 3), anchor=anchor))

    tick_times, tick_format = _time_ticks(t0, t0 + timedelta(seconds=span))
    chart.x_ticks = [Tick(pos=x_of(moment), label=moment.strftime(tick_format)) for moment in tick_times]
    top = int(budget_max if budget_shown else room)
    step = max(1, round(top / 4))
    chart.y_ticks = [Tick(pos=y_of(v), label=str(v)) for v in range(0, top + 1, step)]
    chart.summary = (
        f"{last_number} status requests ({len(checks)} drawn) between {_clock(t0, True)} and {_clock(t1, True)} UTC; "
        f"{chart.errors} error answers; current budget {ordered[-1].max_status_requests if ordered else '—'}; "  # type: ignore[attr-defined]
        f"deadline {deadline_at:%Y-%m-%d %H:%M} UTC"
        + (f"; business deadline {business_deadline_at:%Y-%m-%d %H:%M} UTC" if business_deadline_at else "")
    )
    return chart


def _shape_path(shape: str, x: float, y: float, r: float = 5.0) -> str:
    if shape == "triangle":
        return f"M{x},{y - r} L{x + r},{y + r * 0.8} L{x - r},{y + r * 0.8} Z"
    if shape == "diamond":
        return f"M{x},{y - r - 1} L{x + r + 1},{y} L{x},{y + r + 1} L{x - r - 1},{y} Z"
    return ""


def render_svg(chart: Chart) -> SafeString:
    """The chart as inline SVG markup. Built here rather than in a template loop: a thousand marks
    render in a few milliseconds. Every piece of text is escaped."""
    out: list[str] = [
        f'<svg class="chart-svg" viewBox="0 0 {chart.width} {chart.height}" role="img" '
        'aria-labelledby="chart-title chart-desc" preserveAspectRatio="xMidYMid meet">',
        '<title id="chart-title">Status requests over time</title>',
        f'<desc id="chart-desc">{escape(chart.summary)}</desc>',
        f'<rect class="plot" x="{chart.left}" y="{chart.top}" width="{chart.plot_width}" '
        f'height="{chart.plot_height}"/>',
    ]
    for tick in chart.y_ticks:
        out.append(
            f'<line class="grid-line" x1="{chart.left}" x2="{chart.right}" y1="{tick.pos}" y2="{tick.pos}"/>'
            f'<text class="tick" x="{chart.left - 6}" y="{tick.pos}" text-anchor="end" dominant-baseline="middle">'
            f"{escape(tick.label)}</text>"
        )
    for tick in chart.x_ticks:
        # Labels near an edge grow inwards so they stay inside the picture.
        anchor = "start" if tick.pos < chart.left + 30 else "end" if tick.pos > chart.right - 30 else "middle"
        out.append(f'<line class="grid-line" x1="{tick.pos}" x2="{tick.pos}" y1="{chart.top}" y2="{chart.bottom}"/>')
        out.append(
            f'<text class="tick" x="{tick.pos}" y="{chart.bottom + 16}" text-anchor="{anchor}">'
            f"{escape(tick.label)}</text>"
        )
    out.append(f'<text class="axis-label" x="{chart.left - 34}" y="{chart.top - 6}">requests</text>')
    out.append(
        f'<text class="axis-label" x="{chart.right}" y="{chart.bottom + 30}" text-anchor="end">time (UTC)</text>'
    )
    if chart.budget_path:
        out.append(f'<path class="budget" d="{chart.budget_path}"/>')
    for x, y, label in chart.budget_labels:
        out.append(f'<text class="budget-label" x="{x}" y="{y}">{escape(label)}</text>')
    if chart.budget_note:
        out.append(
            f'<text class="budget-label" x="{chart.left + 4}" y="{chart.top + 12}">↑ {escape(chart.budget_note)}</text>'
        )
    for line in chart.lines:
        label = escape(line.label)
        out.append(
            f'<line class="vline vline-{line.kind}" x1="{line.x}" x2="{line.x}" y1="{chart.top - 4}" '
            f'y2="{chart.bottom}"><title>{label}</title></line>'
            f'<text class="vline-label vline-label-{line.kind}" x="{line.x}" y="{line.label_y}" '
            f'text-anchor="{line.anchor}">{label}</text>'
        )
    for x, y, tooltip in chart.planned:
        out.append(f'<circle class="mark planned" cx="{x}" cy="{y}" r="4"><title>{escape(tooltip)}</title></circle>')
    for mark in chart.marks:
        css = (
            f"mark src-{mark.source}"
            + (" mark-error" if mark.error else "")
            + (" ring" if mark.shape == "ring" else "")
        )
        tip = f"<title>{escape(mark.tooltip)}</title>"
        if mark.shape == "square":
            out.append(f'<rect class="{css}" x="{mark.box_x}" y="{mark.box_y}" width="9" height="9">{tip}</rect>')
        elif mark.path:
            out.append(f'<path class="{css}" d="{mark.path}">{tip}</path>')
        else:
            out.append(f'<circle class="{css}" cx="{mark.x}" cy="{mark.y}" r="4.5">{tip}</circle>')
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every dynamic text above goes through escape()
