"""A Slack-app post shows the card as it is after every act, wherever it was taken: given back,
snoozed and the snooze's end, taken over, handed on, an acknowledgement that timed out, an
acknowledgement or give-back from PagerDuty, a decision on the web, through the API or in bulk.
Each update is a row of the outbox sent by a worker (chat.update), never inline in the request:
the strict local Slack receiver (demo/fakeslack.py) checks each chat.update and keeps what the
channel shows now."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from demo.fakepagerduty import webhook_event, webhook_signature, webhook_user
from escalations.oncall.channels.pagerduty import dedup_key
from operations.decisions import ownership
from operations.decisions.bulk import Member, decide_bulk
from operations.decisions.services import escalation_decide
from operations.models import Escalation
from operations.notify import store
from tests.support import CANARY_PD_WEBHOOK, CANARY_SLACK_BOT, signed_in_now

pytestmark = pytest.mark.django_db
CHANNEL = "C0123456789"


@pytest.fixture
def app(settings, profile, fake_slack, alice, bob):
    """The Slack app posts every card to CHANNEL; acknowledgements time out after 30 min."""
    settings.SLACK_BOT_TOKEN = CANARY_SLACK_BOT
    alice.email, bob.email = "alice@example.test", "bob@example.test"
    alice.save(), bob.save()
    raw = {"name": "app", "levels": [{"wait_s": 3600, "targets": [{"slack_channel": CHANNEL}]}], "ack_timeout_s": 1800}
    [policy] = store.validate_all([raw])
    store.policies_save(policies=[policy], actor={"kind": "operator", "id": "test"}, default=True)
    return fake_slack


@pytest.fixture
def posted(app, stopped, pump):
    """A card with three hours before its deadline, posted to the channel: (card, the post's key)."""
    esc = stopped(max_status_requests=2, deadline_at=timezone.now() + timedelta(hours=3))
    assert pump() == ["sent"]
    [post] = app.posted("chat.postMessage")
    return esc, post.key


def updated(fake_slack, key: str, pump, *, before: int) -> str:
    """Nothing reached Slack during the act itself (the outbox sends it); after the workers ran, what
    the post shows, as text."""
    assert len(fake_slack.posted("chat.update")) == before, "chat.update sent inline, not by a worker"
    pump()
    updates = fake_slack.posted("chat.update")
    assert len(updates) > before and all(u.key == key and u.status == 200 for u in updates[before:])
    return json.dumps(fake_slack.messages()[key])


def count(fake_slack) -> int:
    return len(fake_slack.posted("chat.update"))


def test_a_give_back_on_the_web_updates_the_post(posted, app, pump, client, alice) -> None:
    esc, key = posted
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    assert "Acknowledged by alice" in updated(app, key, pump, before=0)
    client.force_login(alice)
    assert client.post(f"/cards/{esc.pk}/unacknowledge/").status_code == 303
    shown = updated(app, key, pump, before=1)
    assert "Given back by alice" in shown and "Acknowledged by" not in shown


def test_a_snooze_updates_the_post_and_its_end_updates_it_again(posted, app, pump, client, alice, clock) -> None:
    esc, key = posted
    client.force_login(alice)
    assert client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "60"}).status_code == 303
    until = Escalation.objects.get(pk=esc.pk).snoozed_until
    shown = updated(app, key, pump, before=0)
    assert "Reminders snoozed by alice until" in shown and f"{until:%Y-%m-%d %H:%M} UTC" in shown
    clock.shift(3599)
    assert pump() == [] and count(app) == 1
    clock.shift(1)
    shown = updated(app, key, pump, before=1)
    assert "snoozed" not in shown


def test_a_take_over_updates_the_post(posted, app, pump, alice, bob) -> None:
    esc, key = posted
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    pump()
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob, takeover_of=alice.pk)
    assert "Acknowledged by bob (taken over from alice)" in updated(app, key, pump, before=1)


def test_a_hand_over_updates_the_post(posted, app, pump, alice, bob) -> None:
    esc, key = posted
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="bob")
    assert "Handed to bob by alice" in updated(app, key, pump, before=0)


def test_an_acknowledgement_that_timed_out_updates_the_post(posted, app, pump, alice, clock) -> None:
    esc, key = posted
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    pump()
    clock.shift(1800)
    shown = updated(app, key, pump, before=1)
    assert "Still undecided 30 min after alice acknowledged" in shown and "Acknowledged by" not in shown


def test_an_acknowledgement_and_a_give_back_from_pagerduty_update_the_post(posted, app, pump, client, settings) -> None:
    esc, key = posted
    settings.PAGERDUTY_WEBHOOK_SECRETS = [CANARY_PD_WEBHOOK]
    settings.PAGERDUTY_DEDUP_PREFIX = "pd-test"
    settings.PAGERDUTY_USER_EMAILS = {"PALICE": "alice@example.test"}

    def pager(event_type: str, agent: dict | None) -> None:
        body = webhook_event(
            event_type=event_type,
            dedup_key=dedup_key(instance="pd-test", escalation_id=esc.pk),
            agent=agent,
            occurred_at=timezone.now(),
        )
        signature = webhook_signature(body=body, secrets=[CANARY_PD_WEBHOOK])
        answer = client.post(
            "/pagerduty/webhooks", body, content_type="application/json", HTTP_X_PAGERDUTY_SIGNATURE=signature
        )
        assert answer.status_code == 200

    pager("incident.acknowledged", webhook_user("PALICE", "Alice A."))
    assert "Acknowledged by alice via PagerDuty" in updated(app, key, pump, before=0)
    pager("incident.unacknowledged", None)
    assert "Given back by alice via PagerDuty" in updated(app, key, pump, before=1)


def test_a_decision_through_the_api_updates_the_post(posted, app, pump, alice) -> None:
    esc, key = posted
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="close",
        card_version=esc.version,
        channel="api",
    )
    shown = updated(app, key, pump, before=0)
    assert "Decided by alice" in shown and "Reminders snoozed" not in shown


def test_a_decision_after_a_snooze_skips_the_snooze_s_end(posted, app, pump, alice, clock) -> None:
    esc, key = posted
    ownership.card_snooze(escalation_id=esc.pk, user=alice, minutes=15)
    pump()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    shown = updated(app, key, pump, before=1)
    assert "Decided by alice" in shown and "snoozed" not in shown
    clock.shift(15 * 60)
    pump()
    assert count(app) == 2, "the snooze's end updated a closed card's post"


def test_a_bulk_decision_updates_the_group_s_post(app, stopped, pump, alice) -> None:
    cards = [stopped(purpose=f"Export {n}") for n in range(2)]
    pump()
    [post] = app.posted("chat.postMessage")
    members = [Member(c.pk, Escalation.objects.get(pk=c.pk).version) for c in cards]
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=cards[0].group_id,
        user=alice,
        option_id="close",
        members=members,
        confirmed_count=2,
    )
    assert result.bulk.outcome == "applied"
    assert "Decided by alice" in updated(app, post.key, pump, before=0)
