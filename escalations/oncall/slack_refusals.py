"""Refused Slack requests (no or a bad signature) counted per reason and hour, without a database
write per request: anyone can post to /slack/interactions, and a write per unsigned POST would let
them make the database do work at their rate.

Each web process counts in memory and writes its counts at most every FLUSH_S (and a reason's
first refusal in an hour at once, so /system/ shows a new kind of refusal without delay). A process
that stops loses at most FLUSH_S of counts; the figure is a sign of trouble, not a ledger. Each
write is one log line with the counts it adds (never a line per request, which anyone could make
at their own rate). Counts wait in memory for the next refusal after FLUSH_S: refusals that stop
coming leave the last FLUSH_S of them unwritten until another comes.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F

from operations.models import SlackRefusal

FLUSH_S = 10.0
logger = logging.getLogger(__name__)

_lock = threading.Lock()
_pending: Counter[tuple[str, datetime]] = Counter()
_written: set[tuple[str, datetime]] = set()
_last_flush: datetime | None = None


def count(*, reason: str, now: datetime) -> None:
    """One refused request; written with the others at most every FLUSH_S."""
    global _last_flush
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    key = (reason, hour)
    with _lock:
        _pending[key] += 1
        due = key not in _written or _last_flush is None or (now - _last_flush).total_seconds() >= FLUSH_S
        if not due:
            return
        batch = dict(_pending)
        _pending.clear()
        # Only this hour's keys matter for "first of the hour": the set stays a handful of reasons.
        _written.intersection_update({k for k in _written if k[1] >= hour})
        _written.update(batch)
        _last_flush = now
    _write(batch, now=now)


def forget() -> None:
    """Drop what this process holds (tests: every test starts with an empty counter)."""
    global _last_flush
    with _lock:
        _pending.clear()
        _written.clear()
        _last_flush = None


def _write(batch: dict[tuple[str, datetime], int], *, now: datetime) -> None:
    by_reason: Counter[str] = Counter()
    for (reason, _hour), n in batch.items():
        by_reason[reason] += n
    said = ", ".join(f"{n} refused ({reason})" for reason, n in sorted(by_reason.items()))
    logger.warning("Slack interactions answered 401, nothing changed: %s since the last count", said)
    with transaction.atomic():
        SlackRefusal.objects.bulk_create(
            [SlackRefusal(reason=reason, hour=hour, count=0, last_at=now) for reason, hour in batch],
            ignore_conflicts=True,
        )
        for (reason, hour), n in batch.items():
            SlackRefusal.objects.filter(reason=reason, hour=hour).update(count=F("count") + n, last_at=now)
