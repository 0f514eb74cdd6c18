"""The hourly caps on messages to people, and whose budget each message spends.

- NOTIFY_MAX_PER_HOUR: the messages of the policies' own schedule (levels, reminders) and the
  failed-callback and business-deadline messages, in all.
- NOTIFY_MAX_PER_ACTOR_PER_HOUR: the messages one person's act caused (a give-back's restart, a
  hand-over, a take-over, an acceptance to confirm; `NotificationDelivery.caused_by`), per person.
  Toggling acknowledge and give back once used up the global cap in under a minute and silenced
  every other card's pages for the rest of the hour: a person's acts now spend their own budget.
- Never held back by either, only counted while there is room: a new card's or group's first page
  and every page through a channel that folds a card's pages into one alert, PagerDuty's triggers
  (operations.notify.rules.never_held_by_hourly_caps).

Give-backs that resumed a round instead of restarting it (NOTIFY_RESTART_MIN_S) are counted too,
for /system/. The windows are operations.limits.ratelimit's fixed hours, shared by every process.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from operations.limits import ratelimit
from operations.models import NotificationDelivery
from operations.notify import rules

WINDOW_S = 3600
GLOBAL_KEY = "notifications"
ACTOR_KEY_PREFIX = "notifications:actor:"
RESUMED_KEY = "notifications:resumed"


def actor_key(user_id: int) -> str:
    return f"{ACTOR_KEY_PREFIX}{user_id}"


def hold(row: NotificationDelivery, *, one_alert_per_card: bool, now: datetime) -> str:
    """Count a message to people against the budget it spends; why it is held back, or "".
    `one_alert_per_card`: its channel folds a card's pages into one alert (escalations.oncall.channels)."""
    if row.caused_by_id is not None:
        limit = settings.NOTIFY_MAX_PER_ACTOR_PER_HOUR
        key = actor_key(row.caused_by_id)
        # caused_by_id is set, so the person is there (mypy does not tie the two fields).
        name = f"{row.caused_by.get_username()}'s NOTIFY_MAX_PER_ACTOR_PER_HOUR"  # type: ignore[union-attr]
    else:
        limit, key, name = settings.NOTIFY_MAX_PER_HOUR, GLOBAL_KEY, "NOTIFY_MAX_PER_HOUR"
    if limit <= 0:
        return ""
    counted = ratelimit.take(key=key, limit=limit, window_s=WINDOW_S, now=now) is None
    exempt = rules.never_held_by_hourly_caps(
        event=rules.Event(row.event), one_alert_per_card=one_alert_per_card, slot=(row.round, row.level, row.repetition)
    )
    return "" if counted or exempt else f"{name} ({limit}) reached"


def count_resumed(*, now: datetime) -> None:
    """A give-back resumed its card's round instead of restarting it (NOTIFY_RESTART_MIN_S)."""
    ratelimit.take(key=RESUMED_KEY, limit=None, window_s=WINDOW_S, now=now)
