"""What a chart is: its marks, lines, ticks and legend, sized in SVG units (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

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


def shape_path(shape: str, x: float, y: float, r: float = 5.0) -> str:
    if shape == "triangle":
        return f"M{x},{y - r} L{x + r},{y + r * 0.8} L{x - r},{y + r * 0.8} Z"
    if shape == "diamond":
        return f"M{x},{y - r - 1} L{x + r + 1},{y} L{x},{y + r + 1} L{x - r - 1},{y} Z"
    return ""
