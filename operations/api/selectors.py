"""Reads for the agent API: an agent's own operations only; nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db.models import Case, Count, IntegerField, Q, QuerySet, When

from operations.agents import identities
from operations.infrastructure import fastsql
from operations.models import Agent, Operation, ProviderProfile
from operations.vocabulary import NOT_DONE_STATUSES, TERMINAL_STATUSES, Status

# Open-list order: a human is deciding, then finished but not acknowledged, then still running.
RANK_NEEDS_ATTENTION, RANK_DONE_UNACKED, RANK_RUNNING = 0, 1, 2


@cache
def _operation_columns() -> tuple[str, ...]:
    return tuple(field.attname for field in Operation._meta.concrete_fields)


def _operation_select() -> tuple[str, str]:
    """The columns and the FROM of the agent's operation with its provider's slug."""
    columns = ", ".join(f"o.{fastsql.column(Operation, name)}" for name in _operation_columns())
    provider = f"{fastsql.table(ProviderProfile)} p ON p.id = o.{fastsql.column(Operation, 'provider_id')}"
    return f"{columns}, p.id, p.slug", provider


@cache
def _operation_sql() -> str:
    columns, provider = _operation_select()
    return f"SELECT {columns} FROM {fastsql.table(Operation)} o JOIN {provider} WHERE o.id = %s AND o.agent_id = %s"


@cache
def _token_operation_sql() -> str:
    columns, provider = _operation_select()
    return identities.authenticated_sql(
        columns=columns,
        joins=f"LEFT JOIN {fastsql.table(Operation)} o ON o.id = %s AND o.agent_id = a.id LEFT JOIN {provider}",
    )


def _operation_of(row: Sequence[Any]) -> Operation | None:
    columns = _operation_columns()
    if row[0] is None:
        return None  # the LEFT JOIN found no such operation of this agent
    op = fastsql.instance(Operation, columns, row[: len(columns)])
    # Only the slug of the provider is read; its other fields load on first use, as with only().
    Operation.provider.field.set_cached_value(
        op, fastsql.instance(ProviderProfile, ("id", "slug"), row[len(columns) :])
    )
    return op


def agent_operation(*, agent_id: int, operation_id: str) -> Operation | None:
    """The agent's operation with its provider's slug (what the Operation object names), or None.

    Every GET, wait and MCP task read asks this, so it is one plain statement (operations/infrastructure/fastsql.py):
    the ORM compiling a join of the operation's many columns costs more than the round trip."""
    row = fastsql.fetchone(_operation_sql(), [operation_id, agent_id], prepare=True)
    return None if row is None else _operation_of(row)


def token_operation(*, token: str, operation_id: str) -> tuple[Agent | None, Operation | None]:
    """The bearer token's agent (None: unknown or revoked) and its operation `operation_id` (None:
    none of its own), in one statement: the token check and `agent_operation` in one round trip."""
    found = identities.agent_authenticate_with(token=token, sql=_token_operation_sql(), params=[operation_id])
    if found is None:
        return None, None
    agent, row = found
    return agent, _operation_of(row)


def operations_by_id(*, operation_ids: list[str]) -> list[Operation]:
    """Operations already known to belong to their waiters (the wait checked on arrival)."""
    return list(Operation.objects.select_related("provider").filter(pk__in=operation_ids))


def _open_queryset(*, agent_id: int) -> QuerySet[Operation]:
    return (
        Operation.objects.filter(agent_id=agent_id)
        .filter(Q(status__in=sorted(NOT_DONE_STATUSES)) | Q(acknowledged_at__isnull=True))
        .annotate(
            rank=Case(
                When(status=Status.NEEDS_ATTENTION, then=RANK_NEEDS_ATTENTION),
                When(status__in=sorted(TERMINAL_STATUSES), then=RANK_DONE_UNACKED),
                default=RANK_RUNNING,
                output_field=IntegerField(),
            )
        )
    )


@dataclass(frozen=True)
class OpenPage:
    operations: list[Operation]
    # (rank, created_at, id) of the last row when more rows follow.
    next_position: tuple[int, datetime, str] | None


def open_page(*, agent_id: int, limit: int, after: tuple[int, datetime, str] | None) -> OpenPage:
    query = _open_queryset(agent_id=agent_id)
    if after is not None:
        rank, created_at, operation_id = after
        query = query.filter(
            Q(rank__gt=rank)
            | Q(rank=rank, created_at__gt=created_at)
            | Q(rank=rank, created_at=created_at, pk__gt=operation_id)
        )
    rows = list(query.select_related("provider").order_by("rank", "created_at", "pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more and rows else None
    return OpenPage(
        operations=rows,
        # `rank` is the query's annotation, unknown to the model's type.
        next_position=(last.rank, last.created_at, last.pk) if last is not None else None,  # type: ignore[attr-defined]
    )


def open_counts(*, agent_id: int) -> dict[str, int]:
    counts = _open_queryset(agent_id=agent_id).aggregate(
        open_not_done=Count("pk", filter=Q(status__in=sorted(NOT_DONE_STATUSES))),
        needs_attention=Count("pk", filter=Q(status=Status.NEEDS_ATTENTION)),
        done_unacknowledged=Count("pk", filter=Q(status__in=sorted(TERMINAL_STATUSES))),
    )
    return {key: int(value or 0) for key, value in counts.items()}


def statuses(*, operation_ids: list[str]) -> list[tuple[str, str, int]]:
    """(id, status, sequence) of each operation: the wait watcher's one query per tick."""
    return list(Operation.objects.filter(pk__in=operation_ids).values_list("pk", "status", "sequence"))
