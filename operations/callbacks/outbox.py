"""The callback outbox: an event row written inside the transaction that changes the operation's status,
so a status change and its announcement commit together. A completion is announced once per
operation (a unique constraint backs this up). Delivery is operations.callbacks.delivery.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from ulid import ULID

from operations.models import CallbackDelivery, Operation
from operations.representation import rfc3339

EVENT_COMPLETED = "operation.completed"
EVENT_NEEDS_ATTENTION = "operation.needs_attention"


def event_id() -> str:
    return f"evt_{ULID()}"


def event_payload(*, operation: Operation, event_type: str, at: datetime) -> bytes:
    """The thin Standard Webhooks body: enough to act on, the rest is one GET away."""
    self_url = f"{settings.SITE_URL}/api/v1/operations/{operation.pk}"
    return json.dumps(
        {
            "type": event_type,
            "timestamp": rfc3339(at),
            "data": {
                "object": "operation_event",
                "operation_id": operation.pk,
                "sequence": operation.sequence,
                "status": str(operation.status),
                "done": operation.done,
                "provider": operation.provider.slug,
                "provider_job_id": operation.provider_job_id,
                "links": {"self": self_url, "wait": f"{self_url}/wait?timeout_s=25"},
            },
        },
        separators=(",", ":"),
    ).encode()


def record_event(*, operation: Operation, event_type: str) -> CallbackDelivery | None:
    """Queue one event for the operation's callback URL, if it has one.

    Runs inside the caller's transaction, with the operation row locked, after its status change.
    Idempotent per (operation, event type, sequence), and a completion is announced only once.
    """
    if not operation.callback_url:
        return None
    if event_type == EVENT_COMPLETED:
        existing = CallbackDelivery.objects.filter(operation=operation, event_type=EVENT_COMPLETED).first()
        if existing is not None:
            return existing
    now = timezone.now()
    delivery, _ = CallbackDelivery.objects.get_or_create(
        operation=operation,
        event_type=event_type,
        sequence=operation.sequence,
        defaults={
            "id": event_id(),
            "payload": event_payload(operation=operation, event_type=event_type, at=now),
            "url": operation.callback_url,
            "next_attempt_at": now,
            "created_at": now,
        },
    )
    return delivery
