"""The database counters behind every cross-process limit (notifications per hour, decisions per
minute, registrations): a unit is refused only when its window is really full."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection

from operations.limits import ratelimit
from operations.models import RateWindow

NOW = datetime(2026, 12, 3, 16, 5, 53, tzinfo=UTC)


@pytest.mark.django_db
def test_a_window_counts_up_to_its_limit_then_says_how_long_until_it_ends():
    results = [ratelimit.take(key="k", limit=3, window_s=3600, now=NOW) for _ in range(4)]
    assert results == [None, None, None, 3600 - 353]
    assert ratelimit.used(key="k", window_s=3600, now=NOW) == (3, 3247)


@pytest.mark.django_db
def test_a_new_window_starts_from_zero_and_drops_the_spent_one():
    for _ in range(2):
        ratelimit.take(key="k", limit=2, window_s=60, now=NOW)
    later = NOW.replace(minute=6)
    assert ratelimit.take(key="k", limit=2, window_s=60, now=later) is None
    assert list(RateWindow.objects.values_list("count", flat=True)) == [1]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_first_units_of_a_window_taken_at_once_are_all_counted():
    """Found in CI: two notifications sent at the same moment as the first of the hour, and one was
    skipped as 'NOTIFY_MAX_PER_HOUR (60) reached'. The loser of the race to open the window found the
    window there and read that as full."""
    takers, rounds = 8, 15
    refused: list[tuple[int, int]] = []
    errors: list[str] = []
    barrier = threading.Barrier(takers)

    def take(index: int) -> None:
        try:
            for round_ in range(rounds):
                barrier.wait(timeout=30)
                if ratelimit.take(key=f"race:{round_}", limit=100, window_s=3600, now=NOW) is not None:
                    refused.append((round_, index))
        except Exception as exc:  # reported below, with the thread's index
            errors.append(f"taker {index}: {exc!r}")
            barrier.abort()
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=take, args=(i,)) for i in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert refused == []
    counts = dict(RateWindow.objects.values_list("key", "count"))
    assert counts == {f"race:{r}": takers for r in range(rounds)}
