"""Where a moment and a request count fall in the picture, in SVG units."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from escalations.chart.model import Axis


@dataclass(frozen=True)
class TimeScale:
    """x: the axis's range across the plot, its span stretched by 4% so the newest mark is not
    drawn on the right edge."""

    start: datetime
    end: datetime
    span_s: float
    left: int
    width: int

    @classmethod
    def across(cls, axis: Axis, *, left: int, width: int) -> TimeScale:
        return cls(
            start=axis.start,
            end=axis.end,
            span_s=(axis.end - axis.start).total_seconds() * 1.04,
            left=left,
            width=width,
        )

    @property
    def multi_day(self) -> bool:
        """The axis spans 20 hours or more, or crosses midnight (UTC): its times then carry the date."""
        return (self.end - self.start) >= timedelta(hours=20) or self.start.date() != self.end.date()

    def x(self, moment: datetime) -> float:
        return round(self.left + self.width * max(0.0, (moment - self.start).total_seconds()) / self.span_s, 1)

    def covers(self, moment: datetime) -> bool:
        return self.start <= moment <= self.end


@dataclass(frozen=True)
class CountScale:
    """y: request counts from the plot's bottom (0) up to `y_max` at its top."""

    bottom: int
    height: int
    y_max: float

    def y(self, count: float) -> float:
        return round(self.bottom - self.height * count / self.y_max, 1)
