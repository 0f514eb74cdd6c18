"""The request budget: how tall the count axis is, and the step line of each authorization's budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from escalations.chart.labels import LABEL_FONT, text_width
from escalations.chart.model import Chart
from escalations.chart.rows import GrantRow
from escalations.chart.scale import CountScale, TimeScale


@dataclass(frozen=True)
class BudgetScale:
    budget_max: int
    room: float  # the count axis's height when the budget is not drawn
    shown: bool

    @property
    def top(self) -> float:
        return self.budget_max if self.shown else self.room

    @property
    def note(self) -> str:
        """Said above the plot when the budget is not drawn."""
        return "" if self.shown else f"budget {self.budget_max} requests (above the chart)"


def budget_scale(*, authorizations: Sequence[GrantRow], last_number: int, planned: int) -> BudgetScale:
    """A budget far above the requests sent would squash every mark onto the axis: then the budget
    is named above the plot instead of drawn."""
    budget_max = max([getattr(a, "max_status_requests", 0) for a in authorizations] + [last_number + planned, 1])
    room = max(last_number * 1.6, 8)
    return BudgetScale(budget_max=budget_max, room=room, shown=budget_max <= room * 1.5)


def draw_budget(
    *, chart: Chart, budget: BudgetScale, ordered: Sequence[GrantRow], xs: TimeScale, ys: CountScale
) -> None:
    """One step per authorization (`ordered` by number), from its grant to the next grant. Labels
    newest first, and one that would overlap a newer one is left out (the step line still shows it).
    A budget not drawn is named above the plot."""
    chart.budget_note = budget.note
    if not budget.shown:
        return
    segments = []
    for index, auth in enumerate(ordered):
        start = auth.granted_at if index else xs.start
        end = ordered[index + 1].granted_at if index + 1 < len(ordered) else xs.end
        y = ys.y(auth.max_status_requests)
        segments.append(f"M{xs.x(start)},{y} H{xs.x(max(start, min(end, xs.end)))}")
        if index + 1 < len(ordered):
            segments.append(f"V{ys.y(ordered[index + 1].max_status_requests)}")
    boxes: list[tuple[float, float, float, float]] = []
    for index in range(len(ordered) - 1, -1, -1):
        auth = ordered[index]
        x = xs.x(auth.granted_at if index else xs.start) + 3
        y = ys.y(auth.max_status_requests) - 4
        text = f"budget {auth.max_status_requests}"
        box = (x, y - LABEL_FONT, x + text_width(text), y + 3)
        if any(box[0] < b[2] + 2 and b[0] < box[2] + 2 and box[1] < b[3] and b[1] < box[3] for b in boxes):
            continue
        boxes.append(box)
        chart.budget_labels.insert(0, (x, y, text))
    chart.budget_path = " ".join(segments)
