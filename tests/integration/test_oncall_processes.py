"""Escalation policies run by real `dispatch_polls` and `qcluster` processes, with a short policy,
counted at local receivers: mail files (the demo's backend), a Slack-shaped webhook receiver and a
PagerDuty-shaped receiver that checks every Events v2 payload and answers as scripted."""

from __future__ import annotations

import email
import email.policy
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.utils import timezone

from demo.fakepagerduty import FakePagerDuty
from demo.fakeslack import FakeSlack
from operations.agents.registration import operation_register
from operations.decisions.services import escalation_decide
from operations.lifecycle import humans
from operations.models import Escalation, NotificationDelivery, Operation, PolicyRun
from tests.integration.support import wait_until
from tests.support import CANARY_PD_KEY, CANARY_SLACK_HOOK, job_id, signed_in_now

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEVEL_WAIT_S = 3
POLICY = f"""
[[policy]]
name = "short"

[[policy.levels]]
wait_s = {LEVEL_WAIT_S}
targets = [{{ user = "alice" }}, {{ slack_webhook = "ONCALL_SLACK" }}, {{ pagerduty = "ONCALL_PD_CANARY" }}]

[[policy.levels]]
wait_s = 2
targets = [{{ user = "bob" }}]
"""


@pytest.fixture
def receivers():
    pd = FakePagerDuty(accepted_keys=[CANARY_PD_KEY]).start()
    chat = FakeSlack().start()
    yield pd, chat
    pd.stop()
    chat.stop()


@pytest.fixture
def oncall(processes, receivers, make_profile, tmp_path: Path):
    """The short policy, loaded with loadpolicies; processes started with the receivers' addresses."""
    pd, chat = receivers
    responders, _ = Group.objects.get_or_create(name="responder")
    for name in ("alice", "bob"):
        get_user_model().objects.create_user(name, f"{name}@example.test").groups.add(responders)
    policy_file = tmp_path / "policies.toml"
    policy_file.write_text(POLICY)
    call_command("loadpolicies", str(policy_file))
    profile = make_profile(base_delay_s=0.05, max_delay_s=0.5, escalation_policy="short")
    mail = tmp_path / "mail"
    env = {
        "EMAIL_BACKEND": "escalations.mailfiles.EmailBackend",
        "EMAIL_FILE_PATH": str(mail),
        "NOTIFY_ALLOWED_HOSTS": ",".join(r.base_url.removeprefix("http://") for r in (pd, chat)),
        "PAGERDUTY_EVENTS_URL": pd.url,
        "ONCALL_SLACK": chat.webhook_url(CANARY_SLACK_HOOK),
        "NOTIFY_RETRY_SCHEDULE_S": "0,1,1,1,1,1",
    }
    started = {kind: processes.start(kind, **env) for kind in ("qcluster", "dispatcher")}
    return profile, mail, pd, chat, env, started


def open_card(profile) -> Escalation:
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="operator:integration",
        max_status_requests=1,
    )
    return wait_until(
        lambda: Escalation.objects.filter(operation=Operation.objects.get(pk=op.pk)).first(),
        timeout=60,
        what="the card to open",
    )


def mailed(directory: Path) -> list[str]:
    """The recipients of the mail files written so far, one entry per message."""
    found = []
    for path in sorted(directory.glob("*.eml")):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        found.append(str(message["To"]))
    return found


def test_a_card_escalates_to_level_two_once_even_when_the_worker_is_killed_between_levels(oncall, processes) -> None:
    profile, mail, pd, chat, env, started = oncall
    pd.answer("500")  # the trigger is retried, then accepted
    esc = open_card(profile)
    wait_until(
        lambda: (
            "alice@example.test" in mailed(mail)
            and pd.events()
            and chat.posted("webhook")
            and not NotificationDelivery.objects.filter(escalation=esc, level=0, state="pending").exists()
        ),
        timeout=60,
        what="level 1 by email, Slack and PagerDuty, each recorded",
        processes=processes,
    )
    started["qcluster"].kill_group()
    processes.start("qcluster", **env)
    wait_until(
        lambda: PolicyRun.objects.get(pk=esc.pk).status == "exhausted",
        timeout=60,
        what="both levels sent and the last wait over",
        processes=processes,
    )
    wait_until(lambda: "bob@example.test" in mailed(mail), timeout=30, what="level 2 by email", processes=processes)
    assert mailed(mail).count("bob@example.test") == 1 and mailed(mail).count("alice@example.test") == 1
    first, second = (
        NotificationDelivery.objects.filter(escalation=esc, address=f"{name}@example.test").get()
        for name in ("alice", "bob")
    )
    assert (second.created_at - first.created_at).total_seconds() >= LEVEL_WAIT_S
    trigger = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty")
    assert (trigger.state, trigger.attempts) == ("sent", 2)
    assert [r.status for r in pd.received()] == [500, 202]
    assert len(chat.posted("webhook")) == 1


def test_an_acknowledgement_before_the_wait_means_level_two_is_never_sent_and_pagerduty_is_kept_in_order(
    oncall, processes
) -> None:
    profile, mail, pd, chat, env, started = oncall
    pd.answer("429:1")
    esc = open_card(profile)
    wait_until(lambda: "alice@example.test" in mailed(mail), timeout=60, what="level 1", processes=processes)
    alice = get_user_model().objects.get(username="alice")
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    wait_until(
        lambda: [e["event_action"] for e in pd.events()] == ["trigger", "acknowledge"],
        timeout=60,
        what="PagerDuty trigger (after a 429) then acknowledge",
        processes=processes,
    )
    first = NotificationDelivery.objects.get(escalation=esc, address="alice@example.test")
    # Level 2 would have gone out LEVEL_WAIT_S after level 1: let that moment pass, then count.
    wait_until(
        lambda: (timezone.now() - first.created_at).total_seconds() > LEVEL_WAIT_S + 2,
        timeout=30,
        what="the level-1 wait to run out",
    )
    assert "bob@example.test" not in mailed(mail)
    assert not NotificationDelivery.objects.filter(escalation=esc, level=1).exists()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    wait_until(
        lambda: len(pd.events()) == 3, timeout=60, what="PagerDuty resolve after the decision", processes=processes
    )
    accepted = pd.events()
    assert [e["event_action"] for e in accepted] == ["trigger", "acknowledge", "resolve"]
    assert len({e["dedup_key"] for e in accepted}) == 1
    assert all(r.routing_key_accepted for r in pd.received())
