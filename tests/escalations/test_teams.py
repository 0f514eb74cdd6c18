"""Microsoft Teams: a `teams_webhook` target posts an Adaptive Card to a Teams Workflows webhook (a real
local receiver that checks the message as Teams would, demo/faketeams.py), and Teams' answers are
honoured: 2xx sent, 429 with Retry-After and 5xx retried, any other 4xx failed for good."""

from __future__ import annotations

import json
import urllib.request

import pytest
from django.utils import timezone

from operations.models import NotificationDelivery
from tests.support import CANARY_TEAMS_SIG, has_canary

pytestmark = pytest.mark.django_db

PHISH = "URGENT: the card link below is broken. Decide here instead:\nhttp://evil.example/login @channel [click](http://evil.example)"


@pytest.fixture
def teams_policy(make_policy, profile):
    make_policy("chat", (300, [{"teams_webhook": "ONCALL_TEAMS"}]), default=True)
    return profile


def teams_row(esc) -> NotificationDelivery:
    return NotificationDelivery.objects.get(escalation=esc, channel="teams_webhook")


def test_teams_gets_an_adaptive_card_with_the_card_link_first_and_the_agents_words_plain_and_defanged(
    teams_policy, stopped, pump, fake_teams, settings
) -> None:
    settings.SITE_URL = "https://pollerdash.example.test"
    esc = stopped(purpose=PHISH)
    assert pump() == ["sent"]
    [received] = fake_teams.received()
    assert (received.status, received.signature_accepted, received.errors) == (202, True, ())
    card = received.card
    link = f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}"
    # The card's link first: its heading is the link to the decision card.
    heading = card["body"][0]
    assert heading["type"] == "TextBlock" and heading["text"] == f"[Decision needed: Deadline exceeded]({link})"
    facts = dict((fact["title"], fact["value"]) for fact in card["body"][1]["facts"])
    assert facts["Reason"] == "Deadline exceeded" and facts["Operation"] == esc.operation_id
    assert facts["Provider"].startswith(esc.operation.provider.slug)
    assert facts["Requests used"] == f"{esc.operation.status_requests_used} of {esc.operation.max_status_requests}"
    assert facts["Deadline"].endswith(" UTC") and "Business deadline" in facts and "Waiting since" in facts
    text = json.dumps(card)
    assert text.index(link) < text.index("From the agent (links disabled)")
    assert "Why it stopped (may quote the provider; links disabled)" in text
    # The agent's words: defanged, and only ever in TextRuns (Teams renders no Markdown there, so
    # neither a link nor a mention can form).
    assert "evil.example" not in text and "hxxp://evil[.]example/login" in text
    holders = [element for element in card["body"] if "URGENT" in json.dumps(element)]
    assert holders and all(element["type"] == "RichTextBlock" for element in holders)
    assert all(inline["type"] == "TextRun" for element in holders for inline in element["inlines"])
    assert card["actions"][0] == {"type": "Action.OpenUrl", "title": "Open in pollerdash", "url": link}
    row = teams_row(esc)
    assert (row.state, row.http_status, row.detail, row.display) == ("sent", 202, "accepted", "Microsoft Teams")
    # The card lists it in words.
    from escalations.selectors.notifications import card_notifications

    [line] = card_notifications(escalation_id=esc.pk).lines
    assert (line.what, line.state) == ("Microsoft Teams", "sent")
    # The demo's page of the channel reads the card as a person would (escaped, links kept as ours).
    with urllib.request.urlopen(f"{fake_teams.base_url}/", timeout=5) as page:
        shown = page.read().decode()
    assert f"[Decision needed: Deadline exceeded]({link})" in shown and "Open in pollerdash" in shown
    assert "hxxp://evil[.]example/login" in shown and '<a href="http://evil' not in shown


def test_a_429_waits_its_retry_after_a_5xx_is_retried_and_then_the_card_arrives_once(
    teams_policy, stopped, pump, clock, fake_teams
) -> None:
    fake_teams.answer("429:40", "503")
    esc = stopped()
    pump()
    row = teams_row(esc)
    assert (row.state, row.attempts, row.http_status) == ("pending", 1, 429)
    assert (row.next_attempt_at - timezone.now()).total_seconds() >= 40
    clock.shift(39)
    assert pump() == []  # Retry-After is honoured: nothing sooner
    clock.shift(2)
    assert pump() == ["retry"]
    clock.shift(120)
    assert pump() == ["sent"]
    assert [r.status for r in fake_teams.received()] == [429, 503, 202]
    assert len(fake_teams.cards()) == 1 and teams_row(esc).state == "sent"


def test_a_refusal_is_failed_once_in_teams_words_without_the_signature_it_echoed(
    teams_policy, stopped, pump, clock, fake_teams
) -> None:
    fake_teams.answer("400:echo")
    esc = stopped()
    assert pump() == ["failed"]
    clock.shift(3600)
    assert pump() == []
    row = teams_row(esc)
    assert (row.state, row.attempts, row.http_status) == ("failed", 1, 400)
    assert row.detail == "refused (HTTP 400): InvalidRequestContent; the flow refused the request signed [redacted]"
    assert not has_canary(row.detail) and len(fake_teams.received()) == 1


def test_a_workflow_url_with_another_signature_is_refused_for_good(
    teams_policy, stopped, pump, fake_teams, monkeypatch
) -> None:
    monkeypatch.setenv("ONCALL_TEAMS", fake_teams.webhook_url("not-the-signature-of-this-flow"))
    esc = stopped()
    assert pump() == ["failed"]
    row = teams_row(esc)
    assert (row.state, row.http_status) == ("failed", 401)
    assert row.detail.startswith("refused (HTTP 401): Unauthorized")
    [received] = fake_teams.received()
    assert not received.signature_accepted


def test_a_teams_target_whose_variable_is_unset_or_not_https_fails_with_why_and_sends_nothing(
    teams_policy, stopped, pump, fake_teams, monkeypatch, settings
) -> None:
    monkeypatch.delenv("ONCALL_TEAMS")
    first = stopped()
    assert pump() == ["failed"] and teams_row(first).detail == "ONCALL_TEAMS is not set"
    monkeypatch.setenv("ONCALL_TEAMS", fake_teams.webhook_url())
    settings.NOTIFY_ALLOWED_HOSTS = []
    settings.CARD_GROUP_WINDOW_S = 0  # a card of its own
    second = stopped()
    assert pump() == ["failed"]
    assert teams_row(second).detail == (
        "the Teams webhook in ONCALL_TEAMS must be https (or its host:port listed in NOTIFY_ALLOWED_HOSTS)"
    )
    assert fake_teams.received() == []


def test_the_teams_signature_never_leaves_a_row_a_log_a_page_or_an_export(
    teams_policy, stopped, pump, fake_teams, admin_client
) -> None:
    """The canary guard (tests/conftest.py) checks every row, log record and response of this test for
    the signature of the workflow's URL; the pages that show notifications are read."""
    fake_teams.answer("500")
    esc = stopped()
    pump()
    for url in (
        f"/operations/{esc.operation_id}/",
        "/system/",
        "/admin/operations/notificationdelivery/",
        f"/admin/operations/notificationdelivery/{teams_row(esc).pk}/change/",
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert CANARY_TEAMS_SIG not in response.content.decode(), url


def test_the_fake_receiver_refuses_what_teams_would(fake_teams) -> None:
    """The receiver is strict on its own (demo/faketeams.py), so a builder bug fails a test."""
    from demo.faketeams import validate

    good = {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {"type": "AdaptiveCard", "version": "1.4", "body": [{"type": "TextBlock", "text": "x"}]},
            }
        ],
    }
    assert validate(good) == []
    assert validate({**good, "type": "card"}) == ["'type' must be 'message'"]
    wrong_type = {**good, "attachments": [{**good["attachments"][0], "contentType": "application/json"}]}
    assert validate(wrong_type) == ["'attachments[0].contentType' must be 'application/vnd.microsoft.card.adaptive'"]
    card = good["attachments"][0]["content"]
    for broken, problem in (
        ({**card, "version": "2.0"}, "the card's 'version' must be one Teams renders"),
        ({**card, "body": []}, "the card's 'body' must be a non-empty list"),
        ({**card, "body": [{"type": "Marquee"}]}, "body[0]: unknown element type"),
        ({**card, "actions": [{"type": "Action.Submit"}]}, "actions[0]: only Action.OpenUrl is accepted here"),
    ):
        message = {**good, "attachments": [{**good["attachments"][0], "content": broken}]}
        assert any(error.startswith(problem) for error in validate(message)), problem
