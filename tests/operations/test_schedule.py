from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from operations.polling.schedule import backoff_raw, plan_wait
from operations.polling.signals import Hint
from operations.vocabulary import DelaySource

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
FAR = NOW + timedelta(hours=1)


def plan(**overrides: object):
    args: dict[str, object] = {
        "now": NOW,
        "deadline_at": FAR,
        "retry_after": None,
        "poll_hint": None,
        "base_s": 5.0,
        "max_s": 120.0,
        "jitter_floor": 0.5,
        "backoff_attempt": 0,
        "hint_floor_s": 1.0,
        "hint_cap_s": 900.0,
        "rng": random.Random(7),
    }
    args.update(overrides)
    return plan_wait(**args)


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_raw(base_s=5, max_s=120, attempt=a) for a in range(7)] == [5, 10, 20, 40, 80, 120, 120]
    assert backoff_raw(base_s=5, max_s=120, attempt=10_000) == 120


def test_the_profiles_multiplier_sets_how_fast_the_backoff_grows() -> None:
    slower = [backoff_raw(base_s=4, max_s=30, attempt=a, multiplier=1.5) for a in range(7)]
    assert slower == [4, 6, 9, 13.5, 20.25, 30, 30]
    assert {backoff_raw(base_s=5, max_s=120, attempt=a, multiplier=1) for a in range(50)} == {5}
    # The chosen multiplier reaches the wait actually planned, jitter and all.
    delays = [plan(backoff_attempt=2, multiplier=1.5, rng=random.Random(seed)).delay_ms for seed in range(100)]
    assert min(delays) >= 5_625 and max(delays) <= 11_250


def test_a_multiplier_out_of_range_is_held_to_its_bounds() -> None:
    # Below 1 a wait would shrink with every attempt; far above 4 backoff would jump to its cap.
    assert [backoff_raw(base_s=5, max_s=120, attempt=a, multiplier=0.5) for a in range(3)] == [5, 5, 5]
    assert [backoff_raw(base_s=5, max_s=1000, attempt=a, multiplier=1e6) for a in range(4)] == [5, 20, 80, 320]


def test_local_backoff_is_jittered_within_floor_and_raw() -> None:
    delays = [plan(backoff_attempt=3, rng=random.Random(seed)).delay_ms for seed in range(200)]
    assert min(delays) >= 20_000 and max(delays) <= 40_000
    assert len(set(delays)) > 150  # spread, not in step


def test_local_backoff_moves_the_attempt_on() -> None:
    wait = plan(backoff_attempt=2)
    assert wait.delay_source is DelaySource.LOCAL_BACKOFF and wait.backoff_attempt == 3


def test_retry_after_wins_and_is_a_minimum() -> None:
    wait = plan(retry_after=Hint(90.0), poll_hint=Hint(10.0))
    assert wait.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert wait.next_poll_at == NOW + timedelta(seconds=90)
    assert wait.backoff_attempt == 0


def test_retry_after_zero_is_raised_to_the_floor() -> None:
    assert plan(retry_after=Hint(0.0)).delay_ms == 1000


def test_a_poll_hint_is_used_when_there_is_no_retry_after() -> None:
    wait = plan(poll_hint=Hint(45.0))
    assert wait.delay_source is DelaySource.PROVIDER_POLL_HINT and wait.delay_ms == 45_000


def test_a_poll_hint_above_the_cap_is_clamped_with_a_note() -> None:
    wait = plan(poll_hint=Hint(5000.0))
    assert wait.delay_ms == 900_000 and any("clamped" in note for note in wait.notes)


def test_an_ignored_hint_falls_back_to_backoff_and_keeps_the_note() -> None:
    wait = plan(retry_after=Hint(None, "ignored unparsable Retry-After 'soon'"))
    assert wait.delay_source is DelaySource.LOCAL_BACKOFF
    assert "ignored unparsable Retry-After 'soon'" in wait.notes


def test_every_wake_up_is_capped_at_the_deadline() -> None:
    deadline = NOW + timedelta(seconds=30)
    wait = plan(deadline_at=deadline, retry_after=Hint(3600.0))
    assert wait.next_poll_at == deadline
    assert wait.delay_source is DelaySource.PROVIDER_RETRY_AFTER
    assert any("capped at the deadline" in note for note in wait.notes)
