"""Writes on operations outside the poll itself: registration, acknowledgement, agent cancel.

Every function here is keyword-only, runs in one transaction, and appends its audit entry last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from ulid import ULID

from operations import audit, job_ids, quotas
from operations.models import Agent, Authorization, IdempotencyKey, Operation, ProviderAccount, ProviderProfile
from operations.selectors import job_watched_elsewhere, live_watches, provider_account
from operations.vocabulary import CONTROL_CHARACTERS, ONE_LINE_CONTROL_CHARACTERS, Status

PURPOSE_MAX = 280
METADATA_MAX_KEYS = 16
METADATA_KEY_MAX = 40
METADATA_VALUE_MAX = 500
JOB_ID_MAX = 200


@dataclass(frozen=True)
class FieldProblem:
    field: str
    code: str
    message: str


@dataclass
class RegistrationError(Exception):
    """Registration input was refused; nothing was written. Each problem names its field."""

    problems: list[FieldProblem] = field(default_factory=list)

    def __str__(self) -> str:
        return "; ".join(f"{p.field}: {p.message}" for p in self.problems)


def new_operation_id() -> str:
    return f"op_{ULID()}"


def _check_job_id(profile: ProviderProfile, job_id: object) -> FieldProblem | None:
    if not isinstance(job_id, str) or not job_id.strip():
        return FieldProblem("provider_job_id", "invalid_provider_job_id", "must be a non-empty string")
    if len(job_id) > JOB_ID_MAX:
        return FieldProblem("provider_job_id", "invalid_provider_job_id", f"longer than {JOB_ID_MAX} characters")
    # "." and ".." would be collapsed by URL normalisation into another path on the provider.
    if job_id in {".", ".."} or ONE_LINE_CONTROL_CHARACTERS.search(job_id):
        return FieldProblem("provider_job_id", "invalid_provider_job_id", "contains forbidden characters")
    if not job_ids.matches(pattern=profile.job_id_pattern, job_id=job_id):
        return FieldProblem(
            "provider_job_id",
            "invalid_provider_job_id",
            f"does not match the {profile.slug} job id pattern {profile.job_id_pattern}",
        )
    return None


def _check_text(name: str, value: object, *, limit: int) -> FieldProblem | None:
    if not isinstance(value, str):
        return FieldProblem(name, "invalid_field", "must be a string")
    if len(value) > limit:
        return FieldProblem(name, "invalid_field", f"longer than {limit} characters")
    if CONTROL_CHARACTERS.search(value):
        return FieldProblem(name, "invalid_field", "contains control characters")
    return None


def _check_metadata(value: object) -> FieldProblem | None:
    if not isinstance(value, dict):
        return FieldProblem("metadata", "invalid_field", "must be an object of string values")
    if len(value) > METADATA_MAX_KEYS:
        return FieldProblem("metadata", "invalid_field", f"more than {METADATA_MAX_KEYS} keys")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX:
            return FieldProblem("metadata", "invalid_field", f"keys must be 1-{METADATA_KEY_MAX} characters")
        if CONTROL_CHARACTERS.search(key) or (isinstance(item, str) and CONTROL_CHARACTERS.search(item)):
            return FieldProblem("metadata", "invalid_field", f"{key[:40]!r} contains control characters")
        if not isinstance(item, str) or len(item) > METADATA_VALUE_MAX:
            return FieldProblem(
                "metadata", "invalid_field", f"value of {key[:40]!r} must be a string of at most {METADATA_VALUE_MAX}"
            )
    return None


def _check_deadline(value: datetime, *, now: datetime, name: str = "deadline") -> FieldProblem | None:
    if value.tzinfo is None:
        return FieldProblem(name, "invalid_field", "must carry a time zone offset")
    if value < now + timedelta(seconds=settings.OPERATION_MIN_DEADLINE_S):
        return FieldProblem(
            name, "deadline_in_past", f"must be at least {settings.OPERATION_MIN_DEADLINE_S} s in the future"
        )
    if value > now + timedelta(seconds=settings.OPERATION_MAX_DEADLINE_S):
        return FieldProblem(
            name, "deadline_too_far", f"must be at most {settings.OPERATION_MAX_DEADLINE_S // 86400} days ahead"
        )
    return None


def operation_register(
    *,
    provider_slug: str,
    provider_job_id: str,
    registered_by: str,
    agent: Agent | None = None,
    purpose: str = "",
    deadline_at: datetime | None = None,
    business_deadline_at: datetime | None = None,
    max_status_requests: int | None = None,
    request_fingerprint: str = "",
    callback_url: str = "",
    metadata: dict | None = None,
    charge_quotas: bool = False,
) -> Operation:
    """Persist a new watched operation with its first Authorization, due for its first poll now.

    Validates everything first and raises RegistrationError listing every problem; nothing is
    written unless the whole registration is valid. An agent is refused a job another client
    watches (OperationConflict `job_already_watched`); with `charge_quotas` the agent's quotas are
    checked and charged too (operations.quotas.QuotaExceeded).
    """
    now = timezone.now()
    problems: list[FieldProblem] = []
    profile = ProviderProfile.objects.filter(slug=provider_slug).first() if isinstance(provider_slug, str) else None
    if profile is None:
        raise RegistrationError(
            [FieldProblem("provider", "unknown_provider", f"no provider {str(provider_slug)[:64]!r}")]
        )
    for problem in (
        _check_job_id(profile, provider_job_id),
        _check_text("purpose", purpose, limit=PURPOSE_MAX),
        _check_text("request_fingerprint", request_fingerprint, limit=200),
        _check_metadata(metadata if metadata is not None else {}),
    ):
        if problem is not None:
            problems.append(problem)
    deadline = deadline_at or now + timedelta(seconds=profile.default_deadline_s)
    if (problem := _check_deadline(deadline, now=now)) is not None:
        problems.append(problem)
    if business_deadline_at is not None:
        if business_deadline_at.tzinfo is None:
            problems.append(FieldProblem("business_deadline", "invalid_field", "must carry a time zone offset"))
        elif business_deadline_at <= now:
            problems.append(FieldProblem("business_deadline", "invalid_field", "must be in the future"))
    budget = profile.default_max_status_requests if max_status_requests is None else max_status_requests
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int)
        or not 1 <= budget <= settings.OPERATION_MAX_STATUS_REQUESTS
    ):
        problems.append(
            FieldProblem(
                "max_status_requests",
                "invalid_field",
                f"must be an integer from 1 to {settings.OPERATION_MAX_STATUS_REQUESTS}",
            )
        )
    if problems:
        raise RegistrationError(problems)

    with transaction.atomic():
        if agent is not None and _watched_by_another(agent=agent, account=profile.account, job_id=provider_job_id):
            raise OperationConflict(JOB_ALREADY_WATCHED, JOB_ALREADY_WATCHED_MESSAGE)
        if charge_quotas and agent is not None:
            quotas.charge_registration(agent=agent, now=now)
        ProviderAccount.objects.get_or_create(name=profile.account)
        operation = Operation.objects.create(
            id=new_operation_id(),
            agent=agent,
            registered_by=registered_by,
            provider=profile,
            account=profile.account,
            provider_job_id=provider_job_id,
            request_fingerprint=request_fingerprint,
            purpose=purpose,
            metadata=metadata or {},
            callback_url=callback_url,
            deadline_at=deadline,
            business_deadline_at=business_deadline_at,
            max_status_requests=budget,
            max_transport_failures=profile.default_max_transport_failures,
            next_poll_at=now,
            created_at=now,
            updated_at=now,
        )
        Authorization.objects.create(
            operation=operation,
            number=1,
            kind=Authorization.Kind.INITIAL,
            granted_by_label=registered_by,
            granted_at=now,
            deadline_at=deadline,
            max_status_requests=budget,
            max_transport_failures=profile.default_max_transport_failures,
        )
        audit.append(
            entry_type="operation.registered",
            actor=_actor(registered_by),
            operation_id=operation.pk,
            data={
                "provider": profile.slug,
                "provider_job_id": provider_job_id,
                "account": profile.account,
                "purpose": purpose,
                "registered_by": registered_by,
                "deadline": audit.iso(deadline),
                "business_deadline": audit.iso(business_deadline_at),
                "max_requests": budget,
                "max_transport_failures": profile.default_max_transport_failures,
                "next_poll_at": audit.iso(now),
            },
            at=now,
        )
    return operation


JOB_ALREADY_WATCHED = "job_already_watched"
# The same words whoever watches the job and however: nothing to learn about the other watch.
JOB_ALREADY_WATCHED_MESSAGE = (
    "This provider job is already being watched by another client, and pollerdash lets one client watch a job "
    "at a time; register it after that watch ends, or ask the pollerdash operator"
)


def _watched_by_another(*, agent: Agent, account: str, job_id: str) -> bool:
    # exclude(agent=...) keeps operator watches (no agent): an agent must not take those over either.
    return live_watches(account=account, job_id=job_id).exclude(agent=agent).exists()


def _actor(registered_by: str) -> dict[str, str]:
    kind, _, name = registered_by.partition(":")
    return {"kind": kind or "operator", "id": name or registered_by}


# --- agent API: registration with replay, acknowledgement, agent cancel ------------------------------

IDEMPOTENCY_KEY_TTL = timedelta(days=7)
# A claimed key whose request never finished (a crashed process) is released after this long.
IDEMPOTENCY_CLAIM_STALE = timedelta(seconds=60)


class OperationNotFound(Exception):
    """No such operation for this agent (unknown ids and other agents' ids look the same)."""


@dataclass
class OperationConflict(Exception):
    """The request clashes with the operation's state; `code` is the API problem code."""

    code: str
    message: str
    operation: Operation | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class AgentRegistration:
    """What an agent asked to watch, already type-checked by the API layer."""

    provider: str
    provider_job_id: str
    purpose: str = ""
    deadline_at: datetime | None = None
    business_deadline_at: datetime | None = None
    max_status_requests: int | None = None
    request_fingerprint: str = ""
    # None: no callback. An empty string was sent on purpose and is refused like any bad URL.
    callback_url: str | None = None
    metadata: dict | None = None

    def fingerprint(self) -> str:
        """SHA-256 of the request in a canonical form: equal requests hash alike.

        Plain sorted JSON rather than RFC 8785: the request is not validated yet, and RFC 8785
        refuses integers beyond 2**53 that an agent may well send (and be told off for later).
        """
        import hashlib
        import json

        canonical = json.dumps(
            {
                "provider": self.provider,
                "provider_job_id": self.provider_job_id,
                "purpose": self.purpose,
                "deadline": audit.iso(self.deadline_at),
                "business_deadline": audit.iso(self.business_deadline_at),
                "max_status_requests": self.max_status_requests,
                "request_fingerprint": self.request_fingerprint,
                "callback_url": self.callback_url,
                "metadata": self.metadata or {},
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class RegisterOutcome:
    operation: Operation
    # True when an earlier registration was returned instead of a new one.
    replayed: bool


def _agent_actor(agent: Agent) -> dict[str, str]:
    return {"kind": "agent", "id": agent.name}


def _same_registration(op: Operation, request: AgentRegistration) -> bool:
    """Whether a repeated registration asks for the same watch as the live operation.

    Fields the agent left out are not compared (a default deadline is computed from "now", so two
    identical requests a minute apart would otherwise never match).
    """
    if (
        op.provider.slug != request.provider
        or op.purpose != request.purpose
        or op.request_fingerprint != request.request_fingerprint
        or op.callback_url != (request.callback_url or "")
        or (op.metadata or {}) != (request.metadata or {})
        or op.business_deadline_at != request.business_deadline_at
    ):
        return False
    first = op.authorizations.filter(number=1).first()
    if first is None:
        return False
    if request.deadline_at is not None and first.deadline_at != request.deadline_at:
        return False
    return request.max_status_requests is None or first.max_status_requests == request.max_status_requests


def _live_operation(*, agent: Agent, request: AgentRegistration) -> Operation | None:
    """The agent's own live watch of this job, under any profile of the provider's account."""
    account = provider_account(provider_slug=request.provider)
    if account is None:
        return None
    return (
        live_watches(account=account, job_id=request.provider_job_id).select_related("provider").filter(agent=agent)
    ).first()


def _live_elsewhere(request: AgentRegistration) -> bool:
    account = provider_account(provider_slug=request.provider)
    return account is not None and live_watches(account=account, job_id=request.provider_job_id).exists()


def _replay_or_conflict(op: Operation, request: AgentRegistration) -> RegisterOutcome:
    if _same_registration(op, request):
        return RegisterOutcome(operation=op, replayed=True)
    raise OperationConflict(
        "operation_exists",
        f"Operation {op.pk} already watches {op.provider.slug} job {request.provider_job_id} with different "
        "settings; use that operation (or cancel it first) instead of registering again",
        op,
    )


def _claim_idempotency_key(*, agent: Agent, key: str, request_hash: str) -> RegisterOutcome | None:
    """Claim KEY for this request, or answer from the earlier request that used it."""
    for _ in range(3):
        now = timezone.now()
        try:
            with transaction.atomic():
                IdempotencyKey.objects.create(agent=agent, key=key, request_hash=request_hash)
            return None
        except IntegrityError:
            pass
        existing = IdempotencyKey.objects.select_related("operation__provider").filter(agent=agent, key=key).first()
        if existing is None:
            continue
        expired = existing.created_at < now - IDEMPOTENCY_KEY_TTL
        abandoned = existing.operation_id is None and existing.created_at < now - IDEMPOTENCY_CLAIM_STALE
        if expired or abandoned:
            IdempotencyKey.objects.filter(pk=existing.pk, created_at=existing.created_at).delete()
            continue
        if existing.request_hash != request_hash:
            raise OperationConflict(
                "idempotency_key_reused",
                "This Idempotency-Key was first used with a different request body; use a new key for a new request",
                existing.operation,
            )
        if existing.operation is None:
            raise OperationConflict(
                "idempotency_key_in_flight",
                "The first request with this Idempotency-Key is still being processed; retry in a second",
            )
        return RegisterOutcome(operation=existing.operation, replayed=True)
    raise OperationConflict("idempotency_key_in_flight", "This Idempotency-Key is contended; retry in a second")


def operation_register_for_agent(
    *, agent: Agent, request: AgentRegistration, idempotency_key: str | None = None
) -> RegisterOutcome:
    """Register a watch for an agent, replaying earlier registrations instead of duplicating them.

    - the same Idempotency-Key with the same request answers with the operation it created; with
      another request it is refused (`idempotency_key_reused`);
    - the same (agent, provider account, provider_job_id) while that operation is not done answers
      with it when the request matches and is refused (`operation_exists`) when it does not;
    - a job another client watches is refused (`job_already_watched`), and a new operation beyond
      the agent's quotas too (operations.quotas.QuotaExceeded); replays never count against them.
    Nothing is written when the request is refused.
    """
    from operations.callbacks import callback_url_problem

    if request.callback_url is not None:
        problem = callback_url_problem(request.callback_url)
        if problem is not None:
            raise RegistrationError(
                [FieldProblem("callback.url", "callback_url_rejected", f"the callback URL {problem}")]
            )
    if idempotency_key is not None:
        answered = _claim_idempotency_key(agent=agent, key=idempotency_key, request_hash=request.fingerprint())
        if answered is not None:
            return answered
    try:
        live = _live_operation(agent=agent, request=request)
        if live is not None:
            outcome = _replay_or_conflict(live, request)
        else:
            try:
                with transaction.atomic():
                    op = operation_register(
                        provider_slug=request.provider,
                        provider_job_id=request.provider_job_id,
                        registered_by=f"agent:{agent.name}",
                        agent=agent,
                        purpose=request.purpose,
                        deadline_at=request.deadline_at,
                        business_deadline_at=request.business_deadline_at,
                        max_status_requests=request.max_status_requests,
                        request_fingerprint=request.request_fingerprint,
                        callback_url=request.callback_url or "",
                        metadata=request.metadata,
                        charge_quotas=True,
                    )
                    if idempotency_key is not None:
                        IdempotencyKey.objects.filter(agent=agent, key=idempotency_key).update(operation=op)
                outcome = RegisterOutcome(operation=op, replayed=False)
            except IntegrityError:
                # A concurrent registration of the same job won the partial unique constraint:
                # this agent's own (replay or conflict) or another agent's (refused).
                live = _live_operation(agent=agent, request=request)
                if live is None:
                    if _live_elsewhere(request):
                        raise OperationConflict(JOB_ALREADY_WATCHED, JOB_ALREADY_WATCHED_MESSAGE) from None
                    raise
                outcome = _replay_or_conflict(live, request)
        if idempotency_key is not None and outcome.replayed:
            IdempotencyKey.objects.filter(agent=agent, key=idempotency_key, operation__isnull=True).update(
                operation=outcome.operation
            )
        return outcome
    except BaseException:
        if idempotency_key is not None:
            # Release the claim so a corrected request may use the same key; nothing else was written.
            IdempotencyKey.objects.filter(agent=agent, key=idempotency_key, operation__isnull=True).delete()
        raise


def _agent_operation_locked(*, agent: Agent, operation_id: str) -> Operation:
    op = Operation.objects.select_for_update().select_related("provider").filter(pk=operation_id, agent=agent).first()
    if op is None:
        raise OperationNotFound(operation_id)
    return op


def operation_acknowledge(*, agent: Agent, operation_id: str) -> Operation:
    """The agent has read the outcome: the operation leaves its open list. Idempotent."""
    with transaction.atomic():
        op = _agent_operation_locked(agent=agent, operation_id=operation_id)
        if not op.done:
            raise OperationConflict(
                "operation_not_done",
                f"Operation {op.pk} is {op.status}, not done; acknowledge it only after it finishes",
                op,
            )
        if op.acknowledged_at is not None:
            return op
        now = timezone.now()
        op.acknowledged_at = now
        op.sequence += 1
        op.updated_at = now
        op.save(update_fields=["acknowledged_at", "sequence", "updated_at"])
        audit.append(
            entry_type="operation.acknowledged",
            actor=_agent_actor(agent),
            operation_id=op.pk,
            data={"state": str(op.status)},
            at=now,
        )
    return op


WATCH_CANCELLED = "watch_cancelled"


def operation_cancel_by_agent(*, agent: Agent, operation_id: str, reason: str = "") -> Operation:
    """Stop watching: the operation is `closed` with error.code `watch_cancelled`, at once.

    Where the profile documents a cancel request, it is forwarded to the provider by a worker
    (`operations.tasks.forward_provider_cancel`, enqueued in this transaction), so the agent's call
    never waits on the provider; `cancel_state` shows how far it got. While another live operation
    watches the same job nothing is sent (`not_forwarded`). A repeated cancel answers
    with the same operation; cancelling an operation that ended another way is refused.
    """
    from django_q.tasks import async_task

    from operations.callbacks import EVENT_COMPLETED, record_event

    problem = _check_text("reason", reason, limit=PURPOSE_MAX)
    with transaction.atomic():
        # An unknown id is a 404 whatever the body says; only then is the reason judged.
        op = _agent_operation_locked(agent=agent, operation_id=operation_id)
        if problem is not None:
            raise RegistrationError([problem])
        if op.done:
            if op.status == Status.CLOSED and (op.error or {}).get("code") == WATCH_CANCELLED:
                return op
            raise OperationConflict(
                "operation_already_terminal",
                f"Operation {op.pk} already finished as {op.status}; nothing to cancel",
                op,
            )
        now = timezone.now()
        was = op.status
        # Never for a job another live operation watches: the cancel would end that watch's job too.
        watched_elsewhere = op.provider.has_cancel and job_watched_elsewhere(operation=op)
        forward = op.provider.has_cancel and not watched_elsewhere
        op.status = Status.CLOSED
        op.completed_at = now
        op.next_poll_at = None
        op.result = None
        op.cancel_requested_at = now
        op.cancel_reason = reason
        op.cancel_state = "requested" if forward else "not_forwarded" if watched_elsewhere else "not_documented"
        op.error = {
            "code": WATCH_CANCELLED,
            "message": _watch_cancelled_message(op.cancel_state),
            "provider_error": None,
        }
        op.sequence += 1
        op.updated_at = now
        op.save()
        if was == Status.NEEDS_ATTENTION:
            _supersede_open_escalation(operation=op)
        record_event(operation=op, event_type=EVENT_COMPLETED)
        if forward:
            async_task("operations.tasks.forward_provider_cancel", op.pk, task_name=f"cancel {op.pk}", group="cancels")
        audit.append(
            entry_type="operation.cancelled",
            actor=_agent_actor(agent),
            operation_id=op.pk,
            data={"state": str(op.status), "reason": reason, "cancel_state": op.cancel_state, "http_status": None},
            at=now,
        )
    return op


_CANCEL_NOTES = {
    "requested": "A cancel request is being sent to the provider.",
    "forwarding": "A cancel request is being sent to the provider.",
    "confirmed": "The provider confirmed the cancel.",
    "forwarded": "The provider took the cancel request but did not confirm it, so the job may still run there.",
    "not_supported": "The provider refused the cancel request, so the job may still run there.",
    "failed_to_forward": "The cancel request could not be delivered, so the job may still run at the provider.",
    "not_documented": "The provider documents no cancel request, so the job may still run there.",
    "not_forwarded": "No cancel request was sent: another live watch of this job exists, so it keeps running.",
}


def _watch_cancelled_message(cancel_state: str) -> str:
    """What the agent reads in error.message: it follows the provider's answer to the cancel."""
    note = _CANCEL_NOTES.get(cancel_state, "")
    return f"The agent cancelled the watch; pollerdash stopped polling. {note}".strip()


def _supersede_open_escalation(*, operation: Operation) -> None:
    """The card a human was deciding on no longer applies: the agent ended the watch."""
    from escalations.services import escalation_supersede

    escalation_supersede(operation=operation, reason="the agent cancelled the watch")


def provider_cancel_forward(*, operation_id: str) -> str:
    """Send the provider's documented cancel request for an agent-cancelled operation, once."""
    from operations.provider_cancel import send_provider_cancel

    claimed = Operation.objects.filter(pk=operation_id, cancel_state="requested").update(cancel_state="forwarding")
    if not claimed:
        return "stale"
    op = Operation.objects.select_related("provider").get(pk=operation_id)
    result = send_provider_cancel(operation=op)
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=operation_id)
        now = timezone.now()
        op.cancel_state = result.state
        if (op.error or {}).get("code") == WATCH_CANCELLED:
            op.error = {**op.error, "message": _watch_cancelled_message(result.state)}
        op.sequence += 1
        op.updated_at = now
        op.save(update_fields=["cancel_state", "error", "sequence", "updated_at"])
        audit.append(
            entry_type="operation.cancel_forwarded",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data={
                "cancel_state": result.state,
                "http_status": result.http_status,
                "provider_state": result.provider_state,
                "provider_request_id": result.provider_request_id or None,
                "detail": result.detail[:300] or None,
            },
            at=now,
        )
    return result.state
