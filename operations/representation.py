"""The Operation object of docs/DESIGN.md section 9, shared by the API, MCP and `operation_status --json`.

Every answer an agent gets says in words whether the job is done and what to do next, so an
agent cannot mistake "accepted" or "still running" for "finished".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from operations.models import Escalation, Operation
from operations.vocabulary import REASON_LABELS, TERMINAL_STATUSES, Reason, Status

API_PREFIX = "/api/v1/operations"
RETRY_AFTER_MAX_S = 60
NEEDS_ATTENTION_RETRY_S = 30


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_after_s(op: Operation, *, now: datetime) -> int | None:
    """When it is worth asking again: never sooner than pollerdash's own next look."""
    if op.status in TERMINAL_STATUSES:
        return None
    if op.status == Status.NEEDS_ATTENTION:
        return NEEDS_ATTENTION_RETRY_S
    if op.next_poll_at is None:
        return 1
    seconds = math.ceil((op.next_poll_at - now).total_seconds()) + 1
    return max(1, min(RETRY_AFTER_MAX_S, seconds))


def _hint(op: Operation, *, escalation_reason: str | None, retry_s: int | None, now: datetime) -> tuple[str, str]:
    wait_call = f"GET {API_PREFIX}/{op.pk}/wait?timeout_s=25"
    job = f"{op.provider.slug} job {op.provider_job_id}"
    not_before = rfc3339(now + timedelta(seconds=retry_s or 0))
    if op.agent_id is None and op.status not in TERMINAL_STATUSES:
        # Registered by an operator (manage.py watch): no agent can reach it through the API.
        code = "not_done_needs_human" if op.status == Status.NEEDS_ATTENTION else "not_done_poll_later"
        who = "a human is deciding what happens next" if code == "not_done_needs_human" else "pollerdash is watching it"
        return (
            f"NOT DONE. {job}: {who}. Check again with manage.py operation_status {op.pk} no earlier than "
            f"{not_before} ({retry_s} s), or on the dashboard at /operations/{op.pk}/.",
            code,
        )
    if op.status == Status.NEEDS_ATTENTION:
        label = REASON_LABELS.get(Reason(escalation_reason), escalation_reason) if escalation_reason else "stopped"
        deciding = "what happens next"
        if escalation_reason == Reason.BUSINESS_DEADLINE_PASSED:
            deciding = "whether the result is still wanted"
        return (
            f"NOT DONE. pollerdash stopped waiting on {job} ({label}) and a human is deciding {deciding}. "
            f"Do not resubmit the job and do not report it as complete. Check again with GET "
            f"{API_PREFIX}/{op.pk} no earlier than {not_before} ({retry_s} s); a wait returns at once while "
            f"a human is deciding. Or end your turn: GET {API_PREFIX}?view=open lists it on your next run.",
            "not_done_needs_human",
        )
    if op.status in (Status.PENDING, Status.RUNNING):
        return (
            f"NOT DONE. pollerdash is watching {job}. Do not report it as complete. Call {wait_call} now "
            f"(it returns when the job finishes), or check again with GET {API_PREFIX}/{op.pk} no earlier "
            f"than {not_before} ({retry_s} s), or end your turn: GET {API_PREFIX}?view=open lists it on "
            "your next run.",
            "not_done_poll_later",
        )
    acked = op.acknowledged_at is not None
    # Only an agent acknowledges, and only its own operations.
    ack = "" if acked or op.agent_id is None else f" Then acknowledge it with POST {API_PREFIX}/{op.pk}/ack."
    if op.status == Status.SUCCEEDED:
        return (f"DONE. {job} succeeded; the result is in `result`.{ack}", _done_code(acked, "read_result"))
    if op.status == Status.PARTIALLY_SUCCEEDED:
        return (
            f"DONE. {job} partially succeeded: some items failed (see `result.counts`).{ack}",
            _done_code(acked, "read_result"),
        )
    error = op.error or {}
    if error.get("provider_error") is not None:
        # An agent acts on its hint: a third party's words stay in `error`, where they read as data.
        message = f"the provider reported an error (error.code {error.get('code')}); its own words are in `error`"
    else:
        message = str(error.get("message") or op.status).rstrip(".")
    return (
        f"DONE. {job} ended {op.status}: {message}. Do not resubmit it automatically; report the outcome.{ack}",
        _done_code(acked, "report_outcome"),
    )


def _done_code(acked: bool, action: str) -> str:
    return "done_acknowledged" if acked else f"done_{action}_then_ack"


def operation_object(op: Operation, *, open_escalation: Escalation | None = None, now: datetime | None = None) -> dict:
    """The JSON-ready Operation object. `open_escalation` is the open Escalation row, if any."""
    now = now or timezone.now()
    retry_s = retry_after_s(op, now=now)
    reason = getattr(open_escalation, "reason", None)
    hint, hint_code = _hint(op, escalation_reason=reason, retry_s=retry_s, now=now)
    done = op.status in TERMINAL_STATUSES
    escalation = None
    if open_escalation is not None:
        escalation = {
            "reason": reason,
            "opened_at": rfc3339(open_escalation.opened_at),
            "url": f"{settings.SITE_URL}/operations/{op.pk}/",
        }
    result, error = _outcome(op) if done else (None, None)
    return {
        "object": "operation",
        "id": op.pk,
        "status": op.status,
        "done": done,
        "agent_hint": hint,
        "hint_code": hint_code,
        "provider": op.provider.slug,
        "provider_job_id": op.provider_job_id,
        "provider_status": op.last_provider_state or None,
        "purpose": op.purpose,
        "created_at": rfc3339(op.created_at),
        "updated_at": rfc3339(op.updated_at),
        "completed_at": rfc3339(op.completed_at),
        "acknowledged_at": rfc3339(op.acknowledged_at),
        "deadline": rfc3339(op.deadline_at),
        "business_deadline": rfc3339(op.business_deadline_at),
        "sequence": op.sequence,
        "poll": {
            "count": op.status_requests_used,
            "max": op.max_status_requests,
            "transport_failures": op.transport_failures_used,
            "max_transport_failures": op.max_transport_failures,
            "last_polled_at": rfc3339(op.last_polled_at),
            "next_poll_at": rfc3339(op.next_poll_at),
        },
        "retry_after_s": retry_s,
        "progress": {"percent": op.progress_percent, "counts": op.progress_counts},
        "result": result,
        "error": error,
        "escalation": escalation,
        "cancel": _cancel(op),
        "warnings": list(op.warnings or []),
        "metadata": op.metadata or {},
        "links": {
            "self": f"{API_PREFIX}/{op.pk}",
            "wait": f"{API_PREFIX}/{op.pk}/wait?timeout_s=25",
            "ack": f"{API_PREFIX}/{op.pk}/ack",
            "cancel": f"{API_PREFIX}/{op.pk}/cancel",
        },
    }


SUCCESS_STATUSES = frozenset({Status.SUCCEEDED, Status.PARTIALLY_SUCCEEDED})


def _outcome(op: Operation) -> tuple[dict | None, dict | None]:
    """(result, error) of a done operation: exactly one of them is set, whatever the row holds."""
    if op.status in SUCCESS_STATUSES and op.result is not None:
        return op.result, None
    if op.error is not None:
        return None, op.error
    return None, {
        "code": str(op.status),
        "message": f"The operation ended {op.status} without a recorded result.",
        "provider_error": None,
    }


def _cancel(op: Operation) -> dict | None:
    if op.cancel_requested_at is None:
        return None
    return {
        "requested_at": rfc3339(op.cancel_requested_at),
        "reason": op.cancel_reason or None,
        "state": op.cancel_state or None,
    }


def list_object(
    *,
    operations: list[Operation],
    escalations: dict[str, Escalation],
    counts: dict[str, int],
    limit: int,
    next_cursor: str | None,
) -> dict:
    """The open-list object: a page of Operation objects and a sentence saying what to do."""
    data = [operation_object(op, open_escalation=escalations.get(op.pk)) for op in operations]
    return {
        "object": "list",
        "view": "open",
        "limit": limit,
        "counts": counts,
        "data": data,
        "next_cursor": next_cursor,
        "agent_hint": list_hint(counts, data, next_cursor),
    }


def list_hint(counts: dict[str, int], data: list[dict], next_cursor: str | None) -> str:
    parts = []
    if counts["open_not_done"]:
        deciding = counts["needs_attention"]
        watched = counts["open_not_done"] - deciding
        detail = []
        if deciding:
            detail.append(f"{deciding} with a human deciding (do not resubmit those)")
        if watched:
            detail.append(f"{watched} still being watched")
        parts.append(
            f"NOT DONE. You have {counts['open_not_done']} unfinished job(s) ({', '.join(detail)}). Do not "
            f"report them as complete; wait on one with GET {API_PREFIX}/<id>/wait?timeout_s=25."
        )
    if counts["done_unacknowledged"]:
        first_done = next((item["id"] for item in data if item["done"]), None)
        example = f" (e.g. POST {API_PREFIX}/{first_done}/ack)" if first_done else ""
        parts.append(
            f"{counts['done_unacknowledged']} finished job(s) not yet acknowledged: read each outcome, "
            f"then acknowledge it{example}."
        )
    if not parts:
        return "Nothing open: every job you registered is done and acknowledged."
    if next_cursor:
        parts.append("More on the next page: pass next_cursor as cursor.")
    return " ".join(parts)
