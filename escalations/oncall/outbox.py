"""The notification outbox: due rows handed to workers, one attempt at a time, each outcome written.

- `claim_due` (the dispatcher, every pass): a due row is claimed by moving `next_attempt_at` forward
  by a lease with a compare-and-set on (attempts, next_attempt_at), and its task enqueued in the
  same transaction (the ORM broker writes to our database), so two dispatchers never enqueue the
  same attempt. A follow-up waits while the row before it in its stream is pending, and is
  skipped when that stream never started (operations.notify.rules.follow_up_ready).
- `charge` (the worker, before sending): a compare-and-set on `attempts`, committed before anything
  is sent, so a redelivered task never sends the same attempt twice. A worker killed after
  charging leaves the row pending under its lease; after the lease it is retried as the next
  attempt (that one message may then arrive twice: PagerDuty's dedup_key makes it harmless).
- `finish` / `retry_later`: the outcome, written with the same compare-and-set.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from operations.models import NotificationDelivery
from operations.notify import rules
from operations.notify.kinds import Kind

DELIVER_TASK = "escalations.tasks.deliver_notification"
TASK_GROUP = "notifications"
CLAIMS_PER_PASS = 100
State = NotificationDelivery.State

_rng = random.SystemRandom()


def claim_due(*, now: datetime | None = None, limit: int = CLAIMS_PER_PASS) -> int:
    """Hand due notification attempts to workers; returns how many were enqueued."""
    now = now or timezone.now()
    due = list(
        NotificationDelivery.objects.filter(state=State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", "attempts", "next_attempt_at", "after_id")[:limit]
    )
    claimed = 0
    for pk, attempts, due_at, after_id in due:
        with transaction.atomic():
            if after_id is not None:
                before = NotificationDelivery.objects.filter(pk=after_id).first()
                readiness, why = rules.follow_up_ready(predecessor=None if before is None else rule_row(before))
                if readiness is rules.Readiness.WAIT:
                    continue
                if readiness is rules.Readiness.SKIP:
                    NotificationDelivery.objects.filter(pk=pk, state=State.PENDING, attempts=attempts).update(
                        state=State.SKIPPED, detail=why[:300], next_attempt_at=None, finished_at=now
                    )
                    continue
            won = NotificationDelivery.objects.filter(
                pk=pk, state=State.PENDING, attempts=attempts, next_attempt_at=due_at
            ).update(next_attempt_at=now + timedelta(seconds=rules.CLAIM_LEASE_S))
            if won:
                async_task(DELIVER_TASK, pk, attempts, group=TASK_GROUP, task_name=f"notify-{pk}-{attempts + 1}")
                claimed += 1
    return claimed


def rule_row(row: NotificationDelivery) -> rules.Row:
    """A delivery as the pure rules read it (operations.notify.rules)."""
    return rules.Row(
        id=row.pk,
        channel=Kind(row.channel),
        address=row.address,
        event=rules.Event(row.event),
        state=rules.State(row.state),
        attempts=row.attempts,
        provider_ref=row.provider_ref,
    )


def charge(*, delivery_id: int, attempt: int, now: datetime) -> bool:
    """Count attempt number `attempt` (0-based) before it is sent; False: stale (already charged or done)."""
    with transaction.atomic():
        return bool(
            NotificationDelivery.objects.filter(pk=delivery_id, state=State.PENDING, attempts=attempt).update(
                attempts=attempt + 1,
                last_attempt_at=now,
                next_attempt_at=now + timedelta(seconds=rules.CLAIM_LEASE_S),
            )
        )


def finish(
    *,
    delivery: NotificationDelivery,
    state: str,
    detail: str,
    now: datetime,
    http_status: int | None = None,
    provider_ref: str = "",
) -> bool:
    """The row's last word: sent, failed or skipped. The response_url (a capability) goes with it."""
    fields: dict[str, object] = {
        "state": state,
        "detail": detail[:300],
        "next_attempt_at": None,
        "finished_at": now,
        "http_status": http_status,
        "response_url": "",
    }
    if provider_ref:
        fields["provider_ref"] = provider_ref[:64]
    return bool(
        NotificationDelivery.objects.filter(pk=delivery.pk, state=State.PENDING, attempts=delivery.attempts).update(
            **fields
        )
    )


def retry_later(
    *,
    delivery: NotificationDelivery,
    detail: str,
    now: datetime,
    http_status: int | None,
    retry_after_s: float | None,
    rng: random.Random | None = None,
) -> str:
    """Schedule the next attempt on the retry schedule, or give up as failed when it ran out."""
    delay = rules.retry_delay_s(
        attempts_made=delivery.attempts,
        retry_after_s=retry_after_s,
        rng=rng or _rng,
        schedule=settings.NOTIFY_RETRY_SCHEDULE_S,
    )
    if delay is None:
        finish(
            delivery=delivery,
            state=State.FAILED,
            detail=f"{detail}; gave up after {delivery.attempts} attempts",
            now=now,
            http_status=http_status,
        )
        return "failed"
    NotificationDelivery.objects.filter(pk=delivery.pk, state=State.PENDING, attempts=delivery.attempts).update(
        next_attempt_at=now + timedelta(seconds=delay), detail=f"{detail}; retrying"[:300], http_status=http_status
    )
    return "retry"
