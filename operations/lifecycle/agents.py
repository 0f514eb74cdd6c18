"""What agents do to their operations, written (acknowledge, cancel the watch), and what follows from it:
the provider cancel a worker forwards, and the warning a failed callback leaves.

The checks (is it the agent's, is it done) are made by operations.agents.services before these run, with
the operation row locked by the caller.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from operations import events
from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.lifecycle.cards import supersede_card
from operations.lifecycle.transitions import CANCEL_WATCH
from operations.models import Agent, CallbackDelivery, Operation
from operations.providers.cancel import CancelResult
from operations.selectors import job_watched_elsewhere
from operations.vocabulary import CancelState, Status

WATCH_CANCELLED = "watch_cancelled"
FORWARD_TASK = "operations.tasks.forward_provider_cancel"

_CANCEL_NOTES = {
    CancelState.REQUESTED: "A cancel request is being sent to the provider.",
    CancelState.FORWARDING: "A cancel request is being sent to the provider.",
    CancelState.CONFIRMED: "The provider confirmed the cancel.",
    CancelState.FORWARDED: (
        "The provider took the cancel request but did not confirm it, so the job may still run there."
    ),
    CancelState.NOT_SUPPORTED: "The provider refused the cancel request, so the job may still run there.",
    CancelState.FAILED_TO_FORWARD: (
        "The cancel request could not be delivered, so the job may still run at the provider."
    ),
    CancelState.NOT_DOCUMENTED: "The provider documents no cancel request, so the job may still run there.",
    CancelState.NOT_FORWARDED: (
        "No cancel request was sent: another live watch of this job exists, so it keeps running."
    ),
    # Fixed words: the agent learns why, never the operator's addresses or variable names.
    CancelState.NOT_ALLOWED: (
        "pollerdash did not call the provider and will not: the profile's cancel address is not a destination "
        "the operator lets pollerdash send to (its credential is not bound to that address in "
        "PROVIDER_CREDENTIAL_ORIGINS, or it is not a public https address), so the job may still run at the "
        "provider; cancel it there if it must stop."
    ),
}


def agent_actor(*, agent: Agent) -> dict[str, str]:
    return {"kind": "agent", "id": agent.name}


def watch_cancelled_message(*, cancel_state: str) -> str:
    """What the agent reads in error.message: it follows the provider's answer to the cancel."""
    note = _CANCEL_NOTES.get(CancelState(cancel_state), "") if cancel_state in CancelState else ""
    return f"The agent cancelled the watch; pollerdash stopped polling. {note}".strip()


def acknowledge(*, op: Operation, agent: Agent, now: datetime) -> None:
    """The agent has read the outcome: the operation leaves its open list."""
    op.acknowledged_at = now
    op.sequence += 1
    op.updated_at = now
    op.save(update_fields=["acknowledged_at", "sequence", "updated_at"])
    audit.append(
        entry_type="operation.acknowledged",
        actor=agent_actor(agent=agent),
        operation_id=op.pk,
        data={"state": str(op.status)},
        at=now,
    )


def cancel_watch(*, op: Operation, agent: Agent, reason: str, now: datetime) -> None:
    """Stop watching at once: `closed` with error.code `watch_cancelled`; an open card is superseded;
    where the profile documents a cancel request, a worker forwards it (enqueued here, so the agent's
    call never waits on the provider) — never while another live operation watches the job."""
    was = op.status
    # Never for a job another live operation watches: the cancel would end that watch's job too.
    watched_elsewhere = op.provider.has_cancel and job_watched_elsewhere(operation=op)
    forward = op.provider.has_cancel and not watched_elsewhere
    if forward:
        cancel_state = CancelState.REQUESTED
    else:
        cancel_state = CancelState.NOT_FORWARDED if watched_elsewhere else CancelState.NOT_DOCUMENTED
    change = CANCEL_WATCH.given(
        completed_at=now,
        error={
            "code": WATCH_CANCELLED,
            "message": watch_cancelled_message(cancel_state=cancel_state),
            "provider_error": None,
        },
        cancel_requested_at=now,
        cancel_reason=reason,
        cancel_state=cancel_state,
        updated_at=now,
    )
    change.apply(op=op)
    op.save(update_fields=change.fields)
    if was == Status.NEEDS_ATTENTION:
        supersede_card(operation=op, reason="the agent cancelled the watch")
    record_event(operation=op, event_type=EVENT_COMPLETED)
    if forward:
        async_task(FORWARD_TASK, op.pk, task_name=f"cancel {op.pk}", group="cancels")
    audit.append(
        entry_type="operation.cancelled",
        actor=agent_actor(agent=agent),
        operation_id=op.pk,
        data={"state": str(op.status), "reason": reason, "cancel_state": str(op.cancel_state), "http_status": None},
        at=now,
    )


def claim_cancel_forward(*, operation_id: str) -> bool:
    """Claim the one forward of an agent's cancel (requested -> forwarding); False if already taken."""
    return bool(
        Operation.objects.filter(pk=operation_id, cancel_state=CancelState.REQUESTED).update(
            cancel_state=CancelState.FORWARDING
        )
    )


def record_cancel_forward(*, operation_id: str, result: CancelResult) -> None:
    """The provider's answer to the forwarded cancel; the agent's error.message follows it."""
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=operation_id)
        now = timezone.now()
        op.cancel_state = result.state
        if (op.error or {}).get("code") == WATCH_CANCELLED:
            op.error = {**(op.error or {}), "message": watch_cancelled_message(cancel_state=result.state)}
        if result.provider_state:
            # The provider's latest word on the job is its answer to the cancel.
            op.last_provider_state = result.provider_state[:200]
        op.sequence += 1
        op.updated_at = now
        op.save(update_fields=["cancel_state", "error", "last_provider_state", "sequence", "updated_at"])
        audit.append(
            entry_type="operation.cancel_forwarded",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data={
                "cancel_state": str(result.state),
                "http_status": result.http_status,
                "provider_state": result.provider_state,
                "provider_request_id": result.provider_request_id or None,
                "detail": result.detail[:300] or None,
            },
            at=now,
        )


def warn_callback_failed(*, delivery: CallbackDelivery, reason: str) -> bool:
    """A callback gave up: the operation (maybe already done) gets a warning the agent sees, and the
    chain a `callback.failed` entry. False when the operation no longer exists."""
    warning = f"callback {delivery.pk} ({delivery.event_type}) not delivered: {reason}"
    with transaction.atomic():
        op = Operation.objects.select_for_update().filter(pk=delivery.operation_id).first()
        if op is None:
            return False
        op.warnings = op.warnings_with(warning)
        op.sequence += 1
        op.updated_at = timezone.now()
        op.save(update_fields=["warnings", "sequence", "updated_at"])
        audit.append(
            entry_type="callback.failed",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data={
                "event_id": delivery.pk,
                "event_type": delivery.event_type,
                "attempts": delivery.attempts,
                "http_status": delivery.last_http_status,
                "reason": reason[:300],
            },
        )
        events.callback_undeliverable.send(sender=CallbackDelivery, delivery=delivery, reason=reason)
    return True
