"""Reaching on-call: escalation policies step level by level, stop on acknowledge, end on a decision;
every message is a recorded row, sent by a worker to real local receivers (a PagerDuty-shaped one
that checks Events v2 payloads, a Slack-shaped one that checks Block Kit, Django's mail outbox)."""

from __future__ import annotations

import io
import json

import pytest
from django.db import transaction
from django.utils import timezone

from escalations.mailfiles import EmailBackend
from operations.decisions.services import escalation_decide
from operations.infrastructure import outbound
from operations.lifecycle import humans
from operations.models import Escalation, EscalationPolicy, NotificationDelivery, PolicyRun
from tests.support import CANARY_SLACK_HOOK, has_canary, signed_in_now

pytestmark = pytest.mark.django_db
Event, State = NotificationDelivery.Event, NotificationDelivery.State


def rows(esc: Escalation) -> list[tuple[int, str, str, str, str]]:
    """(level, event, channel, address, state) of a card's notifications, oldest first."""
    return list(
        NotificationDelivery.objects.filter(escalation=esc)
        .order_by("pk")
        .values_list("level", "event", "channel", "address", "state")
    )


@pytest.fixture
def two_levels(make_policy, make_user, profile, alice, bob):
    """Level 1: alice and PagerDuty, 5 minutes; level 2: bob; the profile follows it."""
    alice.email, bob.email = "alice@example.test", "bob@example.test"
    alice.save(), bob.save()
    make_policy(
        "payments",
        (300, [{"user": "alice"}, {"pagerduty": "ONCALL_PD_CANARY"}]),
        (600, [{"user": "bob"}]),
    )
    profile.escalation_policy = "payments"
    profile.save()
    return profile


def test_a_card_writes_level_one_in_its_own_transaction_and_a_rolled_back_card_notifies_nobody(
    two_levels, stopped, make_operation
) -> None:
    esc = stopped()
    assert rows(esc) == [
        (0, "level", "email", "alice@example.test", "pending"),
        (0, "level", "pagerduty", "ONCALL_PD_CANARY", "pending"),
    ]
    from operations.lifecycle.cards import open_card
    from operations.vocabulary import Reason

    op = make_operation("slow_success__id=rollback")
    with pytest.raises(RuntimeError), transaction.atomic():
        open_card(operation=op, reason=Reason.DEADLINE_EXCEEDED, detail="test", context={})
        raise RuntimeError("the controller's transaction failed")
    assert NotificationDelivery.objects.count() == 2 and PolicyRun.objects.count() == 1


def test_nobody_is_told_without_a_policy_or_notify_settings(stopped, settings) -> None:
    settings.NOTIFY_EMAILS, settings.NOTIFY_WEBHOOK_URL = [], ""
    esc = stopped()
    assert rows(esc) == [] and not PolicyRun.objects.exists()


def test_level_two_goes_out_after_the_wait_when_nobody_acknowledges(
    two_levels, stopped, pump, clock, fake_pd, mailoutbox
) -> None:
    esc = stopped()
    assert sorted(pump()) == ["sent", "sent"]
    assert [m.to for m in mailoutbox] == [["alice@example.test"]]
    assert [e["event_action"] for e in fake_pd.events()] == ["trigger"]

    clock.shift(299)
    assert pump() == [] and len(mailoutbox) == 1
    clock.shift(2)
    assert pump() == ["sent"]
    assert [m.to for m in mailoutbox] == [["alice@example.test"], ["bob@example.test"]]
    assert mailoutbox[1].subject.startswith("[pollerdash] Still undecided after 5 min: Deadline exceeded")
    # The last level's wait runs out: the policy is exhausted, nothing more is sent, the card stays.
    clock.shift(601)
    assert pump() == []
    run = PolicyRun.objects.get(pk=esc.pk)
    assert run.status == "exhausted" and Escalation.objects.get(pk=esc.pk).state == "open"


def test_an_acknowledgement_before_the_wait_ends_means_level_two_is_never_sent(
    two_levels, stopped, pump, clock, fake_pd, mailoutbox, acknowledge, alice
) -> None:
    esc = stopped()
    pump()
    clock.shift(60)
    acknowledge(esc, alice)
    clock.shift(3600)
    pump()
    assert [m.to for m in mailoutbox] == [["alice@example.test"]]
    assert PolicyRun.objects.get(pk=esc.pk).status == "acknowledged"
    assert [e["event_action"] for e in fake_pd.events()] == ["trigger", "acknowledge"]
    assert not NotificationDelivery.objects.filter(escalation=esc, address="bob@example.test").exists()


def test_an_unsent_level_is_skipped_by_the_acknowledgement_and_says_why(
    two_levels, stopped, acknowledge, alice
) -> None:
    esc = stopped()
    acknowledge(esc, alice)
    assert rows(esc) == [
        (0, "level", "email", "alice@example.test", "skipped"),
        (0, "level", "pagerduty", "ONCALL_PD_CANARY", "skipped"),
    ]
    assert set(NotificationDelivery.objects.values_list("detail", flat=True)) == {"acknowledged before it was sent"}


def test_unacknowledging_starts_the_policy_again_from_level_one(
    two_levels, stopped, pump, clock, mailoutbox, fake_pd, acknowledge, alice
) -> None:
    esc = stopped()
    pump()
    acknowledge(esc, alice)
    # Once per NOTIFY_RESTART_MIN_S (300 s) of the round's start; sooner it resumes (test_paging_caps).
    clock.shift(300)
    humans.unacknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    pump()
    run = PolicyRun.objects.get(pk=esc.pk)
    assert (run.status, run.round, run.level) == ("running", 1, 0)
    assert [m.to for m in mailoutbox] == [["alice@example.test"], ["alice@example.test"]]


def test_pagerduty_gets_trigger_acknowledge_resolve_in_order_with_one_dedup_key_even_after_a_429(
    two_levels, stopped, pump, clock, fake_pd, acknowledge, alice
) -> None:
    fake_pd.answer("429:40")
    esc = stopped()
    pump()
    trigger = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty", event="level")
    assert (trigger.state, trigger.attempts, trigger.http_status) == ("pending", 1, 429)
    # The acknowledgement comes while the trigger still waits to be retried: it waits behind it.
    acknowledge(esc, alice)
    pump()
    assert fake_pd.events() == []
    clock.shift(41)
    pump()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    pump()
    accepted = fake_pd.events()
    assert [e["event_action"] for e in accepted] == ["trigger", "acknowledge", "resolve"]
    assert len({e["dedup_key"] for e in accepted}) == 1
    assert accepted[0]["dedup_key"] == f"pollerdash:127.0.0.1:8000:card:{esc.pk}"
    trigger = accepted[0]
    assert trigger["payload"]["severity"] == "warning" and trigger["payload"]["class"] == "deadline_exceeded"
    details = trigger["payload"]["custom_details"]
    assert details["card_url"].endswith(f"/operations/{esc.operation_id}/#card-{esc.pk}")
    assert "Close" in " ".join(details["options_offered"])
    assert all(r.routing_key_accepted for r in fake_pd.received())


def test_a_pagerduty_400_is_recorded_as_failed_once_without_the_key_it_echoed(
    two_levels, stopped, pump, clock, fake_pd
) -> None:
    fake_pd.answer("400:echo")
    esc = stopped()
    pump()
    clock.shift(3600 * 2)
    pump()
    row = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty")
    assert (row.state, row.attempts, row.http_status) == ("failed", 1, 400)
    assert row.detail.startswith("refused (HTTP 400): Routing key [redacted] is not valid")
    assert len(fake_pd.received()) == 1


def test_429_and_5xx_are_retried_with_backoff_until_accepted(two_levels, stopped, pump, clock, fake_pd) -> None:
    fake_pd.answer("500", "503")
    esc = stopped()
    for _ in range(3):
        pump()
        clock.shift(200)
    row = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty")
    assert (row.state, row.attempts) == ("sent", 3)
    assert [r.status for r in fake_pd.received()] == [500, 503, 202]


def test_a_receiver_that_never_answers_frees_the_worker_at_its_timeout(
    two_levels, stopped, pump, fake_pd, monkeypatch
) -> None:
    import time

    monkeypatch.setattr(outbound, "ONCALL_READ_TIMEOUT_S", 0.5)
    fake_pd.answer("hang")
    esc = stopped()
    started = time.monotonic()
    pump(rounds=1)
    assert time.monotonic() - started < 5
    row = NotificationDelivery.objects.get(escalation=esc, channel="pagerduty")
    assert (row.state, row.attempts) == ("pending", 1) and "no answer (ReadTimeout)" in row.detail


def test_a_decision_ends_the_policy_and_nothing_more_is_sent(
    two_levels, stopped, pump, clock, mailoutbox, fake_pd, alice
) -> None:
    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    clock.shift(3600)
    pump()
    assert mailoutbox == [] and PolicyRun.objects.get(pk=esc.pk).status == "ended"
    assert set(NotificationDelivery.objects.filter(event="level").values_list("detail", flat=True)) == {
        "the card was closed before it was sent"
    }
    assert fake_pd.events() == []  # no trigger went out, so there is nothing to resolve


# --- Slack ---------------------------------------------------------------------------------------------------


PHISH = "URGENT: the card link below is broken. Decide here instead:\nhttp://evil.example/login <!channel>"


def test_slack_gets_valid_block_kit_with_the_card_link_first_and_the_agents_words_defanged(
    make_policy, profile, stopped, pump, fake_slack, settings
) -> None:
    settings.SITE_URL = "https://pollerdash.example.test"
    make_policy("chat", (300, [{"slack_webhook": "ONCALL_SLACK"}]), default=True)
    esc = stopped(purpose=PHISH)
    assert pump() == ["sent"]
    [post] = fake_slack.posted("webhook")
    assert post.status == 200 and post.key == CANARY_SLACK_HOOK
    message = post.body
    text = json.dumps(message)
    link = f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}"
    assert text.index(link) < text.index("From the agent (links disabled)")
    assert "evil.example" not in text and "hxxp://evil[.]example/login" in text
    # The agent's words are only ever plain_text (Slack parses no mention or link in it) and never
    # in the notification's fallback text.
    holders = [e for b in message["blocks"] for e in b.get("elements", []) if "!channel" in json.dumps(e)]
    assert holders and all(e["type"] == "plain_text" for e in holders)
    assert "URGENT" not in message["text"] and "channel" not in message["text"]
    buttons = message["blocks"][-1]["elements"]
    assert [b["text"]["text"] for b in buttons] == ["Review and decide"]  # no Slack app: no Acknowledge


def test_the_settings_policy_keeps_notify_emails_and_the_webhook_working_and_repeats_then_stops(
    stopped, pump, clock, fake_slack, settings, mailoutbox
) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = fake_slack.webhook_url(CANARY_SLACK_HOOK)
    settings.NOTIFY_REMINDER_S = 900
    esc = stopped()
    pump()
    [post] = fake_slack.posted("webhook")
    assert post.body["pollerdash"] == {
        "event": "escalation.opened",
        "url": f"{settings.SITE_URL}/operations/{esc.operation_id}/#card-{esc.pk}",
    }
    for _ in range(12):
        clock.shift(901)
        pump()
    assert len(mailoutbox) == 11  # the first message and ten reminders, then the policy is exhausted
    assert fake_slack.posted("webhook")[1].body["pollerdash"]["event"] == "escalation.reminder"
    assert PolicyRun.objects.get(pk=esc.pk).status == "exhausted"


def test_with_the_slack_app_a_channel_post_is_updated_in_place_when_the_card_is_decided(
    make_policy, profile, stopped, pump, fake_slack, settings, alice
) -> None:
    from tests.support import CANARY_SLACK_BOT

    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT
    make_policy("app", (300, [{"slack_channel": "C0123456789"}]), default=True)
    esc = stopped()
    pump()
    [post] = fake_slack.posted("chat.postMessage")
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    pump()
    [update] = fake_slack.posted("chat.update")
    assert update.key == post.key
    shown = fake_slack.messages()[post.key]
    assert shown["blocks"][0]["text"]["text"].startswith("Decided")
    assert "Decided by alice" in json.dumps(shown)


# --- email -------------------------------------------------------------------------------------------------------


def test_email_has_a_plain_subject_text_and_html_parts_and_the_agents_words_after_the_link(
    make_policy, profile, stopped, pump, settings, mailoutbox
) -> None:
    settings.SITE_URL = "https://pollerdash.example.test"
    make_policy("mail", (300, [{"email": "team@example.test"}]), default=True)
    esc = stopped(purpose=PHISH)
    pump()
    [mail] = mailoutbox
    assert mail.subject == f"[pollerdash] Decision needed: Deadline exceeded - {profile.slug} ({esc.operation_id})"
    assert mail.subject.isascii() and "URGENT" not in mail.subject
    link = f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}"
    lines = mail.body.splitlines()
    [link_line] = [n for n, line in enumerate(lines) if link in line]
    [purpose_line] = [n for n, line in enumerate(lines) if line.startswith("Purpose (from the agent)")]
    assert link_line < purpose_line and "hxxp://evil[.]example/login" in lines[purpose_line]
    assert "evil.example" not in mail.body
    [(html, kind)] = mail.alternatives
    assert kind == "text/html" and f'href="{link}"' in html and html.count("href=") == 1
    assert "evil.example" not in html and "&lt;!channel&gt;" in html


def test_the_demo_mail_backend_writes_one_file_and_prints_one_line_per_message(tmp_path) -> None:
    from django.core.mail import EmailMultiAlternatives

    stream = io.StringIO()
    backend = EmailBackend(file_path=str(tmp_path), stream=stream)
    message = EmailMultiAlternatives("[pollerdash] Decision needed: Déjà — vu", "body", "from@x.test", ["a@x.test"])
    message.attach_alternative("<p>body</p>", "text/html")
    assert backend.send_messages([message, message]) == 2
    printed = stream.getvalue().splitlines()
    assert len(printed) == 2
    assert "to a@x.test: [pollerdash] Decision needed: Déjà — vu (" in printed[0] and "=?utf-8?" not in printed[0]
    assert len(list(tmp_path.glob("*.eml"))) == 2


# --- caps ----------------------------------------------------------------------------------------------------


def test_messages_beyond_the_hourly_cap_are_recorded_as_skipped(
    make_policy, profile, stopped, pump, clock, settings, mailoutbox
) -> None:
    settings.NOTIFY_MAX_PER_HOUR = 1
    settings.CARD_GROUP_WINDOW_S = 0  # two cards of their own, not one outage's group
    make_policy("mail", (300, [{"email": "team@example.test"}]), repeat=1, default=True)
    first, second = stopped(), stopped()
    pump()
    # A new card's first page is never held back by the hourly cap; its reminders are.
    assert len(mailoutbox) == 2
    clock.shift(301)
    pump()
    assert len(mailoutbox) == 2
    skipped = NotificationDelivery.objects.filter(state="skipped")
    assert set(skipped.values_list("detail", flat=True)) == {"NOTIFY_MAX_PER_HOUR (1) reached"}
    assert {first.pk, second.pk} == set(skipped.values_list("escalation_id", flat=True))


def test_a_card_gets_at_most_notify_max_per_card_messages_and_the_last_says_so(
    make_policy, profile, stopped, pump, clock, settings, mailoutbox
) -> None:
    settings.NOTIFY_MAX_PER_CARD = 2
    make_policy("mail", (60, [{"email": "team@example.test"}]), repeat=5, default=True)
    esc = stopped()
    for _ in range(4):
        pump()
        clock.shift(61)
    assert len(mailoutbox) == 2
    assert "last message about this card" not in mailoutbox[0].body
    assert "This is the last message about this card" in mailoutbox[1].body
    skipped = NotificationDelivery.objects.filter(escalation=esc, state="skipped")
    assert skipped.exists() and set(skipped.values_list("detail", flat=True)) == {"NOTIFY_MAX_PER_CARD (2) reached"}


# --- outside the levels -----------------------------------------------------------------------------------------


def test_the_responder_a_card_is_handed_to_is_told_and_the_policy_goes_on(
    two_levels, stopped, pump, bob, alice, mailoutbox
) -> None:
    esc = stopped()
    humans.reassign(escalation_id=esc.pk, by=alice, to=bob, now=timezone.now())
    pump()
    [handed] = [m for m in mailoutbox if m.to == ["bob@example.test"]]
    assert handed.subject.startswith("[pollerdash] alice handed you a card: Deadline exceeded")
    assert handed.body.startswith("alice handed you this card: it is yours now.")
    assert NotificationDelivery.objects.get(escalation=esc, event="reassigned").state == "sent"
    assert PolicyRun.objects.get(pk=esc.pk).status == "running"


def test_taking_over_a_card_tells_the_person_who_held_it(two_levels, stopped, pump, bob, alice, mailoutbox) -> None:
    esc = stopped()
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    humans.acknowledge(escalation_id=esc.pk, user=bob, now=timezone.now())
    pump()
    [told] = [m for m in mailoutbox if m.subject.startswith("[pollerdash] bob took over your card")]
    assert told.to == ["alice@example.test"] and "you need do nothing more" in told.body


def test_a_policy_changed_while_a_card_runs_does_not_change_that_card(
    two_levels, stopped, pump, clock, make_policy, mailoutbox
) -> None:
    esc = stopped()
    pump()
    make_policy("payments", (300, [{"email": "someone-else@example.test"}]))
    clock.shift(301)
    pump()
    assert [m.to for m in mailoutbox][-1] == ["bob@example.test"]
    assert PolicyRun.objects.get(pk=esc.pk).policy_name == "payments"


def test_the_dispatcher_steps_a_level_once_even_when_two_passes_race(two_levels, stopped, clock) -> None:
    from escalations.oncall import runs

    esc = stopped()
    clock.shift(301)
    now = timezone.now()
    assert runs.advance_due(now=now) == 1
    assert runs.advance_due(now=now) == 0
    assert NotificationDelivery.objects.filter(escalation=esc, level=1).count() == 1


def test_no_notification_path_stores_logs_shows_or_exports_a_secret(
    two_levels, make_policy, stopped, pump, fake_pd, fake_slack, settings, admin_client, client, signing_key
) -> None:
    """The canary guard (tests/conftest.py) checks every row, log record, response and email of this
    test for the routing key, the webhook URL's secret and the Slack app's secrets: here every path
    that handles them runs, and every page and export that could show them is read."""
    settings.METRICS_ALLOW_LOOPBACK = True  # /metrics read as a scraper on this machine would
    from tests.support import CANARY_SLACK_BOT, CANARY_SLACK_SECRET

    settings.SLACK_SIGNING_SECRET, settings.SLACK_BOT_TOKEN = CANARY_SLACK_SECRET, CANARY_SLACK_BOT
    make_policy("chat", (300, [{"slack_webhook": "ONCALL_SLACK"}, {"pagerduty": "ONCALL_PD_CANARY"}]), default=True)
    two_levels.escalation_policy = ""
    two_levels.save()
    fake_pd.answer("400:echo")
    fake_slack.answer("404:no_service")
    esc = stopped()
    pump()
    refused = client.post(
        "/slack/interactions",
        b"payload=%7B%7D",
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=str(int(timezone.now().timestamp())),
        HTTP_X_SLACK_SIGNATURE="v0=" + "0" * 64,
    )
    assert refused.status_code == 401
    assert set(NotificationDelivery.objects.values_list("state", flat=True)) == {"failed"}
    for url in (
        f"/operations/{esc.operation_id}/",
        f"/operations/{esc.operation_id}/report/",
        f"/operations/{esc.operation_id}/audit.jsonl",
        "/system/",
        "/admin/operations/escalationpolicy/",
        f"/admin/operations/escalationpolicy/{EscalationPolicy.objects.get(name='chat').pk}/change/",
        "/admin/operations/notificationdelivery/",
        "/admin/operations/policyrun/",
        "/metrics",
    ):
        response = admin_client.get(url, REMOTE_ADDR="127.0.0.1")
        assert response.status_code == 200, url
        if getattr(response, "streaming", False):
            assert not has_canary(b"".join(response.streaming_content)), url
    page = admin_client.get(f"/operations/{esc.operation_id}/").content.decode()
    assert "refused (HTTP 400): Routing key [redacted] is not valid" in page
    assert "refused (HTTP 404): no_service" in page
