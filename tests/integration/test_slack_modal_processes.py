"""Bounded decisions in Slack with real processes: two web processes behind the Slack app's
interactivity URL, a dispatcher and a worker, the strict fake Slack (chat.postMessage,
chat.update, users.info, views.open). A double submit of the modal decides exactly once, a stale
modal is refused, what cannot be undone is never decided in Slack, the channel's message is updated
in place after the decision, and an acknowledgement timeout restarts the policy."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone

from demo.fakeslack import FakeSlack, interaction, signed, view_submission
from escalations.oncall.channels.slack_blocks import ACK_ACTION_ID, REVIEW_ACTION_ID
from operations.agents.registration import operation_register
from operations.models import Decision, Escalation, NotificationDelivery, Operation, PolicyRun
from tests.integration.support import start_web, wait_until
from tests.support import CANARY_SLACK_BOT, CANARY_SLACK_SECRET, job_id

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TEAM, APP, CHANNEL = "T0000000", "A0000000", "C0123456789"
POLICY = f"""
[[policy]]
name = "chat"
ack_timeout_s = 60

[[policy.levels]]
wait_s = 600
targets = [{{ slack_channel = "{CHANNEL}" }}, {{ user = "alice" }}]
"""


@pytest.fixture
def slack_world(processes, make_profile, settings, tmp_path: Path):
    yield from start_slack_world(processes, make_profile, settings, tmp_path, policy=POLICY)


def start_slack_world(processes, make_profile, settings, tmp_path: Path, *, policy: str):
    """The fake Slack, alice (a responder matched to U123), `policy` as "chat", a qcluster, a
    dispatcher and two web processes; yields (profile, fake Slack, the two web URLs)."""
    chat = FakeSlack(bot_token=CANARY_SLACK_BOT).start()
    chat.state.users["U123"] = {
        "id": "U123",
        "team_id": TEAM,
        "profile": {"email": "alice@example.test"},
        "is_email_confirmed": True,
    }
    responders, _ = Group.objects.get_or_create(name="responder")
    get_user_model().objects.create_user("alice", "alice@example.test").groups.add(responders)
    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT  # the policy's slack_channel needs the Slack app
    policy_file = tmp_path / "policies.toml"
    policy_file.write_text(policy)
    call_command("loadpolicies", str(policy_file))
    profile = make_profile(base_delay_s=0.05, max_delay_s=0.5, escalation_policy="chat")
    env = {
        "SLACK_SIGNING_SECRET": CANARY_SLACK_SECRET,
        "SLACK_BOT_TOKEN": CANARY_SLACK_BOT,
        "SLACK_TEAM_ID": TEAM,
        "SLACK_APP_ID": APP,
        "SLACK_API_URL": f"{chat.base_url}/api",
        "NOTIFY_ALLOWED_HOSTS": chat.base_url.removeprefix("http://"),
        "ALLOWED_HOSTS": "127.0.0.1",
        "EMAIL_BACKEND": "escalations.mailfiles.EmailBackend",
        "EMAIL_FILE_PATH": str(tmp_path / "mail"),
        "NOTIFY_RETRY_SCHEDULE_S": "0,1,1,1,1,1",
    }
    for kind in ("qcluster", "dispatcher"):
        processes.start(kind, **env)
    webs = [start_web(processes, **env)[1] for _ in range(2)]
    try:
        yield profile, chat, webs
    finally:
        chat.stop()


def open_card(profile, chat) -> tuple[Escalation, str]:
    """A card whose message the worker posted to the channel; the message's key."""
    op = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="operator:integration",
        max_status_requests=1,
    )
    card = wait_until(
        lambda: Escalation.objects.filter(operation=Operation.objects.get(pk=op.pk)).first(),
        timeout=60,
        what="the card to open",
    )
    [posted] = wait_until(lambda: chat.posted("chat.postMessage"), timeout=30, what="the channel's message")
    actions = posted.body["blocks"][-1]["elements"]
    assert actions[0]["action_id"] == REVIEW_ACTION_ID and "url" not in actions[0]
    return card, posted.key


def post(url: str, body: bytes, *, ts: int | None = None) -> httpx.Response:
    headers = signed(body=body, secret=CANARY_SLACK_SECRET, timestamp=ts or int(time.time()))
    return httpx.post(f"{url}/slack/interactions", content=body, headers=headers, timeout=30)


def open_modal(web: str, chat: FakeSlack, card: Escalation) -> tuple[str, dict]:
    before = set(chat.views())
    body = interaction(
        user_id="U123",
        team_id=TEAM,
        app_id=APP,
        action_id=REVIEW_ACTION_ID,
        value=str(card.pk),
        response_url=chat.new_response_url(replaces="none"),
        trigger_id=chat.new_trigger(),
    )
    assert post(web, body).status_code == 200
    [view_id] = set(chat.views()) - before
    return view_id, chat.views()[view_id]


def choice(view: dict, prefix: str) -> str:
    [radio] = [b for b in view["blocks"] if b["type"] == "input" and b["element"]["type"] == "radio_buttons"]
    return next(o["value"] for o in radio["element"]["options"] if o["value"].startswith(prefix))


def submission(view_id: str, view: dict, option: str) -> bytes:
    return view_submission(view=view, view_id=view_id, user_id="U123", team_id=TEAM, app_id=APP, option=option)


def test_a_double_submit_to_two_web_processes_decides_once_and_the_message_updates_in_place(slack_world) -> None:
    profile, chat, (first, second) = slack_world
    card, key = open_card(profile, chat)
    view_id, view = open_modal(first, chat, card)
    body = submission(view_id, view, choice(view, "extend:"))
    now = int(time.time())
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda args: post(*args[:2], ts=args[2]), [(first, body, now), (second, body, now + 1)])
        )
    assert [a.status_code for a in answers] == [200, 200]
    texts = sorted(json.dumps(a.json()) for a in answers)
    assert sum("Nothing was decided" in t for t in texts) == 1, texts
    [applied] = Decision.objects.filter(escalation=card, outcome=Decision.Outcome.APPLIED)
    assert applied.username == "alice" and applied.option.startswith("extend:")
    # Everyone's copy of the message says so, updated in place (chat.update by the worker).
    shown = wait_until(
        lambda: "Decided by alice" in json.dumps(chat.messages()[key]) and chat.messages()[key],
        timeout=30,
        what="the channel's message to be updated",
    )
    assert REVIEW_ACTION_ID not in json.dumps(shown)


def test_a_stale_modal_is_refused_and_what_cannot_be_undone_is_never_decided_in_slack(slack_world) -> None:
    profile, chat, (first, second) = slack_world
    card, _ = open_card(profile, chat)
    view_id, view = open_modal(first, chat, card)
    for option in ("cancel_at_provider", "close"):
        answer = post(second, submission(view_id, view, option)).json()
        assert answer["response_action"] == "errors" and "decided on the card only" in answer["errors"]["option"]
    Escalation.objects.filter(pk=card.pk).update(version=F("version") + 1)
    answer = post(second, submission(view_id, view, choice(view, "extend:"))).json()
    assert "The card changed since you opened this form" in json.dumps(answer)
    assert not Decision.objects.filter(escalation=card, outcome=Decision.Outcome.APPLIED).exists()
    assert Escalation.objects.get(pk=card.pk).state == Escalation.State.OPEN


def test_an_acknowledgement_timeout_restarts_the_policy_in_the_dispatcher(slack_world) -> None:
    profile, chat, (first, _) = slack_world
    card, _ = open_card(profile, chat)
    click = interaction(
        user_id="U123",
        team_id=TEAM,
        app_id=APP,
        action_id=ACK_ACTION_ID,
        value=str(card.pk),
        response_url=chat.new_response_url(replaces="none"),
    )
    assert post(first, click).status_code == 200
    run = wait_until(
        lambda: PolicyRun.objects.filter(pk=card.pk, status="acknowledged").first(), timeout=30, what="the ack"
    )
    assert run.ack_expires_at is not None
    # The policy's 60 s pass (the dispatcher reads the run's own clock).
    PolicyRun.objects.filter(pk=card.pk).update(ack_expires_at=timezone.now())
    restarted = wait_until(
        lambda: NotificationDelivery.objects.filter(escalation=card, round=1, level=0, state="sent").count() == 2,
        timeout=30,
        what="the policy's level 1 again, sent",
    )
    assert restarted
    assert Escalation.objects.get(pk=card.pk).acknowledged_by is None
    assert PolicyRun.objects.get(pk=card.pk).status == "running"
    reposted = chat.posted("chat.postMessage")[-1]
    assert "Still undecided 1 min after alice acknowledged" in json.dumps(reposted.body)
