"""A poll's outcome: one short, fenced transaction writes the status check, the operation's new state,
the audit entry, and (when the decision says so) the card or the completion event.

Under the fence nobody else changes what the decision was computed from: a late answer (the claim
was taken over) writes nothing about the operation; an answer that arrives after the operation
ended another way is kept as evidence and a warning, never as a second completion.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import F

from operations import fastsql, pacing
from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.lifecycle.cards import open_card
from operations.lifecycle.claims import SentCheck
from operations.lifecycle.entries import controller_decision, decision_entry
from operations.models import Operation, ProviderAccount, StatusCheck
from operations.polling.model import Action, Decision
from operations.vocabulary import POLLABLE_STATUSES, DelaySource, Status

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
        # The account lock first (lock order: account, operation, audit head); its audit entry
        # comes with the others, last.
        paused = decision.account_pause_until is not None and _pause_account(
            op=op, until=decision.account_pause_until, http_status=answer.http_status
        )
        fields = _decision_fields(op, decision, answer=answer)
        sets, params = fastsql.assignments(Operation, fields)
        update = (
            f"UPDATE {fastsql.table(Operation)} SET {sets} WHERE id = %s AND {fastsql.column(Operation, 'fence')} = %s "
            f"AND {fastsql.column(Operation, 'status')} IN (%s, %s)"
        )
        params += [op.pk, check.fence, Status.PENDING.value, Status.RUNNING.value]
        _fill_check(check, decision=decision, answer=answer)
        answered, answer_params = fastsql.assignments(
            StatusCheck, {name: getattr(check, name) for name in _CHECK_RESPONSE_FIELDS}
        )
        answer_check = f"UPDATE {fastsql.table(StatusCheck)} SET {answered} WHERE id = %s"
        if connection.vendor == "postgresql":
            # One round trip: the check is answered only if the fenced update changed the operation.
            # Whether the outcome is written is that update's to say (`won`'s rows), as on SQLite:
            # the check UPDATE's own count would leave a changed operation without its entry.
            updated = len(
                fastsql.fetchall(
                    f"WITH won AS ({update} RETURNING id), answered AS ({answer_check} "
                    "AND EXISTS (SELECT 1 FROM won)) SELECT id FROM won",
                    [*params, *answer_params, check.pk],
                )
            )
        else:
            updated = fastsql.execute(update, params)
            if updated:
                fastsql.execute(answer_check, [*answer_params, check.pk])
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
        for name, value in fields.items():
            setattr(op, name, value)
        controller_decision(op, **_decision_facts(op, check.reason, decision, answer))
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
    for name, value in _check_answer(decision=decision, answer=answer).items():
        setattr(check, name, value)


def _check_answer(*, decision: Decision, answer: Answer) -> dict[str, object]:
    """A status check's answer columns (_CHECK_RESPONSE_FIELDS), as plain values."""
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


_CHECK_RESPONSE_FIELDS = [
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


def _decision_fields(op: Operation, decision: Decision, *, answer: Answer) -> dict[str, object]:
    """The operation's new values after a decision, computed from the fenced snapshot."""
    fields: dict[str, object] = {
        "last_http_status": answer.http_status,
        "last_polled_at": answer.received_at,
        "backoff_attempt": decision.backoff_attempt,
        "provider_wait_until": decision.provider_wait_until,
        "status": decision.status,
        "next_poll_at": decision.next_poll_at if decision.action is Action.WAIT else None,
        "fence": op.fence + 1,
        "lease_owner": "",
        "lease_expires_at": None,
        "claimed_at": None,
        "sequence": op.sequence + 1,
        "updated_at": answer.received_at,
    }
    if decision.provider_state is not None:
        fields["last_provider_state"] = decision.provider_state[:STATE_LENGTH]
    if decision.progress_percent is not None:
        fields["progress_percent"] = max(op.progress_percent or 0, decision.progress_percent)
    if decision.progress_counts is not None:
        fields["progress_counts"] = decision.progress_counts
    if decision.charge_transport:
        fields["transport_failures_used"] = op.transport_failures_used + 1
    if decision.warnings:
        fields["warnings"] = op.warnings_with(*decision.warnings)
    if decision.action is Action.WAIT:
        fields["delay_source"] = decision.delay_source or ""
    if decision.action is Action.COMPLETE:
        fields.update(result=decision.result, error=decision.error, completed_at=answer.received_at)
    return fields


def _record_after_terminal(op: Operation, check: StatusCheck, decision: Decision, answer: Answer) -> None:
    """The operation ended (closed, cancelled) while this request was in flight: keep the
    provider's answer as evidence and a warning, never as a second completion."""
    warning = (
        f"provider reported {decision.provider_state or decision.interpreted_state!r} "
        f"after the operation was already {op.status}; status unchanged"
    )
    check.decision = "ignored_after_terminal"
    check.warnings = [*check.warnings, warning]
    check.save()
    op.warnings = op.warnings_with(warning)
    op.last_http_status = answer.http_status
    op.last_polled_at = check.received_at
    op.fence += 1
    op.sequence += 1
    op.lease_owner, op.lease_expires_at = "", None
    op.save(
        update_fields=[
            "warnings",
            "last_http_status",
            "last_polled_at",
            "fence",
            "sequence",
            "lease_owner",
            "lease_expires_at",
        ]
    )
    controller_decision(
        op,
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


@dataclass(frozen=True)
class Outcome:
    """One answered request of a group: what `record_outcome` takes, with the check as plain values."""

    op: Operation
    check: SentCheck
    decision: Decision
    answer: Answer


def record_group(*, outcomes: list[Outcome]) -> dict[str, bool]:
    """Write a group's outcomes; per operation, whether it was written (False: a newer claim owns it,
    or the database refused that outcome).

    The common outcomes (wait, complete) go in one transaction: one multi-row fenced UPDATE per
    set of changed columns (usually one), the checks' answers, the completion events, and their
    audit entries in one append, last. An operation whose fence moved mid-flight is left out of
    that UPDATE, so it writes nothing there; it and the rare outcomes (a card, an account pause,
    an answer after the operation ended) then take `record_outcome`'s path, one by one.

    Every request is already charged: should the database refuse the group's transaction (one
    value it cannot store), each outcome is written again in its own transaction, so one bad row
    never loses the others; one refused alone writes nothing and stays leased, like a lost answer.
    """
    common = [
        o for o in outcomes if o.decision.account_pause_until is None and o.decision.action is not Action.ESCALATE
    ]
    changes = {o.op.pk: _decision_fields(o.op, o.decision, answer=o.answer) for o in common}
    # The operations as the decisions saw them: the transaction sets the new values on them.
    before = {o.op.pk: {name: getattr(o.op, name) for name in changes[o.op.pk]} for o in common}
    try:
        written = _record_common(common, changes)
    except (DatabaseError, audit.AuditError):
        logger.exception("a group's outcomes could not be written together; writing each alone")
        for outcome in common:
            for name, value in before[outcome.op.pk].items():
                setattr(outcome.op, name, value)
        written = {}
    for outcome in outcomes:
        if outcome.op.pk not in written:
            written[outcome.op.pk] = _record_alone(outcome)
    return written


def _record_common(common: list[Outcome], changes: dict[str, dict[str, object]]) -> dict[str, bool]:
    """`record_group`'s one transaction: the common outcomes it wrote."""
    written: dict[str, bool] = {}
    with transaction.atomic():
        shapes: dict[tuple[str, ...], list[tuple[Outcome, dict[str, object]]]] = {}
        for outcome in common:
            fields = changes[outcome.op.pk]
            shapes.setdefault(tuple(fields), []).append((outcome, fields))
        # Locked in primary-key order (fastsql.lock_rows says why): by the one UPDATE itself when
        # the outcomes share their changed columns (the usual case), else first, in one statement.
        alone = len(shapes) == 1
        if not alone:
            fastsql.lock_rows(Operation, sorted(changes))
        won: set[str] = set()
        for names, rows in shapes.items():
            won |= _update_many(names, rows, lock=alone)
        entries, checks = [], []
        for outcome in common:
            if outcome.op.pk not in won:
                continue
            op, decision, answer = outcome.op, outcome.decision, outcome.answer
            for name, value in changes[op.pk].items():
                setattr(op, name, value)
            # Plain values, no StatusCheck instance: the group's checks are written by one UPDATE.
            answered = _check_answer(decision=decision, answer=answer)
            checks.append(
                [outcome.check.pk, *[fastsql.prep(StatusCheck, n, answered[n]) for n in _CHECK_RESPONSE_FIELDS]]
            )
            if decision.action is Action.COMPLETE:
                record_event(operation=op, event_type=EVENT_COMPLETED)
            entries.append(decision_entry(op, **_decision_facts(op, str(answered["reason"]), decision, answer)))
            written[op.pk] = True
        _update_checks(checks)
        audit.append_many(entries=entries)
    return written


def _record_alone(outcome: Outcome) -> bool:
    check = outcome.check.as_model(op=outcome.op)
    try:
        return record_outcome(op=outcome.op, check=check, decision=outcome.decision, answer=outcome.answer)
    except (DatabaseError, audit.AuditError):
        logger.exception("the outcome for %s (fence %s) could not be written", outcome.op.pk, outcome.check.fence)
        return False


def _decision_facts(op: Operation, reason: str, decision: Decision, answer: Answer) -> dict[str, Any]:
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


def _update_many(names: tuple[str, ...], rows: list[tuple[Outcome, dict[str, object]]], *, lock: bool) -> set[str]:
    """One fenced UPDATE of many operations with the same changed columns; the ids it changed."""
    table, fence, status = (
        fastsql.table(Operation),
        fastsql.column(Operation, "fence"),
        fastsql.column(Operation, "status"),
    )
    live = [Status.PENDING.value, Status.RUNNING.value]
    if connection.vendor != "postgresql":
        # SQLite serialises writers anyway: one statement per row, in the same transaction.
        won = set()
        for outcome, fields in rows:
            sets, params = fastsql.assignments(Operation, fields)
            sql = f"UPDATE {table} SET {sets} WHERE id = %s AND {fence} = %s AND {status} IN (%s, %s)"
            if fastsql.execute(sql, [*params, outcome.op.pk, outcome.check.fence, *live]):
                won.add(outcome.op.pk)
        return won
    values = [
        [outcome.op.pk, outcome.check.fence, *[fastsql.prep(Operation, name, fields[name]) for name in names]]
        for outcome, fields in rows
    ]
    where = f" AND o.{status} IN (%s, %s)"
    return set(
        # Typing: RETURNING id gives the operations' string ids.
        fastsql.update_rows(  # type: ignore[arg-type]
            Operation, keys=("id", "fence"), names=names, rows=values, where=where, params=live, lock=lock
        )
    )


def _update_checks(rows: list[list[object]]) -> None:
    """The answers on the group's status checks (our own rows, inserted by the charge)."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        fastsql.update_rows(StatusCheck, keys=("id",), names=_CHECK_RESPONSE_FIELDS, rows=rows)
        return
    sets = ", ".join(f"{fastsql.column(StatusCheck, n)} = %s" for n in _CHECK_RESPONSE_FIELDS)
    for pk, *values in rows:
        fastsql.execute(f"UPDATE {fastsql.table(StatusCheck)} SET {sets} WHERE id = %s", [*values, pk])
