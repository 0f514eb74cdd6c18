"""Domain reads used by more than one door (API, MCP, commands, dashboard). Nothing here writes."""

from __future__ import annotations

from django.db.models import QuerySet

from operations.models import Escalation, Operation, ProviderProfile
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


def live_watches(*, account: str, job_id: str) -> QuerySet[Operation]:
    """Not-done operations watching this provider job, whoever registered them.

    By account, not profile: profiles of one provider account reach the same jobs with the same
    credential, so they are one job to the provider.
    """
    return Operation.objects.filter(account=account, provider_job_id=job_id, status__in=NOT_DONE_STATUSES)


def provider_account(*, provider_slug: str) -> str | None:
    """The provider account of the profile SLUG (None for an unknown profile)."""
    return ProviderProfile.objects.filter(slug=provider_slug).values_list("account", flat=True).first()


def live_operation_for_job(*, provider_slug: str, job_id: str) -> Operation | None:
    """The newest not-done operation watching this provider job (under this profile's account)."""
    account = provider_account(provider_slug=provider_slug)
    if account is None:
        return None
    return live_watches(account=account, job_id=job_id).order_by("-created_at").first()


def job_watched_elsewhere(*, operation: Operation) -> bool:
    """Whether another live operation watches this operation's provider job.

    A provider cancel for such a job would end someone else's watch with the shared credential.
    """
    return live_watches(account=operation.account, job_id=operation.provider_job_id).exclude(pk=operation.pk).exists()
