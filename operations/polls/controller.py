"""One poll of one operation, in the order of docs/DESIGN.md section 4.

    load operation; stop if terminal or needs_attention
    if now >= deadline_at:            escalate deadline_exceeded; stop   (no request)
    if now >= business_deadline_at:   escalate business_deadline_passed; stop (where it binds)
    if used >= max_status_requests:   escalate request_budget_exhausted; stop
    if now < next_poll_at:            not due - never "catch up" missed polls; stop
    if the destination is not allowed: escalate destination_not_allowed; stop (no request, none charged)
    claim: compare-and-set fence (only one worker wins); reload the operation
    the deadline checks again at the charge's moment (after any lock or send-slot wait); within
    SEND_MARGIN (1 s) of a deadline nothing is charged: the poll waits for the deadline
    increment status_requests_used, persist                 <- before sending
    send ONE status GET
    in one short transaction, fenced: record StatusCheck, decision, audit entry, next_poll_at

No database lock is held across the HTTP call. Locks are always taken in the same order
(provider account, then operation; an audit entry is a plain insert that takes none) so concurrent
writers cannot deadlock. What the charge and the outcome write is the lifecycle's transitions
(operations/lifecycle/transitions.py), the same for a group of polls (batch.py).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from datetime import datetime, timedelta
from enum import StrEnum

from django.db import transaction
from django.utils import timezone

from operations.infrastructure.redaction import redact_bytes, scrub
from operations.lifecycle import polls
from operations.lifecycle.cards import escalate
from operations.lifecycle.claims import charge, defer, release
from operations.limits import pacing
from operations.models import Operation, ProviderProfile, StatusCheck
from operations.polling.decide import decide, unreadable
from operations.polling.gate import Gate, before_send, business_deadline_binds
from operations.polling.model import Decision, Observation
from operations.polls.poll_inputs import bounds_for, load_for_poll, policy_for, status_url
from operations.providers import http
from operations.providers.targets import Destination, DestinationRefused, check_destination
from operations.vocabulary import DelaySource, Reason

logger = logging.getLogger(__name__)

_rng = random.SystemRandom()
# Waiting for a send slot holds a worker; beyond this the poll is deferred instead.
MAX_SLOT_WAIT_S = 2.0
SLOT_ATTEMPTS = 3
# A charged request leaves after the charge commits and reaches the provider later still (a busy
# host, a pooler): one charged this close to a deadline could arrive after it, so it is not sent.
SEND_MARGIN = timedelta(seconds=1)


class PollResult(StrEnum):
    POLLED = "polled"
    NOT_DUE = "not_due"
    STALE = "stale"  # the fence moved: a redelivered or superseded task; nothing written
    STOPPED = "stopped"  # terminal or with a human
    ESCALATED = "escalated"  # escalated before sending (deadline, budget, approval)
    DEFERRED = "deferred"  # provider account paused or over its rate: rescheduled, not charged


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def poll_once(
    *, operation_id: str, fence: int, rng: random.Random | None = None, worker: str | None = None
) -> PollResult:
    """Poll one operation at most once, if `fence` still owns it. Safe to call twice."""
    rng = rng or _rng
    worker = worker or worker_name()
    started_at = timezone.now()
    op = load_for_poll(operation_id)
    if op is None or op.fence != fence:
        return PollResult.STALE
    stopped = gate_or_stop(op=op, fence=fence, now=started_at)
    if stopped is not None:
        return stopped
    destination = destination_or_stop(op=op, fence=fence)
    if isinstance(destination, PollResult):
        return destination
    charged = _charge(op=op, fence=fence, worker=worker, started_at=started_at)
    if isinstance(charged, PollResult):
        return charged
    op, check = charged
    raw = http.send_to_provider(method="GET", destination=destination, auth_scheme=op.provider.auth_scheme)
    received_at = timezone.now()
    return _record(op=op, check=check, raw=raw, received_at=received_at, rng=rng)


def gate_or_stop(*, op: Operation, fence: int, now: datetime) -> PollResult | None:
    """The checks before a request; None to go on, else how the poll stopped (released or escalated)."""
    profile = op.provider
    gate = before_send(
        status=op.status,
        now=now,
        deadline_at=op.deadline_at,
        requests_used=op.status_requests_used,
        max_requests=op.max_status_requests,
        next_poll_at=op.next_poll_at,
        per_call_approval=profile.approval_mode == ProviderProfile.ApprovalMode.PER_CALL,
        approved_checks=op.approved_checks,
        business_deadline_at=op.business_deadline_at,
        business_deadline_waived=op.business_deadline_waived_at is not None,
    )
    if gate.gate is Gate.STOP:
        release(operation_id=op.pk, fence=fence)
        return PollResult.STOPPED
    if gate.gate is Gate.NOT_DUE:
        release(operation_id=op.pk, fence=fence)
        return PollResult.NOT_DUE
    if gate.gate is Gate.ESCALATE:
        assert gate.reason is not None
        escalate(operation_id=op.pk, fence=fence, reason=gate.reason, explanation=gate.explanation)
        return PollResult.ESCALATED
    return None


def destination_or_stop(*, op: Operation, fence: int) -> Destination | PollResult:
    """Where this poll's request may go, checked before it is charged (docs/DESIGN.md section 2).

    A destination the profile may not send to (its credential is not bound to the status URL's
    origin in this worker's PROVIDER_CREDENTIAL_ORIGINS; without a credential, no public address)
    is escalated at once in fixed words: no request is sent and none is charged.
    """
    profile = op.provider
    try:
        return check_destination(
            credential_env=profile.credential_env, url=status_url(profile=profile, job_id=op.provider_job_id)
        )
    except DestinationRefused as refused:
        escalate(operation_id=op.pk, fence=fence, reason=Reason.DESTINATION_NOT_ALLOWED, explanation=refused.why)
        return PollResult.ESCALATED


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
                stopped = gate_at_charge(op=op, fence=fence, now=now)
                if stopped is not None:
                    return stopped
                taken = charge(op=op, fence=fence, worker=worker, started_at=started_at, now=now, reserved=False)
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
        stopped = gate_at_charge(op=op, fence=fence, now=now)
        if stopped is not None:
            return stopped
        return charge(op=op, fence=fence, worker=worker, started_at=started_at, now=now, reserved=True)


def gate_at_charge(*, op: Operation, fence: int, now: datetime) -> PollResult | None:
    """The gate again at the moment of the charge: a lock wait or a wait for the account's send
    slot can carry a poll past a deadline the gate at its start did not see, and no request may
    leave after it (the poll stops or escalates as it would have). Within SEND_MARGIN of a
    deadline nothing is charged either: the poll waits for the deadline, which then stops it."""
    stop = _earliest_stop(op)
    if now + SEND_MARGIN < stop:
        return None
    if now >= stop:
        return gate_or_stop(op=op, fence=fence, now=now)
    _defer(
        op=op,
        fence=fence,
        until=stop,
        why=f"within {SEND_MARGIN.total_seconds():g} s of a deadline: a request now could reach the provider after it",
        source=DelaySource.LOCAL_BACKOFF,
    )
    return PollResult.DEFERRED


def _earliest_stop(op: Operation) -> datetime:
    """The first moment a time-based gate stops this poll: its deadline, or its business deadline
    where that binds (operations.polling.gate.business_deadline_binds)."""
    if business_deadline_binds(
        business_deadline_at=op.business_deadline_at,
        deadline_at=op.deadline_at,
        waived=op.business_deadline_waived_at is not None,
    ):
        assert op.business_deadline_at is not None
        return op.business_deadline_at
    return op.deadline_at


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
    defer(op=op, fence=fence, until=until, why=why, now=timezone.now(), source=source)


def _record(
    *, op: Operation, check: StatusCheck, raw: http.RawResponse, received_at: datetime, rng: random.Random
) -> PollResult:
    """Interpret the response (pure) and hand the outcome to the lifecycle's one fenced transaction."""
    decision, answer = interpret(op=op, raw=raw, received_at=received_at, rng=rng)
    written = polls.record_outcome(op=op, check=check, decision=decision, answer=answer)
    return PollResult.POLLED if written else PollResult.STALE


def interpret(
    *, op: Operation, raw: http.RawResponse, received_at: datetime, rng: random.Random
) -> tuple[Decision, polls.Answer]:
    """What a response means for the operation (pure decision) and what its check records.

    The request is already charged: an answer that breaks interpreting (the parser refuses every
    hostile body known, decide._Body; this is for the ones nobody foresaw) is an invalid body for
    its own operation, never an exception that would lose a group's other outcomes with it.
    """
    try:
        return _interpret(op=op, raw=raw, received_at=received_at, rng=rng)
    except Exception:
        logger.exception("the answer for %s could not be interpreted", op.pk)
    observation = Observation(received_at=received_at, http_status=raw.http_status)
    decision = unreadable(
        policy=policy_for(profile=op.provider),
        bounds=bounds_for(op=op),
        observation=observation,
        rng=rng,
        what="the answer could not be interpreted",
    )
    answer = polls.Answer(
        received_at=received_at,
        http_status=raw.http_status,
        retry_after="",
        request_id="",
        body_digest=raw.body_digest,
        body_bytes=raw.body_bytes,
        transport_error=raw.transport_error or "",
    )
    return decision, answer


def _interpret(
    *, op: Operation, raw: http.RawResponse, received_at: datetime, rng: random.Random
) -> tuple[Decision, polls.Answer]:
    """`interpret` for an answer that can be read.

    A provider may echo the credential (say, the Authorization header in an error body): every
    registered secret is scrubbed from the body before anything is taken from it, and from every
    value the decision keeps, before anything is stored.
    """
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
    answer = polls.Answer(
        received_at=received_at,
        http_status=raw.http_status,
        retry_after=", ".join(headers.get("retry-after", ()))[:200],
        request_id=request_id,
        body_digest=raw.body_digest,
        body_bytes=raw.body_bytes,
        transport_error=raw.transport_error or "",
    )
    return decision, answer
