"""One poll of one operation, in the order of DESIGN.md section 4.

    load operation; stop if terminal or needs_attention
    if now >= deadline_at:            escalate deadline_exceeded; stop   (no request)
    if used >= max_status_requests:   escalate request_budget_exhausted; stop
    if now < next_poll_at:            not due - never "catch up" missed polls; stop
    claim: compare-and-set fence (only one worker wins); reload the operation
    increment status_requests_used, persist                 <- before sending
    send ONE status GET
    in one short transaction, fenced: record StatusCheck, decision, audit entry, next_poll_at

No database lock is held across the HTTP call. Locks are always taken in the same order
(provider account, then operation, then the audit head last) so concurrent writers cannot deadlock.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache
from urllib.parse import quote

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from operations import audit, fastsql, http, pacing
from operations.callbacks import record_event
from operations.models import Operation, ProviderAccount, ProviderProfile, StatusCheck
from operations.polling.decide import Action, Bounds, Decision, Observation, Policy, decide
from operations.polling.gate import Gate, before_send
from operations.polling.states import StateTable
from operations.redaction import redact_bytes, scrub
from operations.vocabulary import POLLABLE_STATUSES, DelaySource, Reason, Status

logger = logging.getLogger(__name__)

_rng = random.SystemRandom()
# Waiting for a send slot holds a worker; beyond this the poll is deferred instead.
MAX_SLOT_WAIT_S = 2.0
SLOT_ATTEMPTS = 3


class PollResult(StrEnum):
    POLLED = "polled"
    NOT_DUE = "not_due"
    STALE = "stale"  # the fence moved: a redelivered or superseded task; nothing written
    STOPPED = "stopped"  # terminal or with a human
    ESCALATED = "escalated"  # escalated before sending (deadline, budget, approval)
    DEFERRED = "deferred"  # provider account paused or over its rate: rescheduled, not charged


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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
    )


def status_url(*, profile: ProviderProfile, job_id: str) -> str:
    # The job id is always one percent-encoded path segment: an agent can never steer the URL.
    return profile.status_url.replace("{job_id}", quote(job_id, safe=""))


def poll_once(
    *, operation_id: str, fence: int, rng: random.Random | None = None, worker: str | None = None
) -> PollResult:
    """Poll one operation at most once, if `fence` still owns it. Safe to call twice."""
    rng = rng or _rng
    worker = worker or worker_name()
    started_at = timezone.now()
    op = _load_for_poll(operation_id)
    if op is None or op.fence != fence:
        return PollResult.STALE
    profile = op.provider
    gate = before_send(
        status=op.status,
        now=started_at,
        deadline_at=op.deadline_at,
        requests_used=op.status_requests_used,
        max_requests=op.max_status_requests,
        next_poll_at=op.next_poll_at,
        per_call_approval=profile.approval_mode == ProviderProfile.ApprovalMode.PER_CALL,
        approved_checks=op.approved_checks,
    )
    if gate.gate is Gate.STOP:
        release(operation_id=op.pk, fence=fence)
        return PollResult.STOPPED
    if gate.gate is Gate.NOT_DUE:
        release(operation_id=op.pk, fence=fence)
        return PollResult.NOT_DUE
    if gate.gate is Gate.ESCALATE:
        assert gate.reason is not None
        escalate_without_request(operation_id=op.pk, fence=fence, reason=gate.reason, explanation=gate.explanation)
        return PollResult.ESCALATED

    charged = _charge(op=op, fence=fence, worker=worker, started_at=started_at)
    if isinstance(charged, PollResult):
        return charged
    op, check = charged
    raw = http.send_to_provider(
        method="GET",
        url=status_url(profile=profile, job_id=op.provider_job_id),
        credential_env=profile.credential_env,
        auth_scheme=profile.auth_scheme,
    )
    received_at = timezone.now()
    return _record(op=op, check=check, raw=raw, received_at=received_at, rng=rng)


# Columns a poll never reads; skipping them saves decoding JSON on every poll.
_COLD_FIELDS = ("purpose", "metadata", "result", "error", "request_fingerprint", "cancel_reason", "registered_by")
_profiles: dict[int, tuple[object, ProviderProfile]] = {}


def clear_profile_cache() -> None:
    """Forget cached profiles (tests that recreate rows under a frozen clock need this)."""
    _profiles.clear()


@cache
def _load_sql() -> str:
    names = [field.column for field in Operation._meta.concrete_fields if field.name not in _COLD_FIELDS]
    columns = ", ".join(f"o.{fastsql.connection.ops.quote_name(name)}" for name in names)
    return (
        f"SELECT {columns}, p.updated_at AS profile_stamp FROM {fastsql.table(Operation)} o "
        f"JOIN {fastsql.table(ProviderProfile)} p ON p.id = o.provider_id WHERE o.id = %s"
    )


def _load_for_poll(operation_id: str) -> Operation | None:
    """The operation with its profile; profiles are cached per process until they change."""
    found = list(Operation.objects.raw(_load_sql(), [operation_id]))
    if not found:
        return None
    op = found[0]
    # The stamp is compared as the backend returned it (a string on SQLite, a datetime on
    # PostgreSQL): equal stamps mean an unchanged profile.
    stamp = op.profile_stamp  # type: ignore[attr-defined]
    cached = _profiles.get(op.provider_id)
    if cached is None or cached[0] != stamp:
        cached = (stamp, ProviderProfile.objects.get(pk=op.provider_id))
        _profiles[op.provider_id] = cached
    op.provider = cached[1]
    return op


def poll_claims(*, claims: list[tuple[str, int]], rng: random.Random | None = None) -> list[PollResult]:
    """Poll several claimed operations one after another (one worker task under load).

    A poll is only started while a whole request still fits the task's time limit; the claims
    left over are released (fence + 1, still due) so the next dispatcher pass hands them to
    another worker at once instead of waiting for their leases to run out.
    """
    # The longest a poll can take: the waits for a send slot in _charge, then the whole request.
    longest_poll_s = SLOT_ATTEMPTS * MAX_SLOT_WAIT_S + settings.POLL_HTTP_TOTAL_TIMEOUT_S
    budget_s = settings.Q_CLUSTER["timeout"] - longest_poll_s - 5
    started = time.monotonic()
    results: list[PollResult] = []
    for index, (operation_id, fence) in enumerate(claims):
        if index and time.monotonic() - started > budget_s:
            for later_id, later_fence in claims[index:]:
                release(operation_id=later_id, fence=later_fence)
                results.append(PollResult.STALE)
            break
        results.append(poll_once(operation_id=operation_id, fence=fence, rng=rng))
    return results


def _charge(
    *, op: Operation, fence: int, worker: str, started_at: datetime
) -> tuple[Operation, StatusCheck] | PollResult:
    """Claim the poll (fence + 1) and charge the request before it is sent.

    A claim the dispatcher admitted spends its reserved send slot (pacing.py); otherwise this
    waits briefly for the provider account's send allowance. A paused account or a long wait
    defers the poll instead (not charged).
    """
    rate = op.provider.rate_limit_per_s
    if op.claimed_at is not None:
        admitted = _charge_admitted(op=op, fence=fence, worker=worker, started_at=started_at, rate=rate)
        if admitted is not None:
            return admitted
    for _attempt in range(SLOT_ATTEMPTS):
        with transaction.atomic():
            account = pacing.lock_account(name=op.account)
            # Read the clock after the lock wait: `sent_at` is what pacing counts, and it must be
            # as close as possible to the moment the request actually leaves (see pacing.py).
            now = timezone.now()
            if account.paused_until and account.paused_until > now:
                _defer(
                    op=op,
                    fence=fence,
                    until=account.paused_until,
                    why=f"provider account paused: {account.pause_reason}",
                )
                return PollResult.DEFERRED
            free_at = pacing.next_free_send(account=op.account, rate_per_s=rate, now=now)
            if free_at <= now:
                taken = _take(op=op, fence=fence, worker=worker, started_at=started_at, now=now, reserved=False)
                return PollResult.STALE if taken is None else taken
            wait_s = (free_at - now).total_seconds()
            if wait_s > MAX_SLOT_WAIT_S:
                _defer_for_rate_limit(op=op, fence=fence, until=free_at)
                return PollResult.DEFERRED
        time.sleep(wait_s)
    # The allowance kept moving away (a busy account): give the slot back rather than spin.
    with transaction.atomic():
        _defer_for_rate_limit(op=op, fence=fence, until=free_at)
    return PollResult.DEFERRED


def _charge_admitted(
    *, op: Operation, fence: int, worker: str, started_at: datetime, rate: float
) -> tuple[Operation, StatusCheck] | PollResult | None:
    """Spend the send slot the dispatcher reserved for this claim; None when it no longer holds.

    The dispatcher admitted the claim under the account's exclusive row lock and counts it until
    it is charged, so the window has room for it; the charge verifies that (the exact limit at
    send time) and that the reservation is still live, under a shared lock: workers of one account
    do not queue on its row, yet a pause being recorded is waited for and honoured.
    """
    with transaction.atomic():
        account = pacing.share_account(name=op.account)
        if account is None:
            return None
        # Read the clock after any lock wait: `sent_at` is what pacing counts (see pacing.py).
        now = timezone.now()
        if account.paused_until and account.paused_until > now:
            _defer(
                op=op, fence=fence, until=account.paused_until, why=f"provider account paused: {account.pause_reason}"
            )
            return PollResult.DEFERRED
        if not pacing.has_room(account=op.account, rate_per_s=rate, now=now):
            return None
        return _take(op=op, fence=fence, worker=worker, started_at=started_at, now=now, reserved=True)


def _take(
    *, op: Operation, fence: int, worker: str, started_at: datetime, now: datetime, reserved: bool
) -> tuple[Operation, StatusCheck] | None:
    """Compare-and-set the fence, charge one request and record it as sent; None if the CAS lost."""
    sets, params = fastsql.assignments(
        Operation,
        {
            "fence": fence + 1,
            "status": Status.RUNNING.value,
            "approved_checks": 0,
            "lease_owner": worker,
            "lease_expires_at": now + timedelta(seconds=settings.POLL_LEASE_S),
            "claimed_at": None,
            "updated_at": now,
        },
    )
    used, budget = fastsql.column(Operation, "status_requests_used"), fastsql.column(Operation, "max_status_requests")
    where = (
        f"id = %s AND {fastsql.column(Operation, 'fence')} = %s AND {fastsql.column(Operation, 'status')} IN (%s, %s) "
        f"AND {used} < {budget}"
    )
    params += [op.pk, fence, Status.PENDING.value, Status.RUNNING.value]
    if reserved:
        where += (
            f" AND {fastsql.column(Operation, 'claimed_at')} IS NOT NULL"
            f" AND {fastsql.column(Operation, 'lease_expires_at')} > %s"
        )
        params.append(fastsql.prep(Operation, "lease_expires_at", now))
    sequence = fastsql.column(Operation, "sequence")
    # The request count and the status are visible to agents: the sequence moves with them.
    increments = f"{used} = {used} + 1, {sequence} = {sequence} + 1"
    if fastsql.execute(f"UPDATE {fastsql.table(Operation)} SET {sets}, {increments} WHERE {where}", params) != 1:
        return None
    check = StatusCheck(
        operation=op,
        account=op.account,
        fence=fence + 1,
        due_at=op.claim_due_at or op.next_poll_at,
        started_at=started_at,
        sent_at=now,
    )
    values = {"operation": op.pk, **{name: getattr(check, name) for name in _CHECK_SENT_FIELDS}}
    columns = ", ".join(fastsql.column(StatusCheck, name) for name in values)
    row = fastsql.fetchone(
        f"INSERT INTO {fastsql.table(StatusCheck)} ({columns}) VALUES ({', '.join(['%s'] * len(values))}) RETURNING id",
        [fastsql.prep(StatusCheck, name, value) for name, value in values.items()],
    )
    check.pk = row[0] if row else None
    op.fence, op.status = fence + 1, Status.RUNNING
    op.status_requests_used += 1
    op.sequence += 1
    op.approved_checks = 0
    return op, check


_CHECK_SENT_FIELDS = (
    "account",
    "fence",
    "due_at",
    "started_at",
    "sent_at",
    "provider_request_id",
    "retry_after",
    "body_digest",
    "transport_error",
    "provider_state",
    "interpreted_state",
    "decision",
    "reason",
    "delay_source",
    "charged_transport",
    "warnings",
)


def _defer_for_rate_limit(*, op: Operation, fence: int, until: datetime) -> None:
    # Our own pacing, not the provider's request: recorded as local backoff.
    _defer(
        op=op,
        fence=fence,
        until=until,
        why=f"provider account {op.account} at its rate limit",
        source=DelaySource.LOCAL_BACKOFF,
    )


def _defer(
    *, op: Operation, fence: int, until: datetime, why: str, source: DelaySource = DelaySource.PROVIDER_RETRY_AFTER
) -> None:
    """Reschedule without sending or charging. Runs inside the caller's transaction."""
    now = timezone.now()
    moved = Operation.objects.filter(pk=op.pk, fence=fence).update(
        fence=fence + 1,
        sequence=F("sequence") + 1,
        next_poll_at=until,
        delay_source=source,
        lease_owner="",
        lease_expires_at=None,
        claimed_at=None,
        updated_at=now,
    )
    if moved:
        audit.append(
            entry_type="controller.decision",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data=_decision_data(
                op,
                state=op.status,
                decision="defer",
                reason=why,
                next_poll_at=until,
                delay_source=source,
                delay_ms=round((until - now).total_seconds() * 1000),
            ),
        )


def release(*, operation_id: str, fence: int) -> bool:
    """Give up a claim without polling: the fence moves so a duplicate task is a no-op."""
    return bool(
        Operation.objects.filter(pk=operation_id, fence=fence).update(
            fence=fence + 1, lease_owner="", lease_expires_at=None, claimed_at=None
        )
    )


def escalate_without_request(*, operation_id: str, fence: int | None, reason: Reason, explanation: str) -> bool:
    """Hand the operation to a human without spending a request (deadline, budget, approval)."""
    from escalations.services import escalation_open

    with transaction.atomic():
        query = Operation.objects.select_for_update().select_related("provider").filter(pk=operation_id)
        if fence is not None:
            query = query.filter(fence=fence)
        op = query.filter(status__in=sorted(POLLABLE_STATUSES)).first()
        if op is None:
            return False
        now = timezone.now()
        op.status = Status.NEEDS_ATTENTION
        op.next_poll_at = None
        op.fence += 1
        op.lease_owner, op.lease_expires_at, op.claimed_at = "", None, None
        op.sequence += 1
        op.updated_at = now
        op.save()
        audit.append(
            entry_type="controller.decision",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data=_decision_data(op, state=op.status, decision="escalate", reason=f"{reason}: {explanation}"),
        )
        escalation_open(operation=op, reason=reason, detail=explanation, context={"http_status": None})
    return True


def _record(
    *, op: Operation, check: StatusCheck, raw: http.RawResponse, received_at: datetime, rng: random.Random
) -> PollResult:
    """Interpret the response and write everything in one short, fenced transaction."""
    from escalations.services import escalation_open

    # A provider may echo the credential (say, the Authorization header in an error body): every
    # registered secret is scrubbed from the body before anything is taken from it, and from every
    # value the decision keeps, before anything is stored.
    headers = scrub(raw.headers)
    observation = Observation(
        received_at=received_at,
        http_status=raw.http_status,
        headers=headers,
        body=None if raw.body is None else redact_bytes(raw.body),
        transport_error=raw.transport_error,
        transport_detail=raw.transport_detail,
    )
    profile = op.provider
    decision = decide(
        policy=policy_for(profile=profile), bounds=bounds_for(op=op), observation=observation, rng=rng
    ).redacted(redact=scrub)
    request_id = ""
    if profile.request_id_header:
        request_id = (headers.get(profile.request_id_header.lower()) or ("",))[0][:200]
    retry_after = ", ".join(headers.get("retry-after", ()))[:200]
    with transaction.atomic():
        # The account lock first (lock order: account, operation, audit head); its audit entry
        # comes with the others, last.
        paused = decision.account_pause_until is not None and _pause_account(
            op=op, until=decision.account_pause_until, http_status=raw.http_status
        )
        fields = _decision_fields(op, decision, received_at=received_at, http_status=raw.http_status)
        # One fenced UPDATE: under the fence nobody else changes what the decision was computed from.
        sets, params = fastsql.assignments(Operation, fields)
        updated = fastsql.execute(
            f"UPDATE {fastsql.table(Operation)} SET {sets} WHERE id = %s AND {fastsql.column(Operation, 'fence')} = %s "
            f"AND {fastsql.column(Operation, 'status')} IN (%s, %s)",
            [*params, op.pk, check.fence, Status.PENDING.value, Status.RUNNING.value],
        )
        if not updated:
            current = Operation.objects.select_for_update().filter(pk=op.pk, fence=check.fence).first()
            if current is None:
                # A newer claim owns the operation; this late answer writes nothing about it (the
                # provider's request to pause the whole account still stands).
                logger.info("late result for %s (fence %s) discarded", op.pk, check.fence)
                if paused:
                    _append_pause(op=op, until=decision.account_pause_until, http_status=raw.http_status)
                return PollResult.STALE
            _fill_check(
                check,
                raw=raw,
                decision=decision,
                received_at=received_at,
                request_id=request_id,
                retry_after=retry_after,
            )
            result = _record_after_terminal(current, check, decision, raw, request_id, retry_after)
            if paused:
                _append_pause(op=op, until=decision.account_pause_until, http_status=raw.http_status)
            return result
        for name, value in fields.items():
            setattr(op, name, value)
        current = op
        _fill_check(
            check, raw=raw, decision=decision, received_at=received_at, request_id=request_id, retry_after=retry_after
        )
        sets, params = fastsql.assignments(StatusCheck, {name: getattr(check, name) for name in _CHECK_RESPONSE_FIELDS})
        fastsql.execute(f"UPDATE {fastsql.table(StatusCheck)} SET {sets} WHERE id = %s", [*params, check.pk])
        audit.append(
            entry_type="controller.decision",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=current.pk,
            data=_decision_data(
                current,
                state=current.status,
                decision=decision.code,
                reason=decision.explanation
                if decision.reason is None
                else f"{decision.reason}: {decision.explanation}",
                next_poll_at=current.next_poll_at,
                delay_source=decision.delay_source,
                delay_ms=decision.delay_ms,
                http_status=observation.http_status,
                provider_state=decision.provider_state,
                interpreted_state=decision.interpreted_state,
                provider_request_id=request_id or None,
                retry_after=retry_after or None,
            ),
            at=received_at,
        )
        if paused:
            _append_pause(op=op, until=decision.account_pause_until, http_status=raw.http_status)
        if decision.action is Action.ESCALATE:
            assert decision.reason is not None
            escalation_open(
                operation=current,
                reason=decision.reason,
                detail=decision.explanation,
                context={
                    "http_status": observation.http_status,
                    "provider_state": decision.provider_state,
                    "interpreted_state": decision.interpreted_state,
                    "transport_error": raw.transport_error,
                },
            )
        elif decision.action is Action.COMPLETE:
            record_event(operation=current, event_type="operation.completed")
    return PollResult.POLLED


def _fill_check(
    check: StatusCheck,
    *,
    raw: http.RawResponse,
    decision: Decision,
    received_at: datetime,
    request_id: str,
    retry_after: str,
) -> None:
    check.received_at = received_at
    check.http_status = raw.http_status
    check.provider_request_id = request_id
    check.retry_after = retry_after
    check.body_digest = raw.body_digest
    check.body_bytes = raw.body_bytes or None
    check.transport_error = raw.transport_error or ""
    check.provider_state = decision.provider_state or ""
    check.interpreted_state = decision.interpreted_state
    check.decision = decision.code
    check.reason = decision.explanation if decision.reason is None else f"{decision.reason}: {decision.explanation}"
    check.delay_source = decision.delay_source or ""
    check.delay_ms = decision.delay_ms
    check.next_poll_at = decision.next_poll_at
    check.charged_transport = decision.charge_transport
    check.warnings = list(decision.warnings)


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


def _decision_fields(
    op: Operation, decision: Decision, *, received_at: datetime, http_status: int | None
) -> dict[str, object]:
    """The operation's new values after a decision, computed from the fenced snapshot."""
    fields: dict[str, object] = {
        "last_http_status": http_status,
        "last_polled_at": received_at,
        "backoff_attempt": decision.backoff_attempt,
        "status": decision.status,
        "next_poll_at": decision.next_poll_at if decision.action is Action.WAIT else None,
        "fence": op.fence + 1,
        "lease_owner": "",
        "lease_expires_at": None,
        "claimed_at": None,
        "sequence": op.sequence + 1,
        "updated_at": received_at,
    }
    if decision.provider_state is not None:
        fields["last_provider_state"] = decision.provider_state[:200]
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
        fields.update(result=decision.result, error=decision.error, completed_at=received_at)
    return fields


def _record_after_terminal(
    op: Operation, check: StatusCheck, decision: Decision, raw: http.RawResponse, request_id: str, retry_after: str
) -> PollResult:
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
    op.last_http_status = raw.http_status
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
    audit.append(
        entry_type="controller.decision",
        actor=audit.SYSTEM_CONTROLLER,
        operation_id=op.pk,
        data=_decision_data(
            op,
            state=op.status,
            decision="ignored_after_terminal",
            reason=warning,
            http_status=raw.http_status,
            provider_state=decision.provider_state,
            interpreted_state=decision.interpreted_state,
            provider_request_id=request_id or None,
            retry_after=retry_after or None,
        ),
        at=check.received_at,
    )
    return PollResult.POLLED


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
    Operation.objects.filter(account=op.account, status__in=sorted(POLLABLE_STATUSES), next_poll_at__lt=until).exclude(
        pk=op.pk
    ).update(next_poll_at=until, delay_source=DelaySource.PROVIDER_RETRY_AFTER, sequence=F("sequence") + 1)
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


def _decision_data(op: Operation, *, state: str, decision: str, reason: str, **fields: object) -> dict:
    data: dict[str, object] = {
        "state": str(state),
        "next_poll_at": None,
        "delay_source": None,
        "delay_ms": None,
        "request_count": op.status_requests_used,
        "max_requests": op.max_status_requests,
        "transport_failures": op.transport_failures_used,
        "max_transport_failures": op.max_transport_failures,
        "deadline": audit.iso(op.deadline_at),
        "decision": decision,
        "reason": reason,
    }
    for key, value in fields.items():
        if isinstance(value, datetime):
            value = audit.iso(value)
        elif isinstance(value, StrEnum):
            value = str(value)
        data[key] = value
    return data
