"""Domain reads used by more than one door (API, MCP, commands, dashboard). Nothing here writes."""

from __future__ import annotations

from django.db.models import Q

from operations.models import Escalation, Operation, ProviderProfile
from operations.providers.origins import watch_key
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


def profile_watch_key(*, profile: ProviderProfile, job_id: str) -> str:
    """The provider job a profile reaches for `job_id`: (credential variable, the expanded status URL)."""
    return watch_key(credential_env=profile.credential_env, status_url=profile.status_url, job_id=job_id)


def current_watch_key(operation: Operation) -> str:
    """The provider job an operation's profile reaches now (its stored key is the one of registration,
    kept current by the profile service; a profile row edited around it could differ)."""
    return profile_watch_key(profile=operation.provider, job_id=operation.provider_job_id)


def live_watches(*, key: str, job_id: str) -> list[Operation]:
    """Not-done operations watching this provider job (`key`, `job_id`), whoever registered them and
    under whichever profile or account label: what the provider sees decides, not how it is named.

    Matched on the key each operation stored and on the one its profile gives now, newest first;
    the rows come by stored key or by job id (another template may reach the same URL with another
    job id: the stored key finds those).
    """
    rows = (
        Operation.objects.filter(Q(watch_key=key) | Q(provider_job_id=job_id), status__in=NOT_DONE_STATUSES)
        .select_related("provider")
        .order_by("-created_at", "-pk")
    )
    return [op for op in rows if key in (op.watch_key, current_watch_key(op))]


def live_operation_for_job(*, provider_slug: str, job_id: str) -> Operation | None:
    """The newest not-done operation watching the provider job this profile reaches for `job_id`."""
    profile = ProviderProfile.objects.filter(slug=provider_slug).first()
    if profile is None:
        return None
    watches = live_watches(key=profile_watch_key(profile=profile, job_id=job_id), job_id=job_id)
    return watches[0] if watches else None


def job_watched_elsewhere(*, operation: Operation) -> bool:
    """Whether another live operation watches this operation's provider job.

    A provider cancel for such a job would end someone else's watch with the shared credential.
    Both the key the operation stored and the one its profile gives now count.
    """
    keys = {operation.watch_key, current_watch_key(operation)} - {""}
    return any(
        other.pk != operation.pk for key in keys for other in live_watches(key=key, job_id=operation.provider_job_id)
    )


def watch_clashes(*, profile_id: int | None, credential_env: str, status_url: str) -> int:
    """How many of a profile's live agent watches would, with this credential variable and status
    URL, reach a provider job another live agent operation already watches (which the database's
    one-watch rule refuses): a profile change that would do it is refused."""
    if profile_id is None:
        return 0
    mine = Operation.objects.filter(provider_id=profile_id, status__in=NOT_DONE_STATUSES, agent__isnull=False)
    keys = {
        watch_key(credential_env=credential_env, status_url=status_url, job_id=job_id): pk
        for pk, job_id in mine.values_list("pk", "provider_job_id")
    }
    if not keys:
        return 0
    held = Operation.objects.filter(watch_key__in=keys, status__in=NOT_DONE_STATUSES, agent__isnull=False)
    return sum(1 for pk, key in held.values_list("pk", "watch_key") if keys[key] != pk)
