"""What a poll reads: the operations with their profiles in one query (profiles cached per process
until they change), and the pure model's inputs made from them (`policy_for`, `bounds_for`,
`status_url`). operations/polls/controller.py polls one operation, batch.py a group.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.db.models import Field

from operations.infrastructure import fastsql
from operations.models import Operation, ProviderProfile
from operations.polling.model import Bounds, Policy
from operations.polling.states import StateTable
from operations.providers.origins import expand


def policy_for(*, profile: ProviderProfile) -> Policy:
    return Policy(
        profile_slug=profile.slug,
        state_field=profile.state_field,
        table=StateTable(
            pending=frozenset(profile.pending_states),
            success=frozenset(profile.success_states),
            failure=frozenset(profile.failure_states),
            cancelled=frozenset(profile.cancelled_states),
            expired=frozenset(profile.expired_states),
        ),
        required_result_fields=tuple(profile.required_result_fields),
        expiry_field=profile.expiry_field,
        progress_field=profile.progress_field,
        counts_fields=dict(profile.counts_fields or {}),
        poll_hint_seconds_field=profile.poll_hint_seconds_field,
        poll_hint_time_field=profile.poll_hint_time_field,
        base_delay_s=profile.base_delay_s,
        max_delay_s=profile.max_delay_s,
        backoff_multiplier=profile.backoff_multiplier,
        jitter_floor=profile.jitter_floor,
        not_found_grace_s=profile.not_found_grace_s,
        rate_limited_delay_s=settings.POLL_RATE_LIMITED_DELAY_S,
        hint_floor_s=settings.POLL_HINT_FLOOR_S,
        hint_cap_s=settings.POLL_HINT_CAP_S,
        hint_absurd_s=float(settings.OPERATION_MAX_DEADLINE_S),
        error_cap_bytes=settings.PROVIDER_ERROR_CAP_BYTES,
    )


def bounds_for(*, op: Operation) -> Bounds:
    return Bounds(
        registered_at=op.created_at,
        deadline_at=op.deadline_at,
        requests_used=op.status_requests_used,
        max_requests=op.max_status_requests,
        transport_failures_used=op.transport_failures_used,
        max_transport_failures=op.max_transport_failures,
        backoff_attempt=op.backoff_attempt,
        extra_pending=frozenset(op.extra_pending_states or ()),
        check_spacing_s=op.check_spacing_s,
    )


def status_url(*, profile: ProviderProfile, job_id: str) -> str:
    # The job id is always one percent-encoded path segment: an agent can never steer the URL.
    return expand(profile.status_url, job_id)


# Columns a poll never reads; skipping them saves decoding JSON on every poll.
_COLD_FIELDS = ("purpose", "metadata", "result", "error", "request_fingerprint", "cancel_reason", "registered_by")
_profiles: dict[int, tuple[object, ProviderProfile]] = {}


def clear_profile_cache() -> None:
    """Forget cached profiles (tests that recreate rows under a frozen clock need this)."""
    _profiles.clear()


@cache
def _hot_fields() -> tuple[Field[Any, Any], ...]:
    return tuple(field for field in Operation._meta.concrete_fields if field.name not in _COLD_FIELDS)


@cache
def _select_sql() -> str:
    columns = ", ".join(f"o.{fastsql.connection.ops.quote_name(field.column)}" for field in _hot_fields())
    return (
        f"SELECT {columns}, p.updated_at FROM {fastsql.table(Operation)} o "
        f"JOIN {fastsql.table(ProviderProfile)} p ON p.id = o.provider_id"
    )


def load_for_poll(operation_id: str) -> Operation | None:
    """The operation with its profile; profiles are cached per process until they change."""
    found = load_for_polls([operation_id])
    return found.get(operation_id)


def load_for_polls(operation_ids: list[str]) -> dict[str, Operation]:
    """Several operations with their profiles, in one query (a group task's polls).

    Plain rows made into operations without the ORM's query machinery (Operation.from_db, the
    fields' own conversions): the cold columns are left deferred, as `only()` would.
    """
    where = "o.id = %s" if len(operation_ids) == 1 else f"o.id IN ({', '.join(['%s'] * len(operation_ids))})"
    rows = fastsql.fetchall(f"{_select_sql()} WHERE {where}", operation_ids)
    names = tuple(field.attname for field in _hot_fields())
    loaded = {}
    for row in rows:
        op = fastsql.instance(Operation, names, row[:-1])
        # The stamp is compared as the backend returned it (a string on SQLite, a datetime on
        # PostgreSQL): equal stamps mean an unchanged profile.
        stamp = row[-1]
        cached = _profiles.get(op.provider_id)
        if cached is None or cached[0] != stamp:
            cached = (stamp, ProviderProfile.objects.get(pk=op.provider_id))
            _profiles[op.provider_id] = cached
        op.provider = cached[1]
        loaded[op.pk] = op
    return loaded
