"""Registering an operation: the request is checked whole (every problem named, nothing written:
operations/agents/registration_checks.py), then the lifecycle writes it (`lifecycle.registration.register`).
Agents' registrations add replay: the same Idempotency-Key, or the same live job, answers with the
operation already registered.

The API, the MCP server and `manage.py watch` all register through `operation_register` /
`operation_register_for_agent`, so each door applies the same rules.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from operations.agents.registration_checks import FieldProblem, RegistrationError, check_registration
from operations.audit import entries as audit
from operations.callbacks.targets import callback_url_problem
from operations.lifecycle.registration import register
from operations.limits import quotas
from operations.models import Agent, IdempotencyKey, Operation, ProviderProfile
from operations.selectors import live_watches, profile_watch_key

JOB_ALREADY_WATCHED = "job_already_watched"
# The same words whoever watches the job and however: nothing to learn about the other watch.
JOB_ALREADY_WATCHED_MESSAGE = (
    "This provider job is already being watched by another client, and pollerdash lets one client watch a job "
    "at a time; register it after that watch ends, or ask the pollerdash operator"
)


def operation_register(*, charge_quotas: bool = False, **request: object) -> Operation:
    """Check a registration (the keyword arguments of `check_registration`) and write it.

    Raises RegistrationError listing every problem; nothing is written unless the whole
    registration is valid. The operation is due for its first poll now. An agent is refused a job
    another client watches (OperationConflict `job_already_watched`); with `charge_quotas` the
    agent's quotas are checked and charged too (operations.limits.quotas.QuotaExceeded).
    """
    # The keyword arguments are the API's validated request, typed there.
    new = check_registration(**request)  # type: ignore[arg-type]
    with transaction.atomic():
        agent = new.agent
        if agent is not None and _watched_by_another(agent=agent, profile=new.profile, job_id=new.provider_job_id):
            raise OperationConflict(JOB_ALREADY_WATCHED, JOB_ALREADY_WATCHED_MESSAGE)
        if charge_quotas and agent is not None:
            quotas.charge_registration(agent=agent, now=new.now)
        return register(new=new)


def _watched_by_another(*, agent: Agent, profile: ProviderProfile, job_id: str) -> bool:
    """Whether anyone else — another agent, or an operator — watches the provider job this profile
    reaches for `job_id`, under any profile or account label (the database's unique index on
    Operation.watch_key settles two registrations at once)."""
    key = profile_watch_key(profile=profile, job_id=job_id)
    return any(op.agent_id != agent.pk for op in live_watches(key=key, job_id=job_id))


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


def _watches_of(request: AgentRegistration) -> list[Operation]:
    """Live watches of the provider job the request names, under any profile that reaches it."""
    profile = (
        ProviderProfile.objects.filter(slug=request.provider).first() if isinstance(request.provider, str) else None
    )
    if profile is None or not isinstance(request.provider_job_id, str):
        return []
    key = profile_watch_key(profile=profile, job_id=request.provider_job_id)
    return live_watches(key=key, job_id=request.provider_job_id)


def _live_operation(*, agent: Agent, request: AgentRegistration) -> Operation | None:
    """The agent's own live watch of this provider job, under any profile that reaches it."""
    return next((op for op in _watches_of(request) if op.agent_id == agent.pk), None)


def _live_elsewhere(request: AgentRegistration) -> bool:
    return bool(_watches_of(request))


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
    - the same agent and provider job (what the provider sees: credential variable, status-URL
      origin, job id) while that operation is not done answers with it when the request matches
      and is refused (`operation_exists`) when it does not;
    - a job another client watches is refused (`job_already_watched`), and a new operation beyond
      the agent's quotas too (operations.limits.quotas.QuotaExceeded); replays never count against them.
    Nothing is written when the request is refused.
    """
    _check_callback_url(request)
    if idempotency_key is not None:
        answered = _claim_idempotency_key(agent=agent, key=idempotency_key, request_hash=request.fingerprint())
        if answered is not None:
            return answered
    try:
        live = _live_operation(agent=agent, request=request)
        if live is not None:
            outcome = _replay_or_conflict(live, request)
        else:
            outcome = _register_new(agent=agent, request=request, idempotency_key=idempotency_key)
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


def _check_callback_url(request: AgentRegistration) -> None:
    if request.callback_url is not None:
        problem = callback_url_problem(request.callback_url)
        if problem is not None:
            raise RegistrationError(
                [FieldProblem("callback.url", "callback_url_rejected", f"the callback URL {problem}")]
            )


def _register_new(*, agent: Agent, request: AgentRegistration, idempotency_key: str | None) -> RegisterOutcome:
    """A registration with no live watch of the job by this agent: written, its key pointed at it."""
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
        return RegisterOutcome(operation=op, replayed=False)
    except IntegrityError:
        # A concurrent registration of the same job won the partial unique constraint:
        # this agent's own (replay or conflict) or another agent's (refused).
        live = _live_operation(agent=agent, request=request)
        if live is None:
            if _live_elsewhere(request):
                raise OperationConflict(JOB_ALREADY_WATCHED, JOB_ALREADY_WATCHED_MESSAGE) from None
            raise
        return _replay_or_conflict(live, request)
