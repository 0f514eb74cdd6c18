"""Writes on operations outside the poll itself: registration, acknowledgement, agent cancel.

Every function here is keyword-only, runs in one transaction, and appends its audit entry last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from ulid import ULID

from operations import audit
from operations.models import Agent, Authorization, Operation, ProviderAccount, ProviderProfile

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
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
    if job_id in {".", ".."} or _CONTROL.search(job_id) or "\r" in job_id or "\n" in job_id:
        return FieldProblem("provider_job_id", "invalid_provider_job_id", "contains forbidden characters")
    try:
        matched = re.fullmatch(profile.job_id_pattern, job_id) is not None
    except re.error:
        matched = False
    if not matched:
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
    if _CONTROL.search(value):
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
) -> Operation:
    """Persist a new watched operation with its first Authorization, due for its first poll now.

    Validates everything first and raises RegistrationError listing every problem; nothing is
    written unless the whole registration is valid.
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


def _actor(registered_by: str) -> dict[str, str]:
    kind, _, name = registered_by.partition(":")
    return {"kind": kind or "operator", "id": name or registered_by}
