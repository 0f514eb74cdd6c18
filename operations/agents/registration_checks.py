"""Checking a registration whole: every problem with the request named at once (RegistrationError),
nothing written, or the registration as the lifecycle will write it (`lifecycle.registration.NewOperation`).
operations/agents/registration.py writes what passes, for every door (API, MCP, `manage.py watch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from operations.agents import job_ids
from operations.lifecycle.registration import NewOperation
from operations.models import Agent, ProviderProfile
from operations.providers import origins as provider_origins
from operations.vocabulary import CONTROL_CHARACTERS, ONE_LINE_CONTROL_CHARACTERS

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


def _check_job_id(profile: ProviderProfile, job_id: object) -> FieldProblem | None:
    if not isinstance(job_id, str) or not job_id.strip():
        return FieldProblem("provider_job_id", "invalid_provider_job_id", "must be a non-empty string")
    if len(job_id) > JOB_ID_MAX:
        return FieldProblem("provider_job_id", "invalid_provider_job_id", f"longer than {JOB_ID_MAX} characters")
    if ONE_LINE_CONTROL_CHARACTERS.search(job_id):
        return FieldProblem("provider_job_id", "invalid_provider_job_id", "contains forbidden characters")
    # It fills the profile's {job_id}, one path segment: "..", "a/b" or "%2F" would reach another path.
    segment = provider_origins.job_id_problem(job_id)
    if segment is not None:
        return FieldProblem("provider_job_id", "invalid_provider_job_id", segment)
    if not job_ids.matches(pattern=profile.job_id_pattern, job_id=job_id):
        return FieldProblem(
            "provider_job_id",
            "invalid_provider_job_id",
            f"does not match the {profile.slug} job id pattern {profile.job_id_pattern}",
        )
    return None


def check_text(name: str, value: object, *, limit: int) -> FieldProblem | None:
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


def _check_business_deadline(value: datetime | None, *, now: datetime) -> FieldProblem | None:
    if value is None:
        return None
    if value.tzinfo is None:
        return FieldProblem("business_deadline", "invalid_field", "must carry a time zone offset")
    if value <= now:
        return FieldProblem("business_deadline", "invalid_field", "must be in the future")
    return None


def _check_budget(budget: object) -> FieldProblem | None:
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int)
        or not 1 <= budget <= settings.OPERATION_MAX_STATUS_REQUESTS
    ):
        return FieldProblem(
            "max_status_requests",
            "invalid_field",
            f"must be an integer from 1 to {settings.OPERATION_MAX_STATUS_REQUESTS}",
        )
    return None


def check_registration(
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
) -> NewOperation:
    """The registration as the lifecycle will write it, or RegistrationError listing every problem."""
    now = timezone.now()
    profile = ProviderProfile.objects.filter(slug=provider_slug).first() if isinstance(provider_slug, str) else None
    if profile is None:
        raise RegistrationError(
            [FieldProblem("provider", "unknown_provider", f"no provider {str(provider_slug)[:64]!r}")]
        )
    deadline = deadline_at or now + timedelta(seconds=profile.default_deadline_s)
    budget = profile.default_max_status_requests if max_status_requests is None else max_status_requests
    checked = (
        _check_job_id(profile, provider_job_id),
        check_text("purpose", purpose, limit=PURPOSE_MAX),
        check_text("request_fingerprint", request_fingerprint, limit=200),
        _check_metadata(metadata if metadata is not None else {}),
        _check_deadline(deadline, now=now),
        _check_business_deadline(business_deadline_at, now=now),
        _check_budget(budget),
    )
    problems = [problem for problem in checked if problem is not None]
    if problems:
        raise RegistrationError(problems)
    return NewOperation(
        profile=profile,
        provider_job_id=provider_job_id,
        registered_by=registered_by,
        agent=agent,
        purpose=purpose,
        deadline_at=deadline,
        business_deadline_at=business_deadline_at,
        max_status_requests=budget,
        request_fingerprint=request_fingerprint,
        callback_url=callback_url,
        metadata=metadata or {},
        now=now,
    )
