"""The vertical lines (deadlines, extensions, "now") and the edge markers of deadlines beyond the
axis, their labels packed in rows above the plot, which grows to hold them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from escalations.chart.labels import FIRST_ROW_Y, ROW_H, pack
from escalations.chart.model import TOP, Axis, Chart, EdgeMarker, VLine
from escalations.chart.rows import GrantRow
from escalations.chart.scale import TimeScale

EDGE_FMT = "%b %d %H:%M"
_EDGE_NAMES = {"deadline": "deadline ", "business": "business deadline "}

# (moment, prefix, with time, kind)
LineItem = tuple[datetime, str, bool, str]


def line_items(
    *,
    scale: TimeScale,
    ordered: Sequence[GrantRow],
    grants: Sequence[GrantRow],
    deadline_at: datetime,
    business_deadline_at: datetime | None,
    business_stop: bool,
    now: datetime | None,
) -> list[LineItem]:
    """What gets a vertical line, oldest first. `ordered`: every authorization by number; `grants`:
    the extensions by time; `now` when the operation is still live."""
    lines: list[LineItem] = []
    for auth in ordered[:-1]:
        old = auth.deadline_at
        # A deadline an extension replaced: drawn where it fell on the axis, dropped beyond it.
        if old != deadline_at and scale.covers(old):
            lines.append((old, f"deadline #{auth.number} ", True, "old-deadline"))
    for grant in grants:
        who = getattr(grant, "granted_by_label", "").removeprefix("user:")
        lines.append((grant.granted_at, f"#{grant.number} {grant.kind.replace('_', ' ')} by {who}", False, "grant"))
    if scale.covers(deadline_at):
        lines.append((deadline_at, "deadline ", True, "deadline"))
    if business_deadline_at is not None and scale.covers(business_deadline_at):
        business = "polling stopped at the business deadline " if business_stop else "business deadline "
        lines.append((business_deadline_at, business, True, "business"))
    if now is not None and scale.covers(now):
        lines.append((now, "now", False, "now"))
    lines.sort(key=lambda item: item[0])
    return lines


def _text_of(moment: datetime, prefix: str, with_time: bool, fmt: str) -> str:
    return prefix + (moment.strftime(fmt) if with_time else "")


def annotate(*, chart: Chart, scale: TimeScale, axis: Axis, lines: list[LineItem], clock: str) -> None:
    """Draw `lines` and the axis's edge markers, their labels in rows that never overlap; the band
    above the plot grows by what more rows need."""
    edges = [(moment, _EDGE_NAMES[kind], kind) for moment, kind in axis.beyond]
    right_side = chart.left + scale.width * 0.7
    requests = [
        (scale.x(moment), _text_of(moment, prefix, timed, clock), "end" if scale.x(moment) > right_side else "start")
        for moment, prefix, timed, _ in lines
    ]
    requests += [(float(chart.right), _text_of(moment, prefix, True, EDGE_FMT), "end") for moment, prefix, _ in edges]
    placed = pack(requests, lo=2, hi=chart.width - 2)
    rows_used = max((spot.row for spot in placed), default=-1) + 1
    # The band above the plot holds every row of labels (the lines start 4 below the last one); the
    # picture grows by what more rows need.
    extra = max(0, FIRST_ROW_Y + ROW_H * (rows_used - 1) + 8 - TOP)
    chart.top += extra
    chart.bottom += extra
    chart.height += extra
    for (moment, prefix, timed, kind), spot in zip(lines, placed[: len(lines)], strict=True):
        chart.lines.append(
            VLine(
                x=scale.x(moment),
                label=_text_of(moment, prefix, timed, clock),
                kind=kind,
                label_y=FIRST_ROW_Y + ROW_H * spot.row,
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
                label=_text_of(moment, prefix, True, EDGE_FMT),
                label_y=FIRST_ROW_Y + ROW_H * spot.row,
                at=moment,
                prefix=prefix,
                fmt=EDGE_FMT,
            )
        )
