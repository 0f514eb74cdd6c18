"""A poll's outcome: one short, fenced transaction writes the status check, the operation's new state,
the audit entry, and (when the decision says so) the card or the completion event.

Under the fence nobody else changes what the decision was computed from: a late answer (the claim
was taken over) writes nothing about the operation; an answer that arrives after the operation
ended another way is kept as evidence and a warning, never as a second completion (LATE_ANSWER).
The outcome is a transition of operations/lifecycle/transitions.py (RESUME to wait, ESCALATE,
FINISH), the same change whether one poll writes it or a group's one statement does
(operations/lifecycle/poll_groups.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.infrastructure import fastsql
from operations.lifecycle.cards import open_card
from operations.lifecycle.entries import controller_decision
from operations.lifecycle.transitions import (
    ESCALATE,
    FINISH,
    LATE_ANSWER,
    RESUME,
    Change,
    TransitionRefused,
    charged_guard,
)
from operations.limits import pacing
from operations.models import Operation, ProviderAccount, StatusCheck
from operations.polling.model import Action, Decision
from operations.vocabulary import POLLABLE_STATUSES, DelaySource

logger = logging.getLogger(__name__)

# The provider's state as the columns keep it (StatusCheck.provider_state,
# Operation.last_provider_state): any longer state a provider sends is cut, never refused.
STATE_LENGTH = 200


@dataclass(frozen=True)
class Answer:
    """What came back for one request, as the status check records it."""

    received_at: datetime
    http_status: int | None
    retry_after: str
    request_id: str
    body_digest: str
    body_bytes: int
    transport_error: str


def record_outcome(*, op: Operation, check: StatusCheck, decision: Decision, answer: Answer) -> bool:
    """Write the decision for the request `check` recorded; False when a newer claim owns the operation."""
    with transaction.atomic():
        # The account lock first (lock order: account, then operation); its audit entry comes
        # with the others, last.
        paused = decision.account_pause_until is not None and _pause_account(
            op=op, until=decision.account_pause_until, http_status=answer.http_status
        )
        change = decision_change(op=op, decision=decision, answer=answer)
        sets, params = change.sql_set()
        guard, guard_params = charged_guard(fence=check.fence)
        _fill_check(check, decision=decision, answer=answer)
        answered, answer_params = fastsql.assignments(
            StatusCheck, {name: getattr(check, name) for name in CHECK_RESPONSE_FIELDS}
        )
        # The check is answered only if the fenced update changed the operation.
        updated = fastsql.update_if_written(
            f"UPDATE {fastsql.table(Operation)} SET {sets} WHERE id = %s AND {guard}",
            [*params, op.pk, *guard_params],
            then=f"UPDATE {fastsql.table(StatusCheck)} SET {answered} WHERE id = %s",
            then_params=[*answer_params, check.pk],
        )
        if not updated:
            current = Operation.objects.select_for_update().filter(pk=op.pk, fence=check.fence).first()
            if current is None:
                # The provider's request to pause the whole account still stands.
                logger.info("late result for %s (fence %s) discarded", op.pk, check.fence)
                if paused:
                    _append_pause(op=op, until=decision.account_pause_until, http_status=answer.http_status)
                return False
            _record_after_terminal(current, check, decision, answer)
            if paused:
                _append_pause(op=op, until=decision.account_pause_until, http_status=answer.http_status)
            return True
        change.apply(op=op)
        controller_decision(op=op, **decision_facts(op=op, reason=check.reason, decision=decision, answer=answer))
        if paused:
            _append_pause(op=op, until=decision.account_pause_until, http_status=answer.http_status)
        if decision.action is Action.ESCALATE:
            assert decision.reason is not None
            open_card(
                operation=op,
                reason=decision.reason,
                detail=decision.explanation,
                context={
                    "http_status": answer.http_status,
                    "provider_state": decision.provider_state,
                    "interpreted_state": decision.interpreted_state,
                    "transport_error": answer.transport_error,
                },
            )
        elif decision.action is Action.COMPLETE:
            record_event(operation=op, event_type=EVENT_COMPLETED)
    return True


def _reason(decision: Decision) -> str:
    return decision.explanation if decision.reason is None else f"{decision.reason}: {decision.explanation}"


def _fill_check(check: StatusCheck, *, decision: Decision, answer: Answer) -> None:
    for name, value in check_answer(decision=decision, answer=answer).items():
        setattr(check, name, value)


def check_answer(*, decision: Decision, answer: Answer) -> dict[str, object]:
    """A status check's answer columns (CHECK_RESPONSE_FIELDS), as plain values."""
    return {
        "received_at": answer.received_at,
        "http_status": answer.http_status,
        "provider_request_id": answer.request_id,
        "retry_after": answer.retry_after,
        "body_digest": answer.body_digest,
        "body_bytes": answer.body_bytes or None,
        "transport_error": answer.transport_error,
        "provider_state": (decision.provider_state or "")[:STATE_LENGTH],
        "interpreted_state": decision.interpreted_state,
        "decision": decision.code,
        "reason": _reason(decision),
        "delay_source": decision.delay_source or "",
        "delay_ms": decision.delay_ms,
        "next_poll_at": decision.next_poll_at,
        "charged_transport": decision.charge_transport,
        "warnings": list(decision.warnings),
    }


CHECK_RESPONSE_FIELDS = [
    "received_at",
    "http_status",
    "provider_request_id",
    "retry_after",
    "body_digest",
    "body_bytes",
    "transport_error",
    "provider_state",
    "interpreted_state",
    "decision",
    "reason",
    "delay_source",
    "delay_ms",
    "next_poll_at",
    "charged_transport",
    "warnings",
]


def decision_change(*, op: Operation, decision: Decision, answer: Answer) -> Change:
    """The operation's change after a decision, computed from the fenced snapshot: the transition
    the decision takes from `running` (the status its charge wrote) - RESUME to wait, ESCALATE or
    FINISH - with the answer's observations as the act's own facts. Checked against the status
    table first: a decision naming a status its transition does not write is refused."""
    observed: dict[str, object] = {
        "last_http_status": answer.http_status,
        "last_polled_at": answer.received_at,
        "backoff_attempt": decision.backoff_attempt,
        "provider_wait_until": decision.provider_wait_until,
    }
    if decision.provider_state is not None:
        observed["last_provider_state"] = decision.provider_state[:STATE_LENGTH]
    if decision.progress_percent is not None:
        observed["progress_percent"] = max(op.progress_percent or 0, decision.progress_percent)
    if decision.progress_counts is not None:
        observed["progress_counts"] = decision.progress_counts
    if decision.charge_transport:
        observed["transport_failures_used"] = op.transport_failures_used + 1
    if decision.warnings:
        observed["warnings"] = op.warnings_with(*decision.warnings)
    at = answer.received_at
    if decision.action is Action.WAIT:
        change = RESUME.given(
            next_poll_at=decision.next_poll_at, delay_source=decision.delay_source or "", updated_at=at, also=observed
        )
    elif decision.action is Action.ESCALATE:
        change = ESCALATE.given(updated_at=at, also=observed)
    else:
        change = FINISH.given(
            status=decision.status,
            result=decision.result,
            error=decision.error,
            completed_at=at,
            updated_at=at,
            also=observed,
        )
    if change.status != decision.status:
        raise TransitionRefused(f"a {decision.action} decision cannot write {decision.status}")
    change.check(was=op.status)
    return change


def _record_after_terminal(op: Operation, check: StatusCheck, decision: Decision, answer: Answer) -> None:
    """The operation ended (an agent cancelled the watch, which keeps the fence) while this request
    was in flight: keep the provider's answer as evidence and a warning, never as a second
    completion, and give the claim back."""
    warning = (
        f"provider reported {decision.provider_state or decision.interpreted_state!r} "
        f"after the operation was already {op.status}; status unchanged"
    )
    change = LATE_ANSWER.given(
        warnings=op.warnings_with(warning), last_http_status=answer.http_status, last_polled_at=check.received_at
    )
    change.apply(op=op)
    check.decision = "ignored_after_terminal"
    check.warnings = [*check.warnings, warning]
    check.save()
    op.save(update_fields=change.fields)
    controller_decision(
        op=op,
        state=op.status,
        decision="ignored_after_terminal",
        reason=warning,
        at=check.received_at,
        http_status=answer.http_status,
        provider_state=decision.provider_state,
        interpreted_state=decision.interpreted_state,
        provider_request_id=answer.request_id or None,
        retry_after=answer.retry_after or None,
    )


def _pause_account(*, op: Operation, until: datetime, http_status: int | None) -> bool:
    """A 429/503 with Retry-After pauses every operation of the provider account until then.

    Returns whether the pause was extended; the caller appends its audit entry (`_append_pause`)
    with its other entries, last in the transaction.
    """
    account = pacing.lock_account(name=op.account)
    if account.paused_until and account.paused_until >= until:
        return False
    ProviderAccount.objects.filter(pk=account.pk).update(
        paused_until=until, pause_reason=_pause_reason(op, http_status)
    )
    waiting = Operation.objects.filter(
        account=op.account, status__in=sorted(POLLABLE_STATUSES), next_poll_at__lt=until
    ).exclude(pk=op.pk)
    # Locked in primary-key order first, like a group's outcomes (fastsql.lock_rows says why).
    fastsql.lock_rows(Operation, list(waiting.order_by("pk").values_list("pk", flat=True)))
    waiting.update(next_poll_at=until, delay_source=DelaySource.PROVIDER_RETRY_AFTER, sequence=F("sequence") + 1)
    return True


def _pause_reason(op: Operation, http_status: int | None) -> str:
    return f"{http_status} with Retry-After on {op.pk}"[:300]


def _append_pause(*, op: Operation, until: datetime | None, http_status: int | None) -> None:
    audit.append(
        entry_type="provider.paused",
        actor=audit.SYSTEM_CONTROLLER,
        operation_id=op.pk,
        data={
            "account": op.account,
            "paused_until": audit.iso(until),
            "http_status": http_status,
            "reason": _pause_reason(op, http_status),
        },
    )


def decision_facts(*, op: Operation, reason: str, decision: Decision, answer: Answer) -> dict[str, Any]:
    """What a poll's controller-decision audit entry says, alone or as part of a group's append."""
    return {
        "state": op.status,
        "decision": decision.code,
        "reason": reason,
        "at": answer.received_at,
        "next_poll_at": op.next_poll_at,
        "delay_source": decision.delay_source,
        "delay_ms": decision.delay_ms,
        "http_status": answer.http_status,
        "provider_state": decision.provider_state,
        "interpreted_state": decision.interpreted_state,
        "provider_request_id": answer.request_id or None,
        "retry_after": answer.retry_after or None,
    }
