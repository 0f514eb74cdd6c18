"""The request marks: one per status check, its shape saying why it was sent then, and the hollow
marks of the checks still planned in a human's window."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from escalations.chart.model import SOURCES, Chart, Mark, shape_path
from escalations.chart.rows import CheckRow, GrantRow
from escalations.chart.scale import CountScale, TimeScale
from operations.cards.options import human_duration


def _source(previous: CheckRow | None, check: CheckRow, grants: Sequence[GrantRow]) -> str:
    """Why `check` was sent: the delay source of the wait before it, or a human's extension."""
    if previous is None:
        return "first"
    if any(previous.sent_at <= g.granted_at <= check.sent_at for g in grants):
        return "manual_extension"
    return previous.delay_source if previous.delay_source in SOURCES else "other"


def _tooltip(check: CheckRow, *, number: int, source: str) -> str:
    status, transport = check.http_status, check.transport_error
    answer = f"HTTP {status}" if status is not None else (transport or "no answer recorded")
    if transport and status is not None:
        answer += f" ({transport})"
    # isoformat, not strftime: this runs once per mark, up to a thousand times per page.
    tooltip = f"request {number} · {check.sent_at.isoformat(' ', 'seconds')[:19]} UTC · {answer}"
    if check.provider_state:
        tooltip += f" · state {check.provider_state}"
    tooltip += f" · sent because: {SOURCES[source][0]}"
    if check.next_poll_at is not None:
        next_at = check.next_poll_at.isoformat()[11:19]
        tooltip += f" · next poll {next_at} UTC ({check.delay_source or '—'})"
    return tooltip


def request_marks(
    *,
    chart: Chart,
    checks: Sequence[CheckRow],
    grants: Sequence[GrantRow],
    first_number: int,
    xs: TimeScale,
    ys: CountScale,
) -> None:
    """A mark per check (numbered from `first_number`), the error count and the legend."""
    counts: dict[str, int] = {}
    previous = None
    for index, check in enumerate(checks):
        source = _source(previous, check, grants)
        previous = check
        counts[source] = counts.get(source, 0) + 1
        status = check.http_status
        error = bool(check.transport_error) or (status is not None and status >= 400)
        chart.errors += int(error)
        number = first_number + index
        x, y = xs.x(check.sent_at), ys.y(number)
        shape = SOURCES[source][1]
        tooltip = _tooltip(check, number=number, source=source)
        chart.marks.append(
            Mark(x=x, y=y, source=source, shape=shape, error=error, tooltip=tooltip, path=shape_path(shape, x, y))
        )
    chart.legend = [(key, label, shape, counts[key]) for key, (label, shape) in SOURCES.items() if counts.get(key)]


def planned_marks(
    *,
    chart: Chart,
    planned: Sequence[datetime],
    after: int,
    spacing_s: float | None,
    xs: TimeScale,
    ys: CountScale,
) -> None:
    """The checks still to come in the current window (paced `spacing_s` apart), numbered on from
    request `after`."""
    pace = f", paced about every {human_duration(timedelta(seconds=spacing_s))}" if spacing_s else ""
    for index, moment in enumerate(planned, start=1):
        number = after + index
        tooltip = (
            f"planned check {index} of {len(planned)} (request {number}) · by about "
            f"{moment.isoformat(' ', 'seconds')[:19]} UTC{pace}; the provider's guidance may move it later"
        )
        chart.planned.append((xs.x(moment), ys.y(number), tooltip))
