"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over pollerdash's operations.

pollerdash already keeps every watched job durably, so a task is simply an operation: its
`taskId` is the operation id, and `tasks/get` reads the operation row (any web replica can answer;
nothing is kept per task or per session). To a client that declares the extension in a request's
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`, `watch_job` and `wait_job` answer
a CreateTaskResult while the job is not done (the registration is committed first, so `tasks/get`
resolves at once); a job that is already done gets the ordinary answer.

A task is `working` while pollerdash polls and while a person decides (its statusMessage says which,
in the dashboard's words), `completed` when the job ended — whatever the outcome — with the answer
`wait_job` would give as its `result`, and `cancelled` after the agent cancelled the watch. There is
no `input_required`: decisions belong to on-call people, not to the agent's host. `failed` is kept
for protocol errors, which a stored job never has.

Field names (docs/DESIGN.md section 9 says which sources they follow): `ttlSeconds` and
`pollIntervalMilliseconds` of SEP-2663, with `ttlMs` and `pollIntervalMs` of the extension's
published schema beside them, so a client of either reads its own.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.utils import timezone
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    CallToolRequestParams,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from operations import fastsql, registration, selectors, services
from operations.api import mcp_state
from operations.api import selectors as api_selectors
from operations.api.mcp_caller import caller_in
from operations.api.mcp_results import operation_result
from operations.api.wait import run_db
from operations.decisions.cards import reason_label
from operations.decisions.words import finished_words, waiting_for_decision_words, watching_words
from operations.models import Escalation, Operation
from operations.representation import NEEDS_ATTENTION_RETRY_S, RETRY_AFTER_MAX_S, operation_object, rfc3339
from operations.vocabulary import TERMINAL_STATUSES, Status

EXTENSION_ID = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"watch_job", "wait_job"})
# The one answer to an unknown task, another agent's task, and a refused requestState alike.
NOT_FOUND = "Failed to retrieve task: Task not found"
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


def declares_tasks(meta: Any) -> bool:
    """Whether this request's `_meta` declares the extension among the client's capabilities."""
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION_ID in extensions


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
# running task costs one plain statement of these columns (operations/fastsql.py) and nothing else.
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


def load_task(*, agent_id: int, task_id: str) -> TaskView | None:
    """The agent's own operation as a task; None for an unknown id or another agent's (run with run_db)."""
    if len(task_id) > TASK_ID_MAX:
        return None
    row = fastsql.fetchone(_task_sql(), [task_id, agent_id])
    if row is None:
        return None
    op: Operation | None = fastsql.instance(Operation, TASK_COLUMNS, row)
    if op is not None and op.status in TERMINAL_STATUSES:
        # Done: the task's result is the whole Operation object.
        op = api_selectors.agent_operation(agent_id=agent_id, operation_id=task_id)
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


# --- wire shapes --------------------------------------------------------------------------------------


def request_state(view: TaskView, *, agent_id: int, now: float) -> str:
    expires = now + (view.poll_ms or 0) / 1_000 + settings.MCP_TASK_STATE_TTL_S
    return mcp_state.seal(agent_id=agent_id, task_id=view.task_id, digest=view.digest, expires_at=math.ceil(expires))


def task_fields(view: TaskView, *, agent_id: int, now: float) -> dict[str, Any]:
    """The Task of the 2026-07-28 extension (both spellings of the TTL and the interval)."""
    fields: dict[str, Any] = {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.status_message,
        "createdAt": rfc3339(view.created_at),
        "lastUpdatedAt": rfc3339(view.updated_at),
        "ttlSeconds": view.ttl_s,
        "ttlMs": view.ttl_s * 1_000,
    }
    if view.poll_ms is not None:
        fields["pollIntervalMilliseconds"] = view.poll_ms
        fields["pollIntervalMs"] = view.poll_ms
    fields["requestState"] = request_state(view, agent_id=agent_id, now=now)
    return fields


def created_task(view: TaskView, *, agent_id: int) -> dict[str, Any]:
    """CreateTaskResult: `resultType: "task"` and the task's seed state (no result)."""
    return {"resultType": "task", **task_fields(view, agent_id=agent_id, now=time.time())}


def detailed_task(view: TaskView, *, agent_id: int) -> dict[str, Any]:
    """GetTaskResult / the notification's params: the task, with `result` once it completed."""
    fields = task_fields(view, agent_id=agent_id, now=time.time())
    if view.status == COMPLETED:
        fields["result"] = view.result
    return fields


def legacy_task(view: TaskView) -> dict[str, Any]:
    """The Task of 2025-11-25 (experimental tasks): TTL and interval in milliseconds, no result."""
    fields: dict[str, Any] = {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.status_message,
        "createdAt": rfc3339(view.created_at),
        "lastUpdatedAt": rfc3339(view.updated_at),
        "ttl": view.ttl_s * 1_000,
    }
    if view.poll_ms is not None:
        fields["pollInterval"] = view.poll_ms
    return fields


def task_not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=NOT_FOUND)


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


# --- the methods ----------------------------------------------------------------------------------------


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId", max_length=TASK_ID_MAX * 4)
    request_state: str | None = Field(default=None, alias="requestState")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


async def _verified_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> TaskView | None:
    """The caller's task, if the echoed requestState (when there is one) is its own, unaltered and
    unexpired. A client of the extension's published schema sends none: the bearer token alone then
    decides, as it does for every other call."""
    caller = caller_in(ctx.request)
    headers = getattr(ctx.request, "headers", None) or {}
    named = headers.get("mcp-name")
    if named is not None and decode_header_value(named) != params.task_id:
        # The routing header a balancer reads must name the task the body asks about.
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match the request body's taskId")
    view = await run_db(load_task, agent_id=caller.agent_id, task_id=params.task_id)
    if view is None:
        return None
    if params.request_state is not None and not mcp_state.accepts(
        params.request_state, agent_id=caller.agent_id, task_id=view.task_id, digest=view.digest, now=time.time()
    ):
        return None
    return view


async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    view = await _verified_task(ctx, params)
    if view is None:
        raise task_not_found()
    if not is_modern(ctx):
        return legacy_task(view)
    return detailed_task(view, agent_id=caller_in(ctx.request).agent_id)


async def cancel_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    """The agent's cancel of its watch (cooperative). 2026-07-28: an empty acknowledgement, for
    unknown ids too; 2025-11-25: the task after the cancel, or -32602 for an unknown task."""
    caller = caller_in(ctx.request)
    view = await _verified_task(ctx, params)
    if view is not None and view.status == WORKING:
        try:
            await run_db(
                services.operation_cancel_by_agent, agent=caller.agent, operation_id=view.task_id, reason="tasks/cancel"
            )
        except (registration.OperationNotFound, registration.OperationConflict):
            # It ended (or went) between the read and the cancel: the cancel is only a request.
            pass
    if is_modern(ctx):
        return {}
    if view is None:
        raise task_not_found()
    after = await run_db(load_task, agent_id=caller.agent_id, task_id=view.task_id)
    if after is None:
        raise task_not_found()
    if after.status != CANCELLED:
        raise MCPError(code=INVALID_PARAMS, message=f"Cannot cancel task: it is already {after.status}")
    return legacy_task(after)


async def update_task(ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
    """pollerdash never asks an agent's host for input (people decide on the dashboard), so there is
    nothing to answer; the extension asks for an empty acknowledgement whatever the task."""
    return {}


class TasksExtension(Extension):
    identifier = EXTENSION_ID

    def methods(self) -> list[MethodBinding]:
        both = frozenset({"2025-11-25", *MODERN_PROTOCOL_VERSIONS})
        return [
            MethodBinding("tasks/get", TaskParams, get_task, protocol_versions=both),
            MethodBinding("tasks/cancel", TaskParams, cancel_task, protocol_versions=both),
            MethodBinding(
                "tasks/update", UpdateTaskParams, update_task, protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS)
            ),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not is_modern(ctx) or not declares_tasks(ctx.meta):
            return await call_next(ctx)
        caller = caller_in(ctx.request)
        arguments = params.arguments or {}
        if params.name == "wait_job":
            operation_id = arguments.get("operation_id")
            if not isinstance(operation_id, str) or not _plain_wait_arguments(arguments):
                # The tool itself names what is wrong with the arguments.
                return await call_next(ctx)
            view = await run_db(load_task, agent_id=caller.agent_id, task_id=operation_id)
            if view is None or view.status != WORKING:
                # Unknown (the tool says so) or already done (its ordinary answer is the final one).
                return await call_next(ctx)
            return created_task(view, agent_id=caller.agent_id)
        answered = await call_next(ctx)
        content = _structured(answered)
        if content is None or content.get("done") is not False:
            return answered
        view = await run_db(load_task, agent_id=caller.agent_id, task_id=str(content["id"]))
        if view is None or view.status != WORKING:
            return answered
        return created_task(view, agent_id=caller.agent_id)


def _plain_wait_arguments(arguments: dict[str, Any]) -> bool:
    """wait_job's arguments as the tool accepts them (operation_id, an optional whole timeout_s)."""
    if set(arguments) - {"operation_id", "timeout_s"}:
        return False
    timeout = arguments.get("timeout_s", 0)
    return isinstance(timeout, int) and not isinstance(timeout, bool) and 0 <= timeout <= 9999


def _structured(result: HandlerResult) -> dict[str, Any] | None:
    """The Operation object of a successful tool answer (typed or already on the wire)."""
    if isinstance(result, dict):
        content, error = result.get("structuredContent"), result.get("isError")
    else:
        content, error = getattr(result, "structured_content", None), getattr(result, "is_error", None)
    if error or not isinstance(content, dict) or content.get("object") != "operation":
        return None
    return content
