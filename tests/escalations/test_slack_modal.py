"""Bounded decisions in Slack: "Review and decide" opens a modal (views.open at the strict fake
Slack), its submission is decided through the decision service as the Slack-matched responder,
exactly once; a stale modal is refused with the card as it is now; what cannot be undone is never
decided in Slack; forged, replayed, altered and foreign submissions change nothing."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
import time_machine
from django.db.models import F
from django.utils import timezone

from demo.fakeslack import interaction, signed, view_submission
from escalations.oncall.channels.slack_blocks import REVIEW_ACTION_ID, SNOOZE_ACTION_ID
from operations.models import AuditEntry, CardActivity, Decision, Escalation, NotificationDelivery
from tests.support import CANARY_SLACK_BOT, CANARY_SLACK_SECRET

SECRET = CANARY_SLACK_SECRET
TEAM, APP = "T0000000", "A0000000"
pytestmark = pytest.mark.django_db


@pytest.fixture
def slack_app(settings, fake_slack, alice):
    settings.SLACK_SIGNING_SECRET = SECRET
    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT
    settings.SLACK_TEAM_ID, settings.SLACK_APP_ID = TEAM, APP
    alice.email = "alice@example.test"
    alice.save()
    fake_slack.state.users["U123"] = {
        "id": "U123",
        "team_id": TEAM,
        "profile": {"email": "alice@example.test"},
        "is_email_confirmed": True,
    }
    return fake_slack


def post(client, body: bytes, *, ts: int | None = None, secret: str = SECRET):
    hdrs = signed(body=body, secret=secret, timestamp=ts if ts is not None else int(time.time()))
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in hdrs.items() if k.lower() != "content-type"}
    return client.post("/slack/interactions", body, content_type="application/x-www-form-urlencoded", **meta)


def open_modal(client, chat, esc, *, user: str = "U123") -> tuple[str, dict]:
    """Click "Review and decide"; the modal views.open received."""
    before = set(chat.views())
    body = interaction(
        user_id=user,
        team_id=TEAM,
        app_id=APP,
        action_id=REVIEW_ACTION_ID,
        value=str(esc.pk),
        response_url=chat.new_response_url(replaces="none"),
        trigger_id=chat.new_trigger(),
    )
    assert post(client, body).status_code == 200
    [view_id] = set(chat.views()) - before
    return view_id, chat.views()[view_id]


def submit(client, view_id: str, view: dict, option: str, *, user: str = "U123", ts: int | None = None, comment=""):
    body = view_submission(
        view=view, view_id=view_id, user_id=user, team_id=TEAM, app_id=APP, option=option, comment=comment
    )
    return post(client, body, ts=ts)


def radio_values(view: dict) -> list[str]:
    [radio] = [b for b in view["blocks"] if b["type"] == "input" and b["element"]["type"] == "radio_buttons"]
    return [o["value"] for o in radio["element"]["options"]]


def test_review_opens_a_modal_with_the_bounded_options_and_links_for_the_rest(client, slack_app, stopped) -> None:
    esc = stopped()
    _, view = open_modal(client, slack_app, esc)
    values = radio_values(view)
    assert values and all(v.startswith("extend:") for v in values), values
    text = json.dumps(view)
    # What cannot be undone is shown, with a link to the card, never as a choice.
    assert "Cancel" in text and "On the card only" in text and "cancel_at_provider" not in values
    assert f"Card version {esc.version}" in text
    assert view["private_metadata"] and str(esc.pk) not in view["private_metadata"][:3]


def test_a_modal_decision_is_applied_once_as_the_slack_user_under_a_double_submit(client, slack_app, stopped) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    option = radio_values(view)[0]
    now = int(time.time())
    first = submit(client, view_id, view, option, ts=now, comment="from the pager")
    # The second click of a double submit is another signed request (a new timestamp).
    second = submit(client, view_id, view, option, ts=now + 1)
    assert first.status_code == second.status_code == 200
    assert first.json()["response_action"] == "update"
    assert "Nothing was decided" in json.dumps(second.json())
    [applied] = Decision.objects.filter(escalation=esc, outcome=Decision.Outcome.APPLIED)
    assert (applied.username, applied.option, applied.comment) == ("alice", option, "from the pager")
    # Recorded as a Slack act, with the Slack user and team Slack confirmed.
    assert applied.channel == "slack" and applied.channel_identity.startswith("slack:")
    assert Escalation.objects.get(pk=esc.pk).state == Escalation.State.DECIDED
    entry = AuditEntry.objects.get(type="human.decision", pk=applied.audit_entry_id)
    assert b'"actor":{"id":"alice","kind":"user"}' in bytes(entry.body)
    # The message the modal was opened from is replaced with the card's state.
    assert NotificationDelivery.objects.filter(escalation=esc, channel="slack_reply", note="replace").exists()


def test_a_stale_modal_is_refused_with_the_card_as_it_is_now(client, slack_app, stopped) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    # Something shown on the card changed after the modal opened.
    Escalation.objects.filter(pk=esc.pk).update(version=F("version") + 1)
    answer = submit(client, view_id, view, radio_values(view)[0]).json()
    assert answer["response_action"] == "update"
    shown = json.dumps(answer["view"])
    assert "The card changed since you opened this form" in shown and f"Card version {esc.version + 1}" in shown
    assert not Decision.objects.filter(escalation=esc, outcome=Decision.Outcome.APPLIED).exists()
    # The refreshed modal decides against the new version.
    again = submit(client, view_id, answer["view"], radio_values(answer["view"])[0]).json()
    assert again["response_action"] == "update"
    assert Decision.objects.filter(escalation=esc, outcome=Decision.Outcome.APPLIED).count() == 1


def test_a_modal_on_a_card_decided_meanwhile_says_so_and_decides_nothing(client, slack_app, stopped, alice) -> None:
    from operations.decisions.services import escalation_decide
    from tests.support import signed_in_now

    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    escalation_decide(
        escalation_id=esc.pk, user=alice, sign_in=signed_in_now(), option_id="close", card_version=esc.version
    )
    answer = submit(client, view_id, view, radio_values(view)[0]).json()
    assert "no longer open" in json.dumps(answer)
    assert Decision.objects.filter(escalation=esc, outcome=Decision.Outcome.APPLIED).count() == 1


@pytest.mark.parametrize("option", ["cancel_at_provider", "close", "accept_output", "inspect"])
def test_an_option_that_cannot_be_undone_is_never_decided_in_slack(client, slack_app, stopped, option) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    answer = submit(client, view_id, view, option).json()
    assert answer["response_action"] == "errors"
    assert "decided on the card only" in answer["errors"]["option"] or option == "inspect"
    assert not Decision.objects.filter(escalation=esc).exists()
    assert Escalation.objects.get(pk=esc.pk).state == Escalation.State.OPEN


def _altered(view: dict, *, card: int | None = None, version: int | None = None) -> dict:
    """The modal with its private_metadata re-made for another card or version, signed with
    another key (whoever alters it has no SECRET_KEY)."""
    from django.core import signing

    from escalations.oncall.slack_modal import SALT

    data = signing.loads(view["private_metadata"], salt=SALT)
    data[0] = card if card is not None else data[0]
    data[1] = version if version is not None else data[1]
    forged = signing.dumps(data, key="not-the-secret-key", salt=SALT, compress=True)
    return {**view, "private_metadata": forged}


def test_altered_forms_and_other_people_decide_nothing(client, slack_app, stopped, make_operation, drive) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    option = radio_values(view)[0]
    attempts = [
        submit(client, view_id, _altered(view, version=esc.version + 5), option),
        submit(client, view_id, _altered(view, card=esc.pk + 1), option),
        submit(client, view_id, {**view, "private_metadata": view["private_metadata"][:-2] + "xx"}, option),
        # Another Slack user (even one with an account) submitting the form opened for U123.
        submit(client, view_id, view, option, user="U999"),
    ]
    for answer in attempts:
        assert answer.status_code == 200 and answer.json()["response_action"] == "errors"
    assert not Decision.objects.filter(escalation=esc).exists()


def test_a_submission_from_another_workspace_or_unsigned_or_replayed_changes_nothing(
    client, slack_app, stopped
) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    option = radio_values(view)[0]
    foreign = view_submission(view=view, view_id=view_id, user_id="U123", team_id="T9999", app_id=APP, option=option)
    assert post(client, foreign).content == b""
    good = view_submission(view=view, view_id=view_id, user_id="U123", team_id=TEAM, app_id=APP, option=option)
    assert post(client, good, secret="not-the-signing-secret").status_code == 401
    unsigned = client.post("/slack/interactions", good, content_type="application/x-www-form-urlencoded")
    assert unsigned.status_code == 401
    assert not Decision.objects.filter(escalation=esc).exists()
    ts = int(time.time())
    assert post(client, good, ts=ts).json()["response_action"] == "update"
    replayed = post(client, good, ts=ts)
    assert replayed.status_code == 200 and replayed.content == b""
    assert Decision.objects.filter(escalation=esc).count() == 1


def test_a_viewer_or_a_stranger_decides_nothing(client, slack_app, stopped, viewer) -> None:
    esc = stopped()
    view_id, view = open_modal(client, slack_app, esc)
    viewer.email = "vera@example.test"
    viewer.save()
    slack_app.state.users["U123"]["profile"]["email"] = "vera@example.test"
    answer = submit(client, view_id, view, radio_values(view)[0]).json()
    assert answer["response_action"] == "errors" and "can read cards but not" in answer["errors"]["option"]
    slack_app.state.users["U123"]["is_email_confirmed"] = False
    answer = submit(client, view_id, view, radio_values(view)[0], ts=int(time.time()) + 1).json()
    assert "no confirmed email" in answer["errors"]["option"]
    assert not Decision.objects.filter(escalation=esc).exists()


def test_a_stranger_clicking_review_gets_no_modal(client, slack_app, stopped) -> None:
    esc = stopped()
    body = interaction(
        user_id="U404",
        team_id=TEAM,
        app_id=APP,
        action_id=REVIEW_ACTION_ID,
        value=str(esc.pk),
        response_url=slack_app.new_response_url(replaces="none"),
        trigger_id=slack_app.new_trigger(),
    )
    assert post(client, body).status_code == 200
    assert slack_app.views() == {}
    [reply] = NotificationDelivery.objects.filter(escalation=esc, channel="slack_reply")
    assert "could not check who you are" in reply.note


# --- snoozing from the message ------------------------------------------------------------------------------


def snooze_click(chat, esc, minutes: int) -> bytes:
    return interaction(
        user_id="U123",
        team_id=TEAM,
        app_id=APP,
        action_id=SNOOZE_ACTION_ID,
        value="",
        response_url=chat.new_response_url(replaces="none"),
        selected=f"{esc.pk}:{minutes}",
    )


def test_a_snooze_from_slack_is_the_responders_audited_act(client, slack_app, stopped) -> None:
    esc = stopped(max_status_requests=2, deadline_at=timezone.now() + timedelta(hours=3))
    assert post(client, snooze_click(slack_app, esc, 60)).status_code == 200
    card = Escalation.objects.get(pk=esc.pk)
    assert card.snoozed_by.get_username() == "alice"
    assert card.snoozed_until == timezone.now() + timedelta(hours=1)
    [activity] = CardActivity.objects.filter(escalation=esc, kind="snoozed")
    assert (activity.channel, activity.channel_identity[:6]) == ("slack", "slack:")
    assert AuditEntry.objects.filter(type="human.snoozed", pk=activity.audit_entry_id).exists()
    reply = NotificationDelivery.objects.filter(escalation=esc, channel="slack_reply").latest("pk")
    assert reply.note.startswith("Reminders snoozed by alice until")


def test_a_snooze_past_the_deadline_or_of_another_length_is_refused(client, slack_app, stopped) -> None:
    esc = stopped(max_status_requests=2, deadline_at=timezone.now() + timedelta(hours=3))
    for minutes in (240, 30, 99999):
        assert post(client, snooze_click(slack_app, esc, minutes)).status_code == 200
    assert Escalation.objects.get(pk=esc.pk).snoozed_until is None
    notes = list(
        NotificationDelivery.objects.filter(escalation=esc, channel="slack_reply").values_list("note", flat=True)
    )
    assert any("after the operation's deadline" in n for n in notes)
    assert all("Nothing was changed" in n for n in notes)


def test_the_message_offers_snoozes_only_before_the_deadline(settings) -> None:
    from escalations.oncall.channels.slack_blocks import card_message
    from escalations.oncall.facts import CardFacts, CardStatus

    now = timezone.now()
    facts = CardFacts(
        escalation_id=7,
        operation_id="op_1",
        reason="request_budget_exhausted",
        reason_label="Request budget spent",
        detail="“x”",
        provider_slug="p",
        provider_account="a",
        provider_job_id="j",
        purpose="",
        requests_used=1,
        max_requests=1,
        deadline_at=now + timedelta(minutes=90),
        business_deadline_at=None,
        opened_at=now,
        card_url="https://pollerdash.example/operations/op_1/#card-7",
        inbox_url="https://pollerdash.example/",
        option_labels=(),
    )
    message = card_message(facts=facts, status=CardStatus("open"), interactive=True, modal=True, now=now)
    [menu] = [e for e in message["blocks"][-1]["elements"] if e["type"] == "static_select"]
    assert [o["value"] for o in menu["options"]] == ["7:15", "7:60"]


# --- the demo's Slack: a newcomer sees the modal the on-call person would see, and decides in it ----------


@pytest.mark.django_db(transaction=True)
def test_the_demo_slack_page_draws_the_modal_pollerdash_opened_and_submits_it(
    live_server, settings, make_policy, make_user, stopped, pump, clock
) -> None:
    import re

    import httpx

    from demo.envfile import EMAIL_DOMAIN
    from demo.receivers import DemoSlack

    responder = make_user("responder")
    responder.email = f"responder@{EMAIL_DOMAIN}"
    responder.save()
    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT
    make_policy("chat", (3600, [{"slack_channel": "C0DEMO0001"}]), default=True)
    demo = DemoSlack(
        bot_token=CANARY_SLACK_BOT,
        signing_secret=SECRET,
        interactions_url=f"{live_server.url}/slack/interactions",
        team_id=TEAM,
        app_id=APP,
    ).start()
    try:
        settings.SLACK_SIGNING_SECRET, settings.SLACK_BOT_TOKEN = SECRET, CANARY_SLACK_BOT
        settings.SLACK_TEAM_ID, settings.SLACK_APP_ID = TEAM, APP
        settings.SLACK_API_URL = f"{demo.base_url}/api"
        settings.NOTIFY_ALLOWED_HOSTS = [*settings.NOTIFY_ALLOWED_HOSTS, demo.base_url.removeprefix("http://")]
        esc = stopped(max_status_requests=2, deadline_at=timezone.now() + timedelta(hours=3))
        # Slack's signatures and trigger_ids are checked against the real time.
        clock.move_to(time_machine.escape_hatch.time.time(), tick=True)
        assert pump() == ["sent"]
        page = httpx.get(demo.base_url).text
        assert "Review and decide</button>" in page and "Modals opened" not in page
        [key] = demo.messages()
        form = {"token": demo.click_token, "message": key, "card": str(esc.pk), "user": "UDEMORESP1"}
        assert httpx.post(f"{demo.base_url}/demo/click", data={**form, "action": "review"}).status_code == 303
        page = httpx.get(demo.base_url).text
        # The modal as Slack shows it: its title, the card's version, each option with its effect.
        assert f"Decide: card {esc.pk}" in page and f"Card version {esc.version}" in page
        assert "opened for responder" in page and "On the card only" in page and "Comment" in page
        # Slack's markup reads as words: no code-span backticks, no empty place where the link was.
        assert f"operation {esc.operation_id} on" in page and "·  ·" not in page
        values = re.findall(r'type=radio name=option value="([^"]+)"', page)
        assert values and all(v.startswith("extend:") for v in values)
        assert 'http-equiv="refresh"' not in page  # a refresh would wipe the choice being made
        [view_id] = demo.views()
        submitted = {"token": demo.click_token, "view": view_id, "option": values[0], "comment": "from the demo"}
        assert httpx.post(f"{demo.base_url}/demo/submit", data={**submitted, "token": "guess"}).status_code == 403
        assert Escalation.objects.get(pk=esc.pk).state == "open"
        assert httpx.post(f"{demo.base_url}/demo/submit", data=submitted).status_code == 303
        decision = Decision.objects.get(escalation=esc, outcome="applied")
        assert (decision.username, decision.channel, decision.comment) == ("responder", "slack", "from the demo")
        # The modal now shows pollerdash's answer, with no choice left to submit.
        page = httpx.get(demo.base_url).text
        assert "Open the card</a>" in page and "name=option" not in page and 'http-equiv="refresh"' in page
    finally:
        demo.stop()
