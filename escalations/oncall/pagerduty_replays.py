"""A PagerDuty webhook event is acted on once: the same event again (PagerDuty's own retry, or a
captured request posted again), to this web process or another, changes nothing.

The key is the event's id, kept in the database under a unique constraint (PagerDutyEventSeen), so
two web processes cannot both take it: on PostgreSQL the second insert waits for the first
transaction and then fails; SQLite's writers are serial. Only events whose signature verified get
here, so nobody without the subscription's secret can write a row. Rows older than REPLAY_KEEP are
removed by the next event; an event that old is refused by its own signed `occurred_at` first
(escalations.oncall.pagerduty_webhooks.too_old_or_early).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from escalations.oncall.pagerduty_webhooks import REPLAY_KEEP
from operations.models import PagerDutyEventSeen


def first_delivery(*, event_id: str, occurred_at: datetime, now: datetime) -> bool:
    """Record a verified event; False when it was recorded before (a replay)."""
    with transaction.atomic():
        PagerDutyEventSeen.objects.filter(occurred_at__lt=now - REPLAY_KEEP).delete()
        try:
            with transaction.atomic():
                PagerDutyEventSeen.objects.create(event_id=event_id, occurred_at=occurred_at, seen_at=now)
        except IntegrityError:
            return False
    return True
