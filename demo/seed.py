"""Demo data: logins, provider profiles pointing at the local fake provider, and live scenarios.

Every scenario is a real operation against the fake provider (the job id picks its behaviour), so
within about two minutes of `make demo` the dashboard shows jobs finishing and jobs stopping for
each escalation reason, all driven by the real dispatcher and workers.
"""

from __future__ import annotations

import os
import secrets
import tomllib
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from demo.receivers import email_of
from operations.agents.identities import agent_authenticate, agent_token_issue
from operations.agents.registration import operation_register
from operations.models import Escalation, Operation
from operations.notify.store import load_policies_file, policies_save
from operations.people import one_change
from operations.profiles import parse_profiles, profiles_apply

DEMO_PROFILES = Path(__file__).resolve().parent.parent / "demo" / "profiles.toml"
DEMO_POLICIES = Path(__file__).resolve().parent.parent / "demo" / "policies.toml"
FAKE_DEFAULT_URL = "http://127.0.0.1:8765"
DEMO_REGISTERED_BY = "operator:demo"


@dataclass(frozen=True)
class Scenario:
    provider: str
    job: str
    purpose: str
    deadline_s: int | None = None
    max_requests: int | None = None
    business_deadline_s: int | None = None
    # What a newcomer should see: the status it ends in, or the escalation reason of its card.
    expect: str = ""
    metadata: dict[str, str] | None = None


# Every escalation reason is reached within about two minutes of `make demo` (the slowest,
# rate_limited, spends its three transport failures on 429s 30 s apart), so a new user finds real
# cards to decide; a few jobs simply finish, to show what "done" looks like.
SCENARIOS = (
    Scenario(
        "fake-export",
        "slow_success__polls=4",
        "Nightly revenue export for the finance dashboard",
        600,
        expect="succeeded",
    ),
    Scenario(
        "fake-export",
        "partial__total=100__failed=3",
        "Batch of 100 invoice PDFs for customer Acme",
        600,
        expect="partially_succeeded",
        metadata={"customer": "acme", "batch": "2026-12"},
    ),
    Scenario(
        "fake-export", "late_failure__polls=3", "Quarterly usage report (CSV) for the board pack", 600, expect="failed"
    ),
    Scenario(
        "fake-export",
        "never_finishes",
        "Transcript of the 14:00 incident bridge call",
        90,
        100,
        100,
        expect="deadline_exceeded",
        metadata={"ticket": "INC-2041"},
    ),
    Scenario(
        "fake-export",
        "never_finishes",
        "Re-index of the search corpus",
        1800,
        4,
        3600,
        expect="request_budget_exhausted",
    ),
    Scenario(
        "fake-export",
        "rate_limited_no_hint",
        "Image thumbnails for catalogue import",
        900,
        business_deadline_s=1200,
        expect="rate_limited",
    ),
    Scenario(
        "fake-export",
        "unknown_state__value=needs_payment",
        "Translation of the onboarding guide (FR, DE)",
        expect="unknown_state",
    ),
    Scenario("fake-export", "auth_revoked", "Customer churn model scoring run", expect="authorization_denied"),
    Scenario(
        "fake-export",
        "flaky_5xx__pattern=500.502.503",
        "Data warehouse snapshot for analytics",
        expect="provider_failure",
    ),
    Scenario(
        "fake-export", "succeeded_no_result", "Audio summary of the weekly all-hands", expect="integration_failure"
    ),
    Scenario(
        "fake-gated",
        "slow_success__polls=2",
        "Payroll export (needs approval for every check)",
        expect="per_call_approval",
    ),
    # The result stops being useful (a release window closes) long before the technical bounds run
    # out: on-call is warned 45 s ahead (the profile's business_deadline_warning_s), then polling
    # stops at the business deadline and a card asks whether the result is still wanted.
    Scenario(
        "fake-export",
        "never_finishes",
        "Deployment validation for the 15:00 release window",
        900,
        100,
        75,
        expect="business_deadline_passed",
    ),
    # Deadline cards whose provider can cancel (confirmed) and one that cannot (405): try "cancel".
    Scenario(
        "fake-export",
        "cancel_ok",
        "Video render of the product launch teaser",
        60,
        100,
        1800,
        expect="deadline_exceeded",
    ),
    Scenario(
        "fake-export",
        "cancel_unsupported",
        "Legacy mainframe extract (cancel not supported)",
        75,
        100,
        expect="deadline_exceeded",
    ),
)


DEMO_ACTOR = {"kind": "system", "id": "demo"}


def ensure_roles() -> dict[str, Group]:
    return {name: Group.objects.get_or_create(name=name)[0] for name in ("viewer", "responder")}


def ensure_user(*, username: str, group: Group, superuser: bool = False) -> str:
    """Create the login, or give an existing one a new password; return the password.

    A local demo: every `make demo` prints working logins, so the passwords are new each run. Each
    login has an address (mail goes to files under var/mail; the demo's Slack knows the same
    address), so hand-overs and second-responder messages reach a person."""
    users = get_user_model()
    password = secrets.token_urlsafe(12)
    # One `user.created` entry with its role, attributed to the demo.
    with transaction.atomic(), one_change(DEMO_ACTOR):
        user = users.objects.filter(username=username).first()
        if user is None:
            if superuser:
                user = users.objects.create_superuser(username=username, password=password, email=email_of(username))
            else:
                user = users.objects.create_user(username=username, password=password, email=email_of(username))
            user.groups.add(group)
        else:
            user.set_password(password)
            user.email = user.email or email_of(username)
            user.save(update_fields=["password", "email"])
    return password


def ensure_demo_token(*, path: Path, name: str = "demo-agent") -> str:
    """The demo agent's API token: the one saved in `path` while it still works, else a new one
    (saved there, readable by its owner only), so scripts keep working across runs."""
    if path.exists():
        token = path.read_text().strip()
        agent = agent_authenticate(token=token)
        if agent is not None and agent.name == name:
            return token
    token = agent_token_issue(name=name).token
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def ensure_demo_policy(*, path: Path = DEMO_POLICIES) -> list[str]:
    """The demo's escalation policy, made the default: email, the demo's Slack and PagerDuty.

    It needs what `make demo` configures (the demo Slack app's bot token); without it nothing is
    written and cards follow whatever policy the database already has."""
    if not settings.SLACK_BOT_TOKEN:
        return []
    return [
        f"{result.name}: {result.change}"
        for result in policies_save(
            policies=load_policies_file(path=path), actor={"kind": "operator", "id": "demo"}, default=True
        )
    ]


def load_demo_profiles(*, provider_url: str, path: Path = DEMO_PROFILES) -> list[str]:
    """Load the demo profiles, re-pointed at the fake provider's actual address before they are checked:
    their credential may be sent only there (PROVIDER_CREDENTIAL_ORIGINS, set by `make demo`)."""
    with path.open("rb") as handle:
        document = tomllib.load(handle)
    specs = parse_profiles(document=_repoint(document, provider_url))
    return [
        f"{result.slug}: {result.outcome}"
        for result in profiles_apply(specs=specs, actor={"kind": "operator", "id": "demo"})
    ]


def _repoint(document: dict[str, Any], provider_url: str) -> dict[str, Any]:
    providers = [
        {
            key: value.replace(FAKE_DEFAULT_URL, provider_url.rstrip("/"))
            if key in ("status_url", "cancel_url", "console_url") and isinstance(value, str)
            else value
            for key, value in entry.items()
        }
        if isinstance(entry, dict)
        else entry
        for entry in document.get("provider", [])
    ]
    return {**document, "provider": providers}


def seed_scenarios(*, pause: Callable[[], object] | None = None) -> list[Operation]:
    """Register every scenario: in one transaction, or with `pause` one at a time, pausing between.

    The running demo registers them one by one, as agents would: fourteen first polls falling
    due in the same instant would queue behind the demo's two workers, and /system/ would then
    warn of a dispatch lag the demo itself caused."""
    now = timezone.now()
    batch = uuid.uuid4().hex[:6]
    created = []
    with transaction.atomic() if pause is None else nullcontext():
        for index, scenario in enumerate(SCENARIOS):
            if pause is not None and index:
                pause()
                now = timezone.now()
            created.append(
                operation_register(
                    provider_slug=scenario.provider,
                    provider_job_id=f"{scenario.job}__id=demo{batch}{index}",
                    registered_by=DEMO_REGISTERED_BY,
                    purpose=scenario.purpose,
                    deadline_at=now + timedelta(seconds=scenario.deadline_s) if scenario.deadline_s else None,
                    max_status_requests=scenario.max_requests,
                    business_deadline_at=(
                        now + timedelta(seconds=scenario.business_deadline_s) if scenario.business_deadline_s else None
                    ),
                    metadata=dict(scenario.metadata or {}),
                )
            )
    return created


def scenarios_seeded() -> bool:
    return Operation.objects.filter(registered_by=DEMO_REGISTERED_BY).exists()


def scenarios_waiting() -> list[Scenario]:
    """The scenarios whose operation has not yet reached what the scenario shows (its status or
    its card's reason): an empty list once the inbox holds every card the demo promises."""
    reached = {
        (purpose, value)
        for purpose, status, reason in Operation.objects.filter(registered_by=DEMO_REGISTERED_BY)
        .values_list("purpose", "status", "escalations__reason")
        .distinct()
        for value in (status, reason)
        if value
    }
    return [s for s in SCENARIOS if (s.purpose, s.expect) not in reached]


def open_cards() -> int:
    return Escalation.objects.filter(state="open").count()
