"""Fixtures for escalation tests: people with roles, and operations stopped for a human by the real controller."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from operations.models import Escalation, Operation
from tests.support import job_id


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: object) -> None:
    # Real logins, but without 1,000,000 PBKDF2 rounds per test user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _export_slots_freed_after_each_test(monkeypatch: pytest.MonkeyPatch, django_db_blocker: object) -> Iterator[None]:
    # A server closes every response; the test client closes a streamed one only once it is read
    # to the end. Slots of exports a test left unread are freed here, as a server would.
    from escalations import export_slots

    taken: list[export_slots.Slot] = []
    take = export_slots.take

    def recording(**kwargs: object) -> export_slots.Slot:
        slot = take(**kwargs)
        taken.append(slot)
        return slot

    monkeypatch.setattr(export_slots, "take", recording)
    yield
    with django_db_blocker.unblock():
        for slot in taken:
            slot.release()


@pytest.fixture
def make_user(db: None) -> Callable[..., object]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    def make(username: str, role: str | None = "responder", **extra: object) -> object:
        user = get_user_model().objects.create_user(username=username, password="pw-" + username, **extra)
        if role:
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        return user

    return make


@pytest.fixture
def alice(make_user: Callable[..., object]) -> object:
    return make_user("alice")


@pytest.fixture
def bob(make_user: Callable[..., object]) -> object:
    return make_user("bob")


@pytest.fixture
def stopped(
    make_operation: Callable[..., Operation], drive: Callable[..., list[str]], clock: object
) -> Callable[..., Escalation]:
    """An operation driven by the real controller against the fake provider until a human is needed."""

    def make(scenario: str = "never_finishes", *, provider: object | None = None, **kwargs: object) -> Escalation:
        params = kwargs.pop("params", {})
        # The shortest deadline registration allows: two or three real polls, then the deadline.
        kwargs.setdefault("deadline_at", timezone.now() + timedelta(seconds=11))
        kwargs.setdefault("max_status_requests", 100)
        op = make_operation(job_id(scenario, **params), provider=provider, **kwargs)
        drive(op)
        return Escalation.objects.select_related("operation").get(operation=op, state=Escalation.State.OPEN)

    return make


@pytest.fixture
def signing_key(tmp_path: object, settings: object) -> object:
    """A real Ed25519 audit signing key, so exports can close with a signed checkpoint."""
    from operations.audit import checkpoints

    path = tmp_path / "audit-signing-key.pem"
    key = checkpoints.generate_key_file(path)
    settings.AUDIT_SIGNING_KEY_FILE = str(path)
    return key


@pytest.fixture
def viewer(make_user: Callable[..., object]) -> object:
    return make_user("vera", role="viewer")


# --- reaching on-call: local receivers, policies, and the dispatcher's and workers' work in-process ----


@pytest.fixture
def fake_pd(settings: object) -> object:
    """A PagerDuty-shaped receiver that checks every Events v2 payload; ONCALL_PD_CANARY is its key."""
    from demo.fakepagerduty import FakePagerDuty
    from tests.support import CANARY_PD_KEY

    receiver = FakePagerDuty(accepted_keys=[CANARY_PD_KEY]).start()
    host = receiver.base_url.removeprefix("http://")
    settings.PAGERDUTY_EVENTS_URL = receiver.url
    settings.NOTIFY_ALLOWED_HOSTS = [*settings.NOTIFY_ALLOWED_HOSTS, host]
    yield receiver
    receiver.stop()


@pytest.fixture
def fake_slack(settings: object, monkeypatch: pytest.MonkeyPatch) -> object:
    """A Slack-shaped receiver (webhooks, response URLs, the Web API); ONCALL_SLACK is a webhook on it."""
    from demo.fakeslack import FakeSlack
    from tests.support import CANARY_SLACK_BOT, CANARY_SLACK_HOOK

    receiver = FakeSlack(bot_token=CANARY_SLACK_BOT).start()
    host = receiver.base_url.removeprefix("http://")
    settings.NOTIFY_ALLOWED_HOSTS = [*settings.NOTIFY_ALLOWED_HOSTS, host]
    settings.SLACK_API_URL = f"{receiver.base_url}/api"
    monkeypatch.setenv("ONCALL_SLACK", receiver.webhook_url(CANARY_SLACK_HOOK))
    yield receiver
    receiver.stop()


@pytest.fixture
def fake_teams(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A Teams Workflows webhook that checks every Adaptive Card message; ONCALL_TEAMS is its URL."""
    from demo.faketeams import FakeTeams
    from tests.support import CANARY_TEAMS_SIG

    receiver = FakeTeams(signature=CANARY_TEAMS_SIG).start()
    host = receiver.base_url.removeprefix("http://")
    settings.NOTIFY_ALLOWED_HOSTS = [*settings.NOTIFY_ALLOWED_HOSTS, host]
    monkeypatch.setenv("ONCALL_TEAMS", receiver.webhook_url())
    yield receiver
    receiver.stop()


@pytest.fixture
def make_policy(db: None) -> Callable[..., object]:
    """Save a policy through the store (validated whole, as loadpolicies and the admin do)."""
    from operations.notify import store

    def make(name: str, *levels: tuple[int, list[dict[str, str]]], repeat: int = 0, default: bool = False) -> object:
        raw = {
            "name": name,
            "repeat_last_level": repeat,
            "levels": [{"wait_s": wait, "targets": targets} for wait, targets in levels],
        }
        [policy] = store.validate_all([raw])
        store.policies_save(policies=[policy], actor={"kind": "operator", "id": "test"}, default=default or None)
        return policy

    return make


@pytest.fixture
def acknowledge() -> Callable[[Escalation, object], None]:
    """A responder acknowledges the card, through the lifecycle (as the card's button does)."""
    from operations.lifecycle import humans

    def ack(escalation: Escalation, user: object) -> None:
        humans.acknowledge(escalation_id=escalation.pk, user=user, now=timezone.now())

    return ack
