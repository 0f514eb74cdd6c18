"""Text labels above the plot: widths estimated, packed in rows so that no two overlap."""

from __future__ import annotations

from dataclasses import dataclass

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


def pack(labels: list[tuple[float, str, str]], *, lo: float, hi: float) -> list[Placed]:
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
