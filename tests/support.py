"""Test support shared by conftest.py and test modules (one module object, so one guard state)."""

from __future__ import annotations

import base64
import logging
import os
import uuid
from datetime import UTC, datetime
from urllib.parse import quote, quote_plus

from django.db import connection
from django.utils import timezone

from operations.cards.signin import PASSWORD, SignIn

# A credential that must never appear in any response, log record, stored row, email or error
# text: not as is, and not in the forms a provider echoing it might use (CANARY_FORMS).
CANARY = "canary-secret-7f3e9a1c55d24b08"
# The notification secrets, guarded the same way: a PagerDuty routing key, the secret part of a
# Slack webhook URL, the Slack app's signing secret and bot token (planted in tests/conftest.py),
# the signature of a Teams Workflows URL.
CANARY_PD_KEY = "canary-pdkey-3b9d0e6f41a27c58"
CANARY_SLACK_HOOK = "canary-slackhook-8e21c4a9d07f3b66"
CANARY_SLACK_SECRET = "canary-slacksign-5c0a7e93b1d84f22"
CANARY_SLACK_BOT = "xoxb-canary-slackbot-2f6e8d1a9c3b5704"
CANARY_TEAMS_SIG = "canary-teamssig-6d1f0b8e27c94a53"
CANARY_PD_WEBHOOK = "canary-pdwebhook-9a4c2e7f18d36b05"
CANARIES = (
    CANARY,
    CANARY_PD_KEY,
    CANARY_SLACK_HOOK,
    CANARY_SLACK_SECRET,
    CANARY_SLACK_BOT,
    CANARY_TEAMS_SIG,
    CANARY_PD_WEBHOOK,
)


def _encoded(value: str) -> set[str]:
    raw = value.encode()
    standard, url_safe = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    return {value, quote(value, safe=""), quote_plus(value), standard.rstrip("="), url_safe.rstrip("=")}


# Unpadded base64 is a prefix of the padded form, so it finds both.
CANARY_FORMS = tuple(sorted({form for canary in CANARIES for form in _encoded(canary) | _encoded(f"Bearer {canary}")}))
_CANARY_BYTES = tuple(form.encode() for form in CANARY_FORMS)


def has_canary(data: str | bytes) -> bool:
    """Whether `data` holds the canary in any of CANARY_FORMS."""
    if isinstance(data, bytes):
        return any(form in data for form in _CANARY_BYTES)
    return any(form in data for form in CANARY_FORMS)


T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)

# The example provider of the profile tests, and the credential variables the tests send to a fake
# provider (docs/DESIGN.md section 2: a credential goes only to the origins its variable is bound to).
EXAMPLE_ORIGIN = "https://api.acme.test"
EXAMPLE_CREDENTIALS = ("PROVIDER_ACME_TOKEN", "PROVIDER_ACME_EU_TOKEN", "PROVIDER_OTHER_TOKEN")
FAKE_CREDENTIALS = ("PROVIDER_FAKE_TOKEN", "PROVIDER_PEM_KEY", "PROVIDER_ODD_TOKEN", "PROVIDER_SPACED_TOKEN")


def provider_origins_value(fake_provider_url: str | None = None) -> str:
    """PROVIDER_CREDENTIAL_ORIGINS for the tests: the example provider's variables, and the fake
    provider's once it listens."""
    entries = [f"{name}={EXAMPLE_ORIGIN}" for name in EXAMPLE_CREDENTIALS]
    if fake_provider_url:
        entries += [f"{name}={fake_provider_url}" for name in FAKE_CREDENTIALS]
    return ";".join(entries)


def bind_provider_origins(fake_provider_url: str | None = None) -> None:
    """Bind the tests' credentials (and allow the fake provider to profiles without one), in this
    process's settings and in the environment of the processes the tests start."""
    from django.conf import settings

    value = provider_origins_value(fake_provider_url)
    settings.PROVIDER_CREDENTIAL_ORIGINS = value
    os.environ["PROVIDER_CREDENTIAL_ORIGINS"] = value
    allowed = [fake_provider_url] if fake_provider_url else []
    settings.PROVIDER_ALLOWED_ORIGINS = allowed
    os.environ["PROVIDER_ALLOWED_ORIGINS"] = ",".join(allowed)


def job_id(scenario: str, **params: object) -> str:
    """A unique scenario job id, e.g. job_id("slow_success", polls=3)."""
    parts = [scenario, *(f"{key}={value}" for key, value in params.items()), f"id={uuid.uuid4().hex[:12]}"]
    return "__".join(parts)


class _CanaryLogHandler(logging.Handler):
    """Sees every log record raw (before redaction) and remembers any that carry the canary."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.leaks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken record must not break the suite
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += str(record.exc_info[1])
        if has_canary(text):
            self.leaks.append(f"{record.name}: {text[:200]}")


canary_log_handler = _CanaryLogHandler()


def canary_rows() -> list[str]:
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    from operations.models import (
        AuditEntry,
        CallbackDelivery,
        Decision,
        Escalation,
        NotificationDelivery,
        Operation,
        PolicyRun,
        PolicyTarget,
        SlackRefusal,
        StatusCheck,
    )

    found = []
    try:
        models = (
            Operation,
            StatusCheck,
            Escalation,
            Decision,
            CallbackDelivery,
            PolicyTarget,
            PolicyRun,
            NotificationDelivery,
            SlackRefusal,
        )
        for model in models:
            for row in model.objects.all().values():
                if has_canary(repr(row)):
                    found.append(f"{model.__name__} row")
        for body in AuditEntry.objects.values_list("body", flat=True):
            if has_canary(bytes(body)):
                found.append("AuditEntry body")
        # Tasks waiting in the queue: their arguments, signed and pickled.
        for payload in OrmQ.objects.values_list("payload", flat=True):
            if has_canary(repr(SignedPackage.loads(payload))):
                found.append("queued task")
    except Exception:  # the test's own transaction may be unusable; its failure shows
        connection.close_if_unusable_or_obsolete()
    return found


def canary_emails() -> list[str]:
    """Emails sent in this test (Django's test outbox) whose subject or any body holds the canary."""
    from django.core import mail

    found = []
    for message in getattr(mail, "outbox", []):
        texts = [message.subject, message.body, *(content for content, _ in getattr(message, "alternatives", []))]
        if any(has_canary(str(text)) for text in texts):
            found.append(f"email {message.subject!r}")
    return found


def signed_in_now() -> SignIn:
    """A password sign-in just now: what a session holds right after its person signed in (fresh
    enough for decisions that cannot be undone)."""
    return SignIn(method=PASSWORD, at=timezone.now())


def run_like_the_dispatcher(clock, rng, *, until: datetime) -> None:
    """Poll whichever operation is due next (or reaches its deadline), moving the injected clock to
    that time, until nothing is due before `until`: the demo's first minutes without processes."""
    from operations.models import Operation
    from operations.polls.controller import poll_once
    from operations.vocabulary import POLLABLE_STATUSES

    for _ in range(1000):
        due = [
            (min(op.next_poll_at or op.deadline_at, op.deadline_at), op)
            for op in Operation.objects.filter(status__in=sorted(POLLABLE_STATUSES))
        ]
        if not due:
            return
        when, op = min(due, key=lambda item: item[0])
        if when > until:
            return
        if when > timezone.now():
            clock.move_to(when, tick=False)
        poll_once(operation_id=op.pk, fence=op.fence, rng=rng)


def readme_shell_blocks(text: str) -> dict[str, list[str]]:
    """The README's ```sh blocks by the heading above them (a heading may hold several)."""
    import re

    blocks: dict[str, list[str]] = {}
    heading = ""
    for part in re.split(r"^(#+ .*|```sh\n(?:.*\n)*?```)$", text, flags=re.M):
        if part.startswith("#"):
            heading = part.lstrip("#").strip()
        elif part.startswith("```sh"):
            blocks.setdefault(heading, []).append(part[len("```sh\n") : -len("```")])
    return blocks
