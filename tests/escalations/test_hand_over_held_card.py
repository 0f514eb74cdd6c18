"""Handing a card someone else holds to a third person is a take-over (review F6): Carol hands Alice's
card to Bob only after confirming that she takes it over from Alice; it is recorded as a take-over and
Alice is told as a take-over tells her. Only the holder hands a card on without it."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from operations.audit.story import operation_story
from operations.decisions import ownership
from operations.models import AuditEntry, CardActivity, Escalation, NotificationDelivery

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def reassigned(esc: Escalation) -> list[dict]:
    bodies = AuditEntry.objects.filter(operation_id=esc.operation_id, type="human.reassigned").order_by("pk")
    return [json.loads(bytes(body))["data"] for body in bodies.values_list("body", flat=True)]


@pytest.fixture(autouse=True)
def notify(settings) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.SITE_URL = "https://pollerdash.example.test"


@pytest.fixture
def held(stopped, alice) -> Escalation:
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    return esc


def test_a_third_persons_hand_over_needs_the_take_over_confirmed(held, alice, bob, make_user) -> None:
    carol = make_user("carol")
    with pytest.raises(ownership.TakeoverNeeded, match="alice holds this card") as refused:
        ownership.card_reassign(escalation_id=held.pk, by=carol, to="bob")
    assert refused.value.status == 409
    assert Escalation.objects.get(pk=held.pk).assignee == alice and not reassigned(held)
    # Confirmed for someone who does not hold it: asked again.
    with pytest.raises(ownership.TakeoverNeeded):
        ownership.card_reassign(escalation_id=held.pk, by=carol, to="bob", takeover_of=bob.pk)
    assert not NotificationDelivery.objects.filter(escalation=held, event="taken_over").exists()


def test_a_confirmed_hand_over_is_a_take_over_recorded_and_told(held, alice, bob, make_user) -> None:
    carol = make_user("carol")
    ownership.card_reassign(escalation_id=held.pk, by=carol, to="bob", takeover_of=alice.pk)
    card = Escalation.objects.get(pk=held.pk)
    assert (card.assignee, card.assigned_by, card.acknowledged_by) == (bob, carol, None)
    [entry] = reassigned(held)
    assert entry["takeover"] is True and entry["previous_holder"] == "alice" and entry["to"] == "bob"
    activity = CardActivity.objects.get(escalation=held, kind=CardActivity.Kind.REASSIGNED)
    assert (activity.username, activity.previous_username, activity.to_username) == ("carol", "alice", "bob")
    assert "carol took the card over from alice and handed it to bob" in operation_story(
        operation_id=held.operation_id
    )[-1].text.replace("user:", "")
    # Alice hears it as a take-over; Bob as a hand-over.
    [told] = NotificationDelivery.objects.filter(escalation=held, event="taken_over")
    assert told.display == "alice" and told.note.startswith("carol took over your card")
    assert "handed it to bob" in told.note
    [handed] = NotificationDelivery.objects.filter(escalation=held, event="reassigned")
    assert handed.display == "bob"


def test_the_holder_hands_on_without_a_take_over(held, alice, bob) -> None:
    ownership.card_reassign(escalation_id=held.pk, by=alice, to="bob")
    [entry] = reassigned(held)
    assert not entry.get("takeover")
    assert not NotificationDelivery.objects.filter(escalation=held, event="taken_over").exists()


def test_the_hand_over_form_asks_to_confirm_the_take_over(held, alice, bob, make_user, client: Client) -> None:
    carol = make_user("carol")
    client.force_login(carol)
    page = client.get(reverse("escalation_card", args=[held.pk]), headers=HTMX).content.decode()
    assert "handing it on takes it over" in page and f'name="takeover" value="{alice.pk}"' in page
    # Without the box ticked: refused, nothing changes.
    refused = client.post(reverse("escalation_reassign", args=[held.pk]), {"to": "bob"}, headers=HTMX)
    assert refused.status_code == 409 and Escalation.objects.get(pk=held.pk).assignee == alice
    done = client.post(
        reverse("escalation_reassign", args=[held.pk]), {"to": "bob", "takeover": str(alice.pk)}, headers=HTMX
    )
    assert done.status_code == 200 and Escalation.objects.get(pk=held.pk).assignee == bob
