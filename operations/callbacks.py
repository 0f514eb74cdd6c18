"""Completion callbacks: the outbox side (DESIGN.md section 9).

`record_event` writes the event row inside the transaction that changes the operation's status,
so a status change and its announcement commit together.
"""

from __future__ import annotations

import json

from django.utils import timezone
from ulid import ULID

from operations.models import CallbackDelivery, Operation


def event_id() -> str:
    return f"evt_{ULID()}"


def record_event(*, operation: Operation, event_type: str) -> CallbackDelivery | None:
    """Queue one event for the operation's callback URL, if it has one. Idempotent per sequence."""
    if not operation.callback_url:
        return None
    now = timezone.now()
    payload = json.dumps(
        {
            "type": event_type,
            "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data": {
                "operation_id": operation.pk,
                "sequence": operation.sequence,
                "status": operation.status,
                "done": operation.done,
                "provider": operation.provider.slug,
                "provider_job_id": operation.provider_job_id,
            },
        },
        separators=(",", ":"),
    ).encode()
    delivery, _ = CallbackDelivery.objects.get_or_create(
        operation=operation,
        event_type=event_type,
        sequence=operation.sequence,
        defaults={
            "id": event_id(),
            "payload": payload,
            "url": operation.callback_url,
            "next_attempt_at": now,
            "created_at": now,
        },
    )
    return delivery


def dispatch_due_callbacks(*, limit: int = 100) -> int:
    """Hand due callback deliveries to workers; returns how many. Called by `dispatch_polls` each pass.

    The agent-API work fills this in (claim due rows, enqueue `operations.tasks.deliver_callback`).
    """
    return 0
