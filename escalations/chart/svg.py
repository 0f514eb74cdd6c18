"""`render_svg`: a Chart drawn as inline SVG, every dynamic text escaped."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from django.utils.safestring import SafeString, mark_safe

from escalations.chart.labels import LABEL_GAP, text_width
from escalations.chart.model import Chart


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
    out += _grid(chart)
    out += _budget(chart)
    out += _lines(chart)
    out += _marks(chart)
    out.append("</svg>")
    return mark_safe("".join(out))  # every dynamic text above goes through escape()


def _grid(chart: Chart) -> list[str]:
    """The grid lines, their tick labels and the axis names."""
    out: list[str] = []
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
    return out


def _budget(chart: Chart) -> list[str]:
    out: list[str] = []
    if chart.budget_path:
        out.append(f'<path class="budget" d="{chart.budget_path}"/>')
    for x, y, label in chart.budget_labels:
        out.append(f'<text class="budget-label" x="{x}" y="{y}">{escape(label)}</text>')
    if chart.budget_note:
        out.append(
            f'<text class="budget-label" x="{chart.left + 4}" y="{chart.top + 12}">↑ {escape(chart.budget_note)}</text>'
        )
    return out


def _lines(chart: Chart) -> list[str]:
    """The vertical lines with their labels, and the edge markers."""
    out: list[str] = []
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
    return out


def _marks(chart: Chart) -> list[str]:
    """The planned checks (hollow), then the request marks."""
    out: list[str] = []
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
    return out
