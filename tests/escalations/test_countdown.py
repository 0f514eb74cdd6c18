"""The countdown a card and a group row show beside a deadline, at the edges an engineer sees."""

from __future__ import annotations

from datetime import timedelta

import pytest

from escalations.templatetags.dash import countdown
from tests.support import T0


@pytest.fixture(autouse=True)
def _frozen_clock(clock):
    return clock


@pytest.mark.parametrize(
    ("offset_s", "words", "urgency"),
    [
        (600, "business deadline in 10 min", "soon"),
        (0.4, "business deadline now", "soon"),
        (0, "business deadline now", "overdue"),
        (-0.6, "business deadline now", "overdue"),
        (-5, "business deadline passed 5 s ago", "overdue"),
        (3600, "business deadline in 1 h", "later"),
    ],
)
def test_a_countdown_never_reads_zero_seconds(offset_s, words, urgency):
    html = countdown(T0 + timedelta(seconds=offset_s), "business deadline")
    assert f">{words}</time>" in html and f"urgency-{urgency}" in html
