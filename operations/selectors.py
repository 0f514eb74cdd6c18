"""Domain reads used by more than one door (API, MCP, commands, dashboard). Nothing here writes."""

from __future__ import annotations

from operations.models import Escalation, Operation
from operations.vocabulary import NOT_DONE_STATUSES, Status


def operation_get(*, operation_id: str) -> Operation | None:
    return Operation.objects.select_related("provider", "agent").filter(pk=operation_id).first()


def open_escalations(*, operations: list[Operation]) -> dict[str, Escalation]:
    """The open card of each operation that has one (only needs_attention operations can)."""
    ids = [op.pk for op in operations if op.status == Status.NEEDS_ATTENTION]
    if not ids:
        return {}
    return {
        row.operation_id: row for row in Escalation.objects.filter(operation_id__in=ids, state=Escalation.State.OPEN)
    }


def open_escalation(*, operation: Operation) -> Escalation | None:
    """The operation's open decision card, if it has one."""
    return open_escalations(operations=[operation]).get(operation.pk)


def live_operation_for_job(*, provider_slug: str, job_id: str) -> Operation | None:
    """The newest not-done operation watching this provider job, whoever registered it."""
    return (
        Operation.objects.filter(provider__slug=provider_slug, provider_job_id=job_id, status__in=NOT_DONE_STATUSES)
        .order_by("-created_at")
        .first()
    )
