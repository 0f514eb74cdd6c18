"""Pacing of an extension's window (docs/DESIGN.md section 4, item 4): pure functions, injected clock and RNG."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operations.polling.schedule import plan_wait
from operations.polling.signals import Hint
from operations.polling.window import next_check, open_window, plan_checks, upcoming_checks
from operations.vocabulary import DelaySource

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
# seconds() keeps microseconds: each wake-up may be rounded by half of one.
TOLERANCE = timedelta(microseconds=1)


def extension_window(*, not_before_s: float | None, old_deadline_s: float, minutes: int, checks: int):
    """The window the card's extension option opens (operations/cards/options.py, _bounds_after)."""
    asked = None if not_before_s is None else NOW + timedelta(seconds=not_before_s)
    first = max(NOW, asked) if asked is not None else NOW
    ends_at = max(NOW + timedelta(seconds=old_deadline_s), first) + timedelta(minutes=minutes)
    return open_window(now=NOW, not_before=asked, ends_at=ends_at, checks=checks)


windows = st.builds(
    extension_window,
    not_before_s=st.none() | st.floats(min_value=-3600, max_value=3600),
    old_deadline_s=st.floats(min_value=-7200, max_value=7200),
    minutes=st.integers(min_value=1, max_value=1440),
    checks=st.integers(min_value=1, max_value=200),
)
floors = st.floats(min_value=0.01, max_value=1.0)
seeds = st.integers(min_value=0, max_value=2**32)


# Pure arithmetic, fast; no per-example deadline, so a busy shared machine cannot fail it on timing.
@settings(deadline=None)
@given(window=windows, floor=floors, seed=seeds)
def test_the_m_checks_last_the_window_each_in_its_own_slot_the_last_in_its_final_spacing(window, floor, seed) -> None:
    planned = plan_checks(window=window, jitter_floor=floor, rng=random.Random(seed))
    spacing = timedelta(seconds=window.spacing_s)
    assert len(planned) == window.checks
    assert planned[0] == window.first_at >= NOW
    assert all(window.first_at <= moment < window.ends_at for moment in planned)
    # Check k falls in slot k: the window is used to its end, not front-loaded.
    for index, moment in enumerate(planned):
        assert window.first_at + index * spacing - TOLERANCE * 4 <= moment
        assert moment <= window.first_at + (index + 1) * spacing + TOLERANCE * 4
    assert window.ends_at - planned[-1] <= spacing + TOLERANCE * 4
    for earlier, later in zip(planned, planned[1:], strict=False):
        assert later - earlier >= floor * spacing - TOLERANCE * 4


@settings(deadline=None)
@given(
    window=windows,
    floor=floors,
    seed=seeds,
    guidance=st.lists(st.none() | st.floats(min_value=0, max_value=20_000), max_size=200),
)
def test_provider_guidance_inside_a_window_is_a_minimum_and_never_pushes_a_check_past_the_end(
    window,
    floor: float,
    seed: int,
    guidance: list[float | None],
) -> None:
    planned = plan_checks(window=window, jitter_floor=floor, rng=random.Random(seed), guidance_s=guidance)
    spacing = timedelta(seconds=window.spacing_s)
    assert 1 <= len(planned) <= window.checks
    assert all(window.first_at <= moment < window.ends_at for moment in planned)
    for index, (earlier, later) in enumerate(zip(planned, planned[1:], strict=False)):
        gap = later - earlier
        assert gap >= floor * spacing - TOLERANCE * 4
        asked = guidance[index] if index < len(guidance) else None
        if asked is not None:
            assert gap >= timedelta(seconds=asked) - TOLERANCE
    if len(planned) == window.checks:
        # Every check went out: the last one still falls in the window's final spacing.
        assert window.ends_at - planned[-1] <= spacing + TOLERANCE * 4
    else:
        # A check is dropped only because the provider's wait carried one past its slot.
        assert any(g is not None and g > floor * window.spacing_s for g in guidance[: len(planned)])


def test_five_minutes_three_checks_last_five_minutes_the_last_check_in_the_final_fifth() -> None:
    # The case the issue measured: the M-th check came (and the card with it) at 44-63 % of the window.
    window = open_window(now=NOW, not_before=None, ends_at=NOW + timedelta(minutes=5), checks=3)
    for seed in range(500):
        planned = plan_checks(window=window, jitter_floor=0.5, rng=random.Random(seed))
        assert len(planned) == 3 and planned[0] == NOW
        assert NOW + timedelta(minutes=4) <= planned[-1] < NOW + timedelta(minutes=5)
        assert NOW + timedelta(seconds=100) <= planned[1] < NOW + timedelta(seconds=200)


def test_the_last_check_is_planned_a_margin_before_the_deadline_so_a_busy_dispatcher_still_sends_it() -> None:
    window = open_window(now=NOW, not_before=None, ends_at=NOW + timedelta(minutes=15), checks=4)
    # No jitter at all (floor 1): each check at its slot's end, less the margin; the last 5 s before the end.
    planned = plan_checks(window=window, jitter_floor=1.0, rng=random.Random(1))
    assert planned == [NOW] + [NOW + timedelta(seconds=225 * k - 5) for k in (2, 3, 4)]
    short = open_window(now=NOW, not_before=None, ends_at=NOW + timedelta(minutes=1), checks=3)
    assert plan_checks(window=short, jitter_floor=1.0, rng=random.Random(1))[-1] == NOW + timedelta(seconds=56)


def test_a_check_made_late_does_not_move_the_later_ones_earlier_nor_out_of_their_slots() -> None:
    ends = NOW + timedelta(minutes=15)
    # The second of four checks (two to come) went out late, at the end of the third slot: the next
    # one keeps floor x spacing from it, and the last one stays in the final spacing.
    late = NOW + timedelta(seconds=449)
    for seed in range(200):
        rng = random.Random(seed)
        third = next_check(now=late, ends_at=ends, spacing_s=225.0, checks_left=2, jitter_floor=0.5, rng=rng)
        assert third.next_poll_at - late >= timedelta(seconds=112.5)
        last = next_check(
            now=third.next_poll_at, ends_at=ends, spacing_s=225.0, checks_left=1, jitter_floor=0.5, rng=rng
        )
        assert ends - timedelta(seconds=112.5) <= last.next_poll_at <= ends - timedelta(seconds=5)


def test_the_first_check_goes_out_at_once_or_when_the_provider_asked() -> None:
    window = open_window(now=NOW, not_before=None, ends_at=NOW + timedelta(minutes=15), checks=4)
    assert (window.first_at, window.spacing_s) == (NOW, 225.0)
    past = open_window(now=NOW, not_before=NOW - timedelta(minutes=1), ends_at=NOW + timedelta(minutes=15), checks=4)
    assert past.first_at == NOW
    asked = NOW + timedelta(minutes=3)
    later = open_window(now=NOW, not_before=asked, ends_at=asked + timedelta(minutes=15), checks=3)
    assert (later.first_at, later.spacing_s) == (asked, 300.0)
    with pytest.raises(ValueError, match="at least one check"):
        open_window(now=NOW, not_before=None, ends_at=NOW + timedelta(minutes=1), checks=0)


def paced(**overrides: object):
    args: dict[str, object] = {
        "now": NOW,
        # Four checks of 200 s to come: the next one in the slot from 100 s to 200 s (less the margin).
        "deadline_at": NOW + timedelta(seconds=800),
        "retry_after": None,
        "poll_hint": None,
        "base_s": 5.0,
        "max_s": 120.0,
        "jitter_floor": 0.5,
        "backoff_attempt": 3,
        "hint_floor_s": 1.0,
        "hint_cap_s": 900.0,
        "rng": random.Random(7),
        "paced_spacing_s": 200.0,
        "paced_checks_left": 4,
    }
    args.update(overrides)
    return plan_wait(**args)


def test_inside_a_window_the_pacing_replaces_backoff_which_neither_restarts_nor_moves_on() -> None:
    delays = [paced(rng=random.Random(seed)) for seed in range(200)]
    assert all(100_000 <= wait.delay_ms <= 195_000 for wait in delays)
    assert {wait.delay_source for wait in delays} == {DelaySource.MANUAL_EXTENSION}
    assert {wait.backoff_attempt for wait in delays} == {3}


def test_inside_a_window_provider_guidance_wins_only_when_it_asks_for_longer() -> None:
    longer = paced(retry_after=Hint(400.0))
    assert (longer.delay_ms, longer.delay_source) == (400_000, DelaySource.PROVIDER_RETRY_AFTER)
    assert longer.guidance_s == 400.0
    hinted = paced(poll_hint=Hint(500.0))
    assert (hinted.delay_ms, hinted.delay_source) == (500_000, DelaySource.PROVIDER_POLL_HINT)
    # A provider that says "look again in 5 s" does not make a window spend its checks early.
    sooner = paced(poll_hint=Hint(5.0))
    assert sooner.delay_source is DelaySource.MANUAL_EXTENSION and sooner.delay_ms >= 100_000
    assert sooner.guidance_s == 5.0


def test_a_paced_wake_up_never_falls_after_the_deadline() -> None:
    wait = paced(deadline_at=NOW + timedelta(seconds=30))
    assert wait.next_poll_at == NOW + timedelta(seconds=30)
    assert any("capped at the deadline" in note for note in wait.notes)


def test_the_checks_still_to_come_are_marked_at_the_latest_moment_each_can_fall() -> None:
    ends = NOW + timedelta(minutes=10)
    # Three checks left in five slots' worth of window: the later two at their slots' ends, less 5 s.
    assert upcoming_checks(next_poll_at=NOW, spacing_s=120, checks_left=3, ends_at=ends, jitter_floor=0.5) == [
        NOW,
        NOW + timedelta(seconds=475),
        NOW + timedelta(seconds=595),
    ]
    # More checks left than slots remain (a check went out late): floor x spacing apart, inside the window.
    assert upcoming_checks(next_poll_at=NOW, spacing_s=240, checks_left=5, ends_at=ends, jitter_floor=0.5) == [
        NOW + timedelta(seconds=s) for s in (0, 120, 240, 360, 595)
    ]
    assert upcoming_checks(next_poll_at=NOW, spacing_s=60, checks_left=0, ends_at=ends, jitter_floor=0.5) == []


@settings(deadline=None)
@given(window=windows, floor=floors, seed=seeds)
def test_the_charts_planned_marks_are_where_the_checks_come_at_the_latest(window, floor, seed) -> None:
    """What the operation page draws (upcoming_checks) against what the controller does (plan_checks):
    every real check at or before its mark, by at most its slot's jitter."""
    planned = plan_checks(window=window, jitter_floor=floor, rng=random.Random(seed))
    jitter = timedelta(seconds=(1 - floor) * window.spacing_s)
    for done in range(len(planned)):
        marks = upcoming_checks(
            next_poll_at=planned[done],
            spacing_s=window.spacing_s,
            checks_left=window.checks - done,
            ends_at=window.ends_at,
            jitter_floor=floor,
        )
        assert len(marks) == len(planned) - done
        for actual, mark in zip(planned[done:], marks, strict=True):
            assert mark - jitter - TOLERANCE * 4 <= actual <= mark + TOLERANCE * 4
