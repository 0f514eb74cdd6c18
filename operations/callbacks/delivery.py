"""Delivering callbacks (Standard Webhooks): claims, one attempt at a time, the retry schedule, giving up.

- `dispatch_due_callbacks` (called by `dispatch_polls` every pass) claims due deliveries with a
  compare-and-set on `next_attempt_at` and enqueues one django-q2 task per attempt in the same
  transaction.
- `deliver` sends one attempt: the attempt is charged (compare-and-set on `attempts`) before it is
  sent, so a redelivered task never sends the same attempt twice. Every attempt carries the same
  `webhook-id` and a fresh timestamp and signature, and goes through operations.infrastructure.outbound (purpose
  `callback`: CALLBACK_TIMEOUT_S, no redirects, only the answer's status and Retry-After read).
- A delivery that gives up leaves a warning on the operation and an audit entry
  (`lifecycle.agents.warn_callback_failed`), and on-call hears of it (operations.events).
"""

from __future__ import annotations

import logging
import random
import re
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task
from standardwebhooks import Webhook

from operations.audit import entries as audit
from operations.callbacks.targets import TargetRefused, resolve_target
from operations.infrastructure import outbound
from operations.lifecycle.agents import warn_callback_failed
from operations.models import CallbackDelivery, CallbackEndpoint

logger = logging.getLogger(__name__)

# Standard Webhooks example schedule: the delay before attempt 1, 2, ... 10 (about 3 days in all).
SCHEDULE_S = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 14 * 3600, 20 * 3600, 24 * 3600)
JITTER = 0.2  # each delay is drawn from [0.8, 1.2] x the scheduled delay
# A claimed attempt is re-offered after this long if its task never ran (lost task, dead worker).
CLAIM_LEASE_S = 120
RETRY_AFTER_CAP_S = 24 * 3600

_rng = random.SystemRandom()


def dispatch_due_callbacks(*, limit: int = 100) -> int:
    """Hand due callback attempts to workers; returns how many. Called by `dispatch_polls` each pass.

    Each due row is claimed by moving its `next_attempt_at` forward by a lease with a
    compare-and-set, so two dispatchers never enqueue the same attempt; the task is enqueued in the
    same transaction (ORM broker), so a claim and its task commit together.
    """
    now = timezone.now()
    due = list(
        CallbackDelivery.objects.filter(state=CallbackDelivery.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", "attempts", "next_attempt_at")[:limit]
    )
    sent = 0
    for pk, attempts, due_at in due:
        with transaction.atomic():
            claimed = CallbackDelivery.objects.filter(
                pk=pk, state=CallbackDelivery.State.PENDING, attempts=attempts, next_attempt_at=due_at
            ).update(next_attempt_at=now + timedelta(seconds=CLAIM_LEASE_S))
            if claimed:
                async_task(
                    "operations.tasks.deliver_callback",
                    pk,
                    attempts,
                    task_name=f"callback {pk} #{attempts + 1}",
                    group="callbacks",
                )
                sent += 1
    return sent


def next_delay_s(*, attempts_made: int, retry_after_s: float | None, rng: random.Random | None = None) -> float | None:
    """Seconds until the next attempt after `attempts_made` failures, or None when exhausted."""
    if attempts_made >= len(SCHEDULE_S):
        return None
    delay = SCHEDULE_S[attempts_made] * (rng or _rng).uniform(1 - JITTER, 1 + JITTER)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, RETRY_AFTER_CAP_S))
    return delay


def _retry_after(value: str | None) -> float | None:
    if value and re.fullmatch(r"[0-9]{1,9}", value.strip()):
        return float(value.strip())
    return None


def sign(*, secret: str, event_id_: str, at: datetime, payload: bytes) -> str:
    return Webhook(secret).sign(msg_id=event_id_, timestamp=at, data=payload.decode())


def deliver(*, delivery_id: str, attempt: int) -> str:
    """Send attempt number `attempt` (0-based) of one delivery, once. Returns what happened."""
    now = timezone.now()
    with transaction.atomic():
        charged = CallbackDelivery.objects.filter(
            pk=delivery_id, state=CallbackDelivery.State.PENDING, attempts=attempt
        ).update(attempts=attempt + 1, last_attempt_at=now, next_attempt_at=now + timedelta(seconds=CLAIM_LEASE_S))
    if not charged:
        return "stale"
    delivery = CallbackDelivery.objects.select_related("operation__agent").get(pk=delivery_id)
    endpoint = CallbackEndpoint.objects.filter(url=delivery.url).first()
    if endpoint is not None and endpoint.disabled_at is not None:
        _finish(delivery, state=CallbackDelivery.State.DISABLED, http_status=None, error="endpoint disabled")
        _escalate(delivery, reason=f"callback endpoint disabled since {audit.iso(endpoint.disabled_at)}")
        return "disabled"
    agent = delivery.operation.agent
    if agent is None or not agent.webhook_secret:
        _finish(delivery, state=CallbackDelivery.State.FAILED, http_status=None, error="no signing secret")
        _escalate(delivery, reason="the operation's agent has no webhook signing secret")
        return "failed"
    try:
        target = resolve_target(delivery.url)
    except TargetRefused as exc:
        return _failed_attempt(delivery, http_status=None, error=str(exc), retry_after_s=None)
    sent_at = timezone.now()
    payload = bytes(delivery.payload)
    headers = {
        "Content-Type": "application/json",
        "webhook-id": delivery.pk,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": sign(secret=agent.webhook_secret, event_id_=delivery.pk, at=sent_at, payload=payload),
    }
    answer = outbound.send(target=target, method="POST", content=payload, headers=headers)
    status = answer.http_status
    if answer.transport_error is not None or status is None:
        return _failed_attempt(delivery, http_status=None, error=answer.error_type or "no answer", retry_after_s=None)
    retry_after = _retry_after(answer.header("retry-after"))
    if 200 <= status < 300:
        _finish(delivery, state=CallbackDelivery.State.DELIVERED, http_status=status, error="")
        return "delivered"
    if status == 410:
        with transaction.atomic():
            CallbackEndpoint.objects.update_or_create(
                url=delivery.url,
                defaults={
                    "disabled_at": timezone.now(),
                    "disabled_reason": f"410 Gone for {delivery.pk}",
                    "last_http_status": 410,
                },
            )
        _finish(delivery, state=CallbackDelivery.State.DISABLED, http_status=410, error="410 Gone: endpoint disabled")
        _escalate(delivery, reason="the receiver answered 410 Gone; the endpoint is disabled")
        return "disabled"
    hint = retry_after if status in (429, 503) else None
    return _failed_attempt(delivery, http_status=status, error=f"HTTP {status}", retry_after_s=hint)


def _failed_attempt(
    delivery: CallbackDelivery, *, http_status: int | None, error: str, retry_after_s: float | None
) -> str:
    delay = next_delay_s(attempts_made=delivery.attempts, retry_after_s=retry_after_s)
    if delay is None:
        _finish(delivery, state=CallbackDelivery.State.FAILED, http_status=http_status, error=error)
        _escalate(delivery, reason=f"{delivery.attempts} attempts failed; last: {error}")
        return "failed"
    delivery.last_http_status = http_status
    CallbackDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(
        next_attempt_at=timezone.now() + timedelta(seconds=delay),
        last_http_status=http_status,
        last_error=error[:300],
    )
    logger.info("callback %s attempt %s failed (%s); retry in %.0f s", delivery.pk, delivery.attempts, error, delay)
    return "retry"


def _finish(delivery: CallbackDelivery, *, state: str, http_status: int | None, error: str) -> None:
    now = timezone.now()
    delivery.state, delivery.last_http_status, delivery.last_error = state, http_status, error[:300]
    fields: dict[str, object] = {
        "state": state,
        "next_attempt_at": None,
        "last_http_status": http_status,
        "last_error": error[:300],
    }
    if state == CallbackDelivery.State.DELIVERED:
        fields["delivered_at"] = now
    CallbackDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(**fields)
    if http_status is not None:
        CallbackEndpoint.objects.filter(url=delivery.url).update(last_http_status=http_status)


def _escalate(delivery: CallbackDelivery, *, reason: str) -> None:
    """A callback that cannot be delivered is put in front of people (not a card: the operation may
    be done already); the agent can still read the outcome, which stays in its open list."""
    if warn_callback_failed(delivery=delivery, reason=reason):
        logger.error("operation %s: callback %s not delivered: %s", delivery.operation_id, delivery.pk, reason)
