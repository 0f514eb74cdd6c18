"""A signed Slack request is acted on once: the same request replayed within Slack's 5-minute window,
to this web process or another, is answered with an empty 200 and changes nothing.

The key is the request's timestamp and signature (the signature covers the body, so the same key
is the same request). It is kept in the database, one row per request under a unique constraint,
so two web processes cannot both take it: on PostgreSQL the second insert waits for the first
transaction and then fails; SQLite's writers are serial. Rows whose timestamp has left the window
(a replay of them is refused as stale before it gets here) are removed by the next click.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from django.db import IntegrityError, transaction

from escalations.oncall.slack import WINDOW_S
from operations.models import SlackInteractionSeen

# Beyond the window, a margin for web processes whose clocks differ a little.
KEEP_S = WINDOW_S + 60


def first_delivery(*, timestamp: str, signature: str, now: datetime) -> bool:
    """Record a verified request; False when it was recorded before (a replay)."""
    key = hashlib.sha256(f"{timestamp}:{signature}".encode()).hexdigest()
    with transaction.atomic():
        SlackInteractionSeen.objects.filter(request_ts__lt=int(now.timestamp()) - KEEP_S).delete()
        try:
            with transaction.atomic():
                SlackInteractionSeen.objects.create(request_key=key, request_ts=int(timestamp), seen_at=now)
        except IntegrityError:
            return False
    return True
