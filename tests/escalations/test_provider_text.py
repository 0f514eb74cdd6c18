"""Text a provider sent is data in on-call's messages, never pollerdash's words (issue 24 item 9).

A hostile provider answers a status request with a state no table lists: a link, Slack's mention and
link syntax, a line break and 10 kB (demo/scenarios.py, `hostile_body__kind=phish_state`). The card it
opens, and every channel's rendered message about it (email text and HTML, Slack webhook and app
posts and their update after a decision, PagerDuty's trigger), show that text quoted, on one line,
capped, with its links disabled - like the agent's text (escalations/agent_text.py).
"""

from __future__ import annotations

import json

import pytest

from demo.scenarios import PHISH_STATE
from operations.decisions.services import escalation_decide
from operations.models import AuditEntry, Escalation
from tests.support import CANARY_SLACK_BOT, signed_in_now

pytestmark = pytest.mark.django_db

LINK = "evil.example"


@pytest.fixture
def hostile(stopped, settings):
    """The card the hostile answer opens (make the policy first: it pages when the card opens)."""
    settings.SITE_URL = "https://pollerdash.example.test"

    def make() -> Escalation:
        esc = stopped("hostile_body", params={"kind": "phish_state"})
        assert esc.reason == "unknown_state"
        return esc

    return make


def plain_texts(message: dict) -> list[str]:
    """Every text object of a Block Kit message, as (type, text)."""
    found: list[tuple[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("plain_text", "mrkdwn") and isinstance(node.get("text"), str):
                found.append((node["type"], node["text"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message)
    return found


def assert_inert_in_slack(message: dict) -> None:
    dumped = json.dumps(message)
    assert LINK not in dumped and "hxxp://evil[.]example" in dumped
    assert len(dumped) < 6000, "a provider's 10 kB must not reach the message"
    for kind, text in plain_texts(message):
        if kind == "mrkdwn":
            assert "<!channel>" not in text and "<http://x" not in text and "<hxxp://x" not in text, text
    # The provider's line break never starts a line of its own.
    assert not any("\n<http://x" in text or "\n<hxxp://x" in text for _, text in plain_texts(message))


def test_the_card_keeps_at_most_1000_characters_of_why_it_stopped(hostile) -> None:
    hostile = hostile()
    assert len(PHISH_STATE) > 10_000
    assert len(hostile.detail) <= 1000 and hostile.detail.endswith("…")
    assert hostile.detail.startswith("provider state 'Pay: http://evil.example/")
    entry = AuditEntry.objects.get(operation_id=hostile.operation_id, type="escalation.opened")
    assert len(json.loads(bytes(entry.body))["data"]["detail"]) <= 1000


def test_email_quotes_defangs_and_caps_what_the_provider_sent(make_policy, hostile, pump, mailoutbox) -> None:
    make_policy("mail", (300, [{"email": "team@example.test"}]), default=True)
    hostile = hostile()
    pump()
    [mail] = mailoutbox
    [(html, _)] = mail.alternatives
    for part in (mail.body, html):
        assert LINK not in part and "hxxp://evil[.]example" in part
        assert len(part) < 6000, "a provider's 10 kB must not reach the email"
    lines = mail.body.splitlines()
    [why] = [line for line in lines if "Why it stopped" in line]
    assert "“provider state 'Pay: hxxp://evil[.]example/" in why and why.endswith("…”")
    [options] = [line for line in lines if line.startswith("Options:")]
    assert "Treat “Pay: hxxp://evil[.]example/ <!channel> <h…” as pending" in options
    assert not any(line.startswith(("<http", "<hxxp")) for line in lines)
    assert html.count("href=") == 1 and "&lt;!channel&gt;" in html


def test_slack_posts_and_their_update_keep_the_providers_text_inert(
    make_policy, hostile, pump, fake_slack, settings, alice
) -> None:
    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT
    make_policy("chat", (300, [{"slack_webhook": "ONCALL_SLACK"}, {"slack_channel": "C0123456789"}]), default=True)
    hostile = hostile()
    pump()
    [webhook] = fake_slack.posted("webhook")
    [post] = fake_slack.posted("chat.postMessage")
    for message in (webhook.body, post.body):
        assert_inert_in_slack(message)
    # Decided with the option whose label names the provider's state: the post is updated in place
    # with the decision's words, which quote it.
    option = "treat_as_pending:15m:4"
    result = escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=hostile.pk,
        user=alice,
        option_id=option,
        card_version=Escalation.objects.get(pk=hostile.pk).version,
    )
    assert not result.refused, result.message
    pump()
    [update] = fake_slack.posted("chat.update")
    assert_inert_in_slack(update.body)
    assert "Decided by alice" in json.dumps(update.body)


def test_the_pagerduty_trigger_quotes_defangs_and_caps_it(make_policy, hostile, pump, fake_pd) -> None:
    make_policy("pager", (300, [{"pagerduty": "ONCALL_PD_CANARY"}]), default=True)
    hostile = hostile()
    pump()
    [trigger] = fake_pd.events()
    details = trigger["payload"]["custom_details"]
    dumped = json.dumps(trigger)
    assert LINK not in dumped and len(dumped) < 6000
    why = details["why_it_stopped"]
    assert why.startswith("“provider state 'Pay: hxxp://evil[.]example/") and len(why) <= 302 and "\n" not in why
    assert all("\n" not in label and LINK not in label for label in details["options_offered"])
    assert LINK not in trigger["payload"]["summary"]
