"""Fixed-window counters in the database: limits that hold across every pollerdash process.

One row per (key, window). Counting a unit is an UPDATE ... WHERE count < limit, which row-locks
the window until the caller's transaction ends, or the INSERT of the window's first unit (the
unique constraint settles two first units at once). So concurrent callers never overshoot a
limit, on PostgreSQL and on SQLite (whose write transactions are serialised). Django's cache is
per process here (no shared cache is configured), so it could not hold a limit.

A fixed window lets a burst of up to twice the limit straddle a window boundary: these are abuse
limits, not a meter.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from operations.models import RateWindow


def window_of(*, now: datetime, window_s: int) -> tuple[datetime, int]:
    """The start of the window holding NOW, and the whole seconds until it ends (at least 1)."""
    start_ts = math.floor(now.timestamp() / window_s) * window_s
    left = max(1, math.ceil(start_ts + window_s - now.timestamp()))
    return datetime.fromtimestamp(start_ts, tz=UTC), left


def take(*, key: str, limit: int | None, window_s: int, now: datetime) -> int | None:
    """Count one unit for KEY unless its current window already holds LIMIT (None: no limit).

    Returns None when the unit was counted, else the seconds until the window ends (Retry-After).
    Inside a transaction the count commits or rolls back with it.
    """
    start, left = window_of(now=now, window_s=window_s)
    window = RateWindow.objects.filter(key=key, window_start=start)
    room = window if limit is None else window.filter(count__lt=limit)
    with transaction.atomic():
        if room.update(count=F("count") + 1):
            return None
        if not window.exists():
            try:
                with transaction.atomic():
                    RateWindow.objects.create(key=key, window_start=start, count=1)
            except IntegrityError:
                pass  # another process opened the window first: count against it below
            else:
                # This key's earlier windows are spent; dropping them keeps about one row per key.
                RateWindow.objects.filter(key=key, window_start__lt=start).delete()
                return None
        # Either the window is full, or another process opened it after the first UPDATE looked:
        # a window that exists is not yet a full one, so ask again.
        return None if room.update(count=F("count") + 1) else left


def used(*, key: str, window_s: int, now: datetime) -> tuple[int, int]:
    """How many units KEY's current window holds, and the whole seconds until it ends."""
    start, left = window_of(now=now, window_s=window_s)
    count = RateWindow.objects.filter(key=key, window_start=start).values_list("count", flat=True).first()
    return count or 0, left
