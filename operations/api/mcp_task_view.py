"""An operation as an MCP task (operations/api/mcp_tasks.py): its status, status message, TTL and
poll interval at one moment, read with as little as `tasks/get` needs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.utils import timezone

from operations import selectors
from operations.agents import identities, services
from operations.api import mcp_state
from operations.api import selectors as api_selectors
from operations.api.mcp_results import operation_result
from operations.cards.card import reason_label
from operations.cards.words import finished_words, waiting_for_decision_words, watching_words
from operations.infrastructure import fastsql
from operations.models import Agent, Escalation, Operation
from operations.representation import NEEDS_ATTENTION_RETRY_S, RETRY_AFTER_MAX_S, operation_object
from operations.vocabulary import TERMINAL_STATUSES, Status

# An operation id is 29 characters; a longer task id is not one of ours (no query for it).
TASK_ID_MAX = 64

WORKING, COMPLETED, CANCELLED = "working", "completed", "cancelled"
MIN_POLL_MS = 1_000
MAX_POLL_MS = RETRY_AFTER_MAX_S * 1_000
# A check's answer lands a little after its scheduled time: asking before would find nothing new.
POLL_MARGIN_MS = 1_000


@dataclass(frozen=True)
class TaskView:
    """An operation as a task, at one moment."""

    task_id: str
    status: str
    status_message: str
    created_at: datetime
    updated_at: datetime
    ttl_s: int
    poll_ms: int | None
    sequence: int
    digest: str
    # What wait_job answers once the job is done (the task's `result`; tasks/result of 2025-11-25).
    result: dict[str, Any] | None


def task_status(op: Operation) -> str:
    if op.status not in TERMINAL_STATUSES:
        return WORKING
    if op.status == Status.CLOSED and (op.error or {}).get("code") == services.WATCH_CANCELLED:
        return CANCELLED
    return COMPLETED


def poll_interval_ms(op: Operation, *, now: datetime) -> int | None:
    """When asking again is worth it: at the next change pollerdash knows of (its next check, a
    deadline), never sooner than 1 s, never later than the API's longest Retry-After; while a person
    decides, the API's needs-attention interval. None once the job is done."""
    if op.status in TERMINAL_STATUSES:
        return None
    if op.status == Status.NEEDS_ATTENTION:
        return NEEDS_ATTENTION_RETRY_S * 1_000
    if op.next_poll_at is None or op.next_poll_at <= now:
        return MIN_POLL_MS
    upcoming = [op.next_poll_at] + [t for t in (op.deadline_at, op.business_deadline_at) if t is not None and t > now]
    wait_ms = math.ceil((min(upcoming) - now).total_seconds() * 1_000) + POLL_MARGIN_MS
    return max(MIN_POLL_MS, min(MAX_POLL_MS, wait_ms))


def ttl_seconds(op: Operation, *, now: datetime) -> int:
    """How long after its creation the task is kept at least: retention removes a finished
    operation RETENTION_DAYS after its last change and never removes an unfinished one, so an
    unfinished task lives at least RETENTION_DAYS from now (the TTL grows while it runs)."""
    last = op.updated_at if op.status in TERMINAL_STATUSES else max(now, op.updated_at)
    kept_until = last + timedelta(days=settings.RETENTION_DAYS)
    return max(0, math.floor((kept_until - op.created_at).total_seconds()))


def status_message(op: Operation, escalation: Escalation | None, *, status: str, now: datetime) -> str:
    if status == WORKING and op.status == Status.NEEDS_ATTENTION:
        label = reason_label(escalation.reason) if escalation is not None else "stopped"
        return waiting_for_decision_words(reason_label=label, card_id=escalation.pk if escalation is not None else None)
    if status == WORKING:
        due = op.next_poll_at is None or op.next_poll_at <= now
        next_check = None if op.next_poll_at is None or due else utc_words(op.next_poll_at)
        return watching_words(
            checks_used=op.status_requests_used, checks_max=op.max_status_requests, next_check_utc=next_check
        )
    return finished_words(status=op.status, cancelled_by_agent=status == CANCELLED)


def utc_words(value: datetime) -> str:
    """The dashboard's absolute time ("2026-12-01 10:15:00 UTC")."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def task_view(op: Operation, escalation: Escalation | None, *, now: datetime) -> TaskView:
    """`op` needs only the TASK_COLUMNS while the job runs; once it is done, all of it (the result)."""
    status = task_status(op)
    result = None
    if status != WORKING:
        obj = operation_object(op, open_escalation=escalation, now=now)
        result = operation_result(obj).model_dump(by_alias=True, mode="json", exclude_none=True)
    return TaskView(
        task_id=op.pk,
        status=status,
        status_message=status_message(op, escalation, status=status, now=now),
        created_at=op.created_at,
        updated_at=op.updated_at,
        ttl_s=ttl_seconds(op, now=now),
        poll_ms=poll_interval_ms(op, now=now),
        sequence=op.sequence,
        digest=mcp_state.task_digest(task_id=op.pk, created_at=op.created_at),
        result=result,
    )


# What a running task reads of its operation: `tasks/get` is the call an agent repeats most, so a
# running task costs one plain statement of these columns (operations/infrastructure/fastsql.py) and nothing else.
TASK_COLUMNS = (
    "id",
    "status",
    "error",
    "next_poll_at",
    "deadline_at",
    "business_deadline_at",
    "created_at",
    "updated_at",
    "sequence",
    "status_requests_used",
    "max_status_requests",
)


@cache
def _task_sql() -> str:
    columns = ", ".join(fastsql.column(Operation, name) for name in TASK_COLUMNS)
    return f"SELECT {columns} FROM {fastsql.table(Operation)} WHERE id = %s AND agent_id = %s"


@cache
def _token_task_sql() -> str:
    table = fastsql.table(Operation)
    return identities.authenticated_sql(
        columns=", ".join(f"o.{fastsql.column(Operation, name)}" for name in TASK_COLUMNS),
        joins=f"LEFT JOIN {table} o ON o.id = %s AND o.agent_id = a.id",
    )


def load_task(*, agent_id: int, task_id: str) -> TaskView | None:
    """The agent's own operation as a task; None for an unknown id or another agent's (run with run_db)."""
    if len(task_id) > TASK_ID_MAX:
        return None
    row = fastsql.fetchone(_task_sql(), [task_id, agent_id], prepare=True)
    return None if row is None else _task_of(row, agent_id=agent_id)


def token_task(*, token: str, task_id: str) -> tuple[Agent | None, TaskView | None]:
    """The bearer token's agent (None: unknown or revoked) and its task `task_id` (None: none of its
    own), the token check and a running task's read in one statement (run with run_db)."""
    if len(task_id) > TASK_ID_MAX:
        return identities.agent_authenticate(token=token), None
    found = identities.agent_authenticate_with(token=token, sql=_token_task_sql(), params=[task_id])
    if found is None:
        return None, None
    agent, row = found
    return agent, (None if row[0] is None else _task_of(row, agent_id=agent.pk))


def _task_of(row: Sequence[Any], *, agent_id: int) -> TaskView | None:
    op: Operation | None = fastsql.instance(Operation, TASK_COLUMNS, row)
    if op is not None and op.status in TERMINAL_STATUSES:
        # Done: the task's result is the whole Operation object.
        op = api_selectors.agent_operation(agent_id=agent_id, operation_id=op.pk)
    if op is None:
        return None
    return task_view(op, selectors.open_escalation(operation=op), now=timezone.now())


def load_tasks(*, agent_id: int, task_ids: list[str]) -> dict[str, TaskView]:
    """Several of the agent's tasks in one query (plus one for open cards); unknown ids are left out."""
    ids = [task_id for task_id in task_ids if len(task_id) <= TASK_ID_MAX]
    ops = list(Operation.objects.select_related("provider").filter(pk__in=ids, agent_id=agent_id))
    escalations = selectors.open_escalations(operations=ops)
    now = timezone.now()
    return {op.pk: task_view(op, escalations.get(op.pk), now=now) for op in ops}
