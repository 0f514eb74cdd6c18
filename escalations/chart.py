"""The status-request chart of the operation page, computed on the server (no JavaScript).

x is time, y the running count of status requests. Each request is a mark whose colour AND shape
say why it was sent at that moment (the delay source of the wait before it; a request right after
a human's extension is `manual_extension`). The request budget of each authorization is a step
line; the deadline, earlier deadlines, the business deadline, extensions and "now" are vertical
lines with text labels, packed in rows above the plot so that no two overlap, each joined to its
line. The time axis (`time_axis`) fits the requests and the nearest deadline; a deadline far
beyond them is an arrow at the right edge with its time. Labels carry their time as data, so the
browser can show it in the viewer's zone. Pure: the caller passes rows and `now`; the SVG is
built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
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
    label_x: float  # where the text is anchored (beside the line, or pinned inside the picture)
    # The label's time, so the browser can show it in the viewer's zone: label = prefix + at (fmt).
    at: datetime | None = None
    prefix: str = ""
    fmt: str = ""


@dataclass(frozen=True)
class EdgeMarker:
    """A deadline beyond the time axis: an arrow at the right edge with its name and time."""

    kind: str  # deadline | business
    label: str
    label_y: float
    at: datetime
    prefix: str
    fmt: str


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str
    at: datetime | None = None
    fmt: str = ""


@dataclass(frozen=True)
class Axis:
    """The chart's time range, and the deadlines after it (drawn as edge markers, not stretched to)."""

    start: datetime
    end: datetime
    beyond: tuple[tuple[datetime, str], ...] = ()  # (moment, kind), soonest first


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
    edges: list[EdgeMarker] = field(default_factory=list)
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


def _clock_format(multi_day: bool) -> str:
    return "%b %d %H:%M" if multi_day else "%H:%M:%S"


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


# Label layout: text widths estimated generously (bold DejaVu Sans, the widest fallback font, is
# about 0.7 em per character), rows 14 units apart above the plot (an 11-unit line of text is 13 tall).
LABEL_FONT = 11
LABEL_GAP = 6
ROW_H = 14
FIRST_ROW_Y = 12


def text_width(text: str, *, font: float = LABEL_FONT) -> float:
    return len(text) * 0.7 * font


@dataclass(frozen=True)
class Placed:
    row: int
    anchor: str
    x0: float  # the text's box, left to right
    x1: float

    @property
    def text_x(self) -> float:
        return self.x0 if self.anchor == "start" else self.x1


def _pack(labels: list[tuple[float, str, str]], *, lo: float, hi: float) -> list[Placed]:
    """Rows for the labels of vertical lines, (x, text, preferred anchor) each, so that none overlap.

    A label sits beside its line, growing right ("start") or left ("end"), never past [lo, hi]; its
    line is drawn from the label down to the plot. A label goes into the first row (top to bottom)
    where it touches no label of that row, covers no line drawn down from a row above, and whose
    line crosses no label below it; when no row allows the last two, overlapping text is still
    avoided. There is always a row: the chart grows taller.
    """
    placed: list[tuple[float, Placed]] = []  # (line x, placement)

    def free(row: int, x: float, x0: float, x1: float, *, strict: bool) -> bool:
        for line_x, other in placed:
            if other.row == row and not (x1 + LABEL_GAP <= other.x0 or x0 >= other.x1 + LABEL_GAP):
                return False
            if strict and other.row < row and x0 - 2 <= line_x <= x1 + 2:
                return False
            if strict and other.row > row and other.x0 - 2 <= x <= other.x1 + 2:
                return False
        return True

    for x, text, preferred in labels:
        width = text_width(text)
        spans = []
        for anchor in (preferred, "end" if preferred == "start" else "start"):
            x0, x1 = (x + 3, x + 3 + width) if anchor == "start" else (x - 3 - width, x - 3)
            if x0 >= lo and x1 <= hi:
                spans.append((anchor, x0, x1))
        if not spans:  # wider than the room on either side: pinned inside, as near its line as it can be
            x0 = max(lo, min(x - width / 2, hi - width))
            spans.append(("start", x0, x0 + width))
        rows = 1 + max((other.row for _, other in placed), default=-1)
        choice = None
        for strict in (True, False):
            choice = next(
                (
                    Placed(row, anchor, x0, x1)
                    for row in range(rows + 1)
                    for anchor, x0, x1 in spans
                    if free(row, x, x0, x1, strict=strict)
                ),
                None,
            )
            if choice is not None:
                break
        assert choice is not None  # a new row below every other is always free of text
        placed.append((x, choice))
    return [placement for _, placement in placed]


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
    live = completed_at is None
    data_points = [created_at]
    data_points += [c.sent_at for c in checks]  # type: ignore[attr-defined]
    data_points += [a.granted_at for a in authorizations]  # type: ignore[attr-defined]
    data_points.append(now if live else completed_at)  # type: ignore[arg-type]
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
    ordered = sorted(authorizations, key=lambda a: a.number)  # type: ignore[attr-defined]
    grants = sorted(
        (a for a in authorizations if getattr(a, "number", 1) > 1),
        key=lambda a: a.granted_at,  # type: ignore[attr-defined]
    )
    clock = _clock_format(multi_day)
    # (moment, prefix, with time, kind)
    lines: list[tuple[datetime, str, bool, str]] = []
    for auth in ordered[:-1]:
        old = auth.deadline_at  # type: ignore[attr-defined]
        # A deadline an extension replaced: drawn where it fell on the axis, dropped beyond it.
        if old != deadline_at and on_axis(old):
            lines.append((old, f"deadline #{auth.number} ", True, "old-deadline"))  # type: ignore[attr-defined]
    for grant in grants:
        who = getattr(grant, "granted_by_label", "").removeprefix("user:")
        lines.append((grant.granted_at, f"#{grant.number} {grant.kind.replace('_', ' ')} by {who}", False, "grant"))  # type: ignore[attr-defined]
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
    placed = _pack(requests, lo=2, hi=chart.width - 2)
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
            tooltip += f" · next poll {next_at} UTC ({check.delay_source or '—'})"  # type: ignore[attr-defined]
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

    # Budget: one step per authorization, from its grant to the next grant. Labels newest first, and
    # one that would overlap a newer one is left out (the step line still shows it).
    segments = []
    boxes: list[tuple[float, float, float, float]] = []
    for index, auth in enumerate(ordered):
        start = auth.granted_at if index else t0  # type: ignore[attr-defined]
        end = ordered[index + 1].granted_at if index + 1 < len(ordered) else t1  # type: ignore[attr-defined]
        if not budget_shown:
            break
        y = y_of(auth.max_status_requests)  # type: ignore[attr-defined]
        segments.append(f"M{x_of(start)},{y} H{x_of(max(start, min(end, t1)))}")
        if index + 1 < len(ordered):
            segments.append(f"V{y_of(ordered[index + 1].max_status_requests)}")  # type: ignore[attr-defined]
    if budget_shown:
        for index in range(len(ordered) - 1, -1, -1):
            auth = ordered[index]
            x = x_of(auth.granted_at if index else t0) + 3  # type: ignore[attr-defined]
            y = y_of(auth.max_status_requests) - 4  # type: ignore[attr-defined]
            text = f"budget {auth.max_status_requests}"  # type: ignore[attr-defined]
            box = (x, y - LABEL_FONT, x + text_width(text), y + 3)
            if any(box[0] < b[2] + 2 and b[0] < box[2] + 2 and box[1] < b[3] and b[1] < box[3] for b in boxes):
                continue
            boxes.append(box)
            chart.budget_labels.insert(0, (x, y, text))
    chart.budget_path = " ".join(segments)

    tick_times, tick_format = _time_ticks(t0, t0 + timedelta(seconds=span))
    chart.x_ticks = [
        Tick(pos=x_of(moment), label=moment.strftime(tick_format), at=moment, fmt=tick_format) for moment in tick_times
    ]
    top = int(budget_max if budget_shown else room)
    step = max(1, round(top / 4))
    chart.y_ticks = [Tick(pos=y_of(v), label=str(v)) for v in range(0, top + 1, step)]
    chart.summary = (
        f"{last_number} status requests ({len(checks)} drawn) between {t0:%b %d %H:%M} and {t1:%b %d %H:%M} UTC; "
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


def _local_attrs(at: datetime | None, fmt: str, *, prefix: str = "") -> str:
    """Attributes that let static/js/app.js rewrite a label's time in the viewer's zone."""
    if at is None or not fmt:
        return ""
    iso = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f' data-at="{iso}" data-fmt="{escape(fmt)}"' + (f' data-prefix="{escape(prefix)}"' if prefix else "")


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
    last_end = float("-inf")
    for tick in chart.x_ticks:
        out.append(f'<line class="grid-line" x1="{tick.pos}" x2="{tick.pos}" y1="{chart.top}" y2="{chart.bottom}"/>')
        # Labels near an edge grow inwards so they stay inside the picture; one that would touch the
        # label before it is left out (its grid line stays).
        width = text_width(tick.label)
        anchor = "start" if tick.pos < chart.left + 30 else "end" if tick.pos > chart.right - 30 else "middle"
        x0 = tick.pos if anchor == "start" else tick.pos - width if anchor == "end" else tick.pos - width / 2
        if x0 < last_end + LABEL_GAP:
            continue
        last_end = x0 + width
        out.append(
            f'<text class="tick" x="{tick.pos}" y="{chart.bottom + 16}" text-anchor="{anchor}"'
            f"{_local_attrs(tick.at, tick.fmt)}>{escape(tick.label)}</text>"
        )
    out.append(f'<text class="axis-label" x="4" y="{chart.bottom + 30}">requests ↑</text>')
    out.append(
        f'<text class="axis-label" x="{chart.right}" y="{chart.bottom + 30}" text-anchor="end" '
        'data-zone-label="time ({zone}) →">time (UTC) →</text>'
    )
    if chart.budget_path:
        out.append(f'<path class="budget" d="{chart.budget_path}"/>')
    for x, y, label in chart.budget_labels:
        out.append(f'<text class="budget-label" x="{x}" y="{y}">{escape(label)}</text>')
    if chart.budget_note:
        out.append(
            f'<text class="budget-label" x="{chart.left + 4}" y="{chart.top + 12}">↑ {escape(chart.budget_note)}</text>'
        )
    # Lines first (a thin leader from each label down to the plot, then the line across it), their
    # labels after: a leader that must pass behind another label stays under its text.
    for line in chart.lines:
        out.append(
            f'<line class="leader leader-{line.kind}" x1="{line.x}" x2="{line.x}" y1="{line.label_y - 9}" '
            f'y2="{chart.top}"/>'
            f'<line class="vline vline-{line.kind}" x1="{line.x}" x2="{line.x}" y1="{chart.top}" '
            f'y2="{chart.bottom}"><title>{escape(line.label)}</title></line>'
        )
    for line in chart.lines:
        out.append(
            f'<text class="vline-label vline-label-{line.kind}" x="{line.label_x}" y="{line.label_y}" '
            f'text-anchor="{line.anchor}"{_local_attrs(line.at, line.fmt, prefix=line.prefix)}>'
            f"{escape(line.label)}</text>"
        )
    for edge in chart.edges:
        # The label ends at the right edge, an arrow beside it: this deadline comes after the axis.
        label = escape(edge.label)
        y = edge.label_y - 4
        out.append(
            f'<path class="edge-marker edge-marker-{edge.kind}" d="M{chart.right + 2},{y - 5} l7,5 l-7,5 Z">'
            f"<title>{label}, after the time shown</title></path>"
            f'<text class="edge-label edge-label-{edge.kind}" x="{chart.right}" y="{edge.label_y}" text-anchor="end"'
            f"{_local_attrs(edge.at, edge.fmt, prefix=edge.prefix)}>{label}</text>"
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
