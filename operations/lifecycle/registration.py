"""A checked registration becomes an operation, due for its first poll now, with its first Authorization
and its `operation.registered` entry, in one transaction (before any poll can see it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from ulid import ULID

from operations.audit import entries as audit
from operations.models import Agent, Authorization, Operation, ProviderAccount, ProviderProfile
from operations.providers.origins import watch_key
from operations.vocabulary import NOT_DONE_STATUSES


@dataclass(frozen=True)
class NewOperation:
    """Everything a registration writes, already checked (operations.agents.registration_checks.check_registration)."""

    profile: ProviderProfile
    provider_job_id: str
    registered_by: str  # "agent:<name>" or "operator:<name>"
    deadline_at: datetime
    max_status_requests: int
    now: datetime
    agent: Agent | None = None
    purpose: str = ""
    business_deadline_at: datetime | None = None
    request_fingerprint: str = ""
    callback_url: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def new_operation_id() -> str:
    return f"op_{ULID()}"


def register(*, new: NewOperation) -> Operation:
    profile, now = new.profile, new.now
    transport_budget = profile.default_max_transport_failures
    with transaction.atomic():
        ProviderAccount.objects.get_or_create(name=profile.account)
        operation = Operation.objects.create(
            id=new_operation_id(),
            agent=new.agent,
            registered_by=new.registered_by,
            provider=profile,
            account=profile.account,
            provider_job_id=new.provider_job_id,
            watch_key=watch_key(
                credential_env=profile.credential_env, status_url=profile.status_url, job_id=new.provider_job_id
            ),
            request_fingerprint=new.request_fingerprint,
            purpose=new.purpose,
            metadata=new.metadata,
            callback_url=new.callback_url,
            deadline_at=new.deadline_at,
            business_deadline_at=new.business_deadline_at,
            max_status_requests=new.max_status_requests,
            max_transport_failures=transport_budget,
            next_poll_at=now,
            created_at=now,
            updated_at=now,
        )
        Authorization.objects.create(
            operation=operation,
            number=1,
            kind=Authorization.Kind.INITIAL,
            granted_by_label=new.registered_by,
            granted_at=now,
            deadline_at=new.deadline_at,
            max_status_requests=new.max_status_requests,
            max_transport_failures=transport_budget,
        )
        audit.append(
            entry_type="operation.registered",
            actor=registrant_actor(registered_by=new.registered_by),
            operation_id=operation.pk,
            data={
                "provider": profile.slug,
                "provider_job_id": new.provider_job_id,
                "account": profile.account,
                "purpose": new.purpose,
                "registered_by": new.registered_by,
                "deadline": audit.iso(new.deadline_at),
                "business_deadline": audit.iso(new.business_deadline_at),
                "max_requests": new.max_status_requests,
                "max_transport_failures": transport_budget,
                "next_poll_at": audit.iso(now),
            },
            at=now,
        )
    return operation


def rekey_watches(*, profile: ProviderProfile) -> int:
    """A profile's credential variable or status URL changed: its live operations' watch keys follow,
    so the database's one-watch rule holds for the jobs they now reach. Call inside the transaction
    that saved the profile (the caller checked `selectors.watch_clashes`; a clash that raced in
    raises IntegrityError and rolls the change back). Returns how many keys changed."""
    changed = 0
    live = Operation.objects.filter(provider=profile, status__in=sorted(NOT_DONE_STATUSES))
    for pk, job_id in live.values_list("pk", "provider_job_id"):
        key = watch_key(credential_env=profile.credential_env, status_url=profile.status_url, job_id=job_id)
        changed += Operation.objects.filter(pk=pk).exclude(watch_key=key).update(watch_key=key)
    return changed


def registrant_actor(*, registered_by: str) -> dict[str, str]:
    kind, _, name = registered_by.partition(":")
    return {"kind": kind or "operator", "id": name or registered_by}
