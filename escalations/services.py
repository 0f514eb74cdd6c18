"""Escalation writes: opening a card, and (later) the decisions humans take on it."""

from __future__ import annotations

from django.utils import timezone

from escalations.models import Escalation
from operations import audit, http
from operations.callbacks import record_event
from operations.models import Operation
from operations.vocabulary import Reason


def escalation_open(*, operation: Operation, reason: Reason, detail: str, context: dict) -> Escalation:
    """Open the decision card for an operation that just entered needs_attention.

    Runs inside the transaction that changed the operation's status, after its controller entry.
    """
    now = timezone.now()
    fingerprint = ""
    if reason is Reason.AUTHORIZATION_DENIED:
        fingerprint = http.credential_fingerprint(credential_env=operation.provider.credential_env)
    escalation = Escalation.objects.create(
        operation=operation,
        reason=reason,
        detail=detail,
        opened_at=now,
        credential_fingerprint=fingerprint,
        context={key: value for key, value in context.items() if value is not None},
    )
    audit.append(
        entry_type="escalation.opened",
        actor=audit.SYSTEM_CONTROLLER,
        operation_id=operation.pk,
        data={
            "escalation_id": escalation.pk,
            "reason": str(reason),
            "detail": detail,
            "request_count": operation.status_requests_used,
            "max_requests": operation.max_status_requests,
            "deadline": audit.iso(operation.deadline_at),
        },
        at=now,
    )
    record_event(operation=operation, event_type="operation.needs_attention")
    return escalation
