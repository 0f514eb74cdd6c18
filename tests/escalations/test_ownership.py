"""Holding a card (acknowledge, give back, hand over, take over) and notes, through the services and the
dashboard's views, against real cards opened by the controller."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from operations import events
from operations.audit.story import operation_story
from operations.decisions import ownership
from operations.decisions.services import escalation_decide
from operations.lifecycle import humans
from operations.models import AuditEntry, CardActivity, Escalation, NotificationDelivery
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def reload(esc: Escalation) -> Escalation:
    return Escalation.objects.get(pk=esc.pk)


def entries(esc: Escalation, entry_type: str) -> list[dict]:
    bodies = AuditEntry.objects.filter(operation_id=esc.operation_id, type=entry_type).order_by("pk")
    return [json.loads(bytes(body)) for body in bodies.values_list("body", flat=True)]


def queued(func: str) -> list[tuple]:
    packages = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return [tuple(task["args"]) for task in packages if task["func"] == func]


@pytest.fixture
def notify(settings) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.NOTIFY_REMINDER_S = 900
    settings.SITE_URL = "https://pollerdash.example.test"


def test_acknowledge_records_who_and_since_when_audited_and_announced(stopped, alice, clock) -> None:
    esc = stopped()
    heard: list[dict] = []

    def receiver(**kwargs: object) -> None:
        heard.append(kwargs)

    events.card_acknowledged.connect(receiver)
    try:
        held = humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    finally:
        events.card_acknowledged.disconnect(receiver)
    card = reload(esc)
    assert (card.acknowledged_by, card.assignee, card.acknowledged_at) == (alice, alice, held.acknowledged_at)
    assert card.version == esc.version  # ownership decides nothing: decisions stay valid
    [entry] = entries(esc, "human.acknowledged")
    assert entry["actor"] == {"kind": "user", "id": "alice"}
    assert entry["data"]["previous_holder"] is None and entry["data"]["escalation_id"] == esc.pk
    assert heard[0]["escalation"].pk == esc.pk and heard[0]["user"] == alice and heard[0]["previous"] is None
    assert "alice acknowledged the card" in operation_story(operation_id=esc.operation_id)[-1].text
    # Acknowledging again changes and records nothing.
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    assert len(entries(esc, "human.acknowledged")) == 1


def test_unacknowledge_is_for_the_holder_only_and_clears_the_card(stopped, alice, bob) -> None:
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    with pytest.raises(ownership.NotHolder, match="alice holds it"):
        ownership.card_unacknowledge(escalation_id=esc.pk, user=bob)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    card = reload(esc)
    assert card.assignee is None and card.acknowledged_by is None and card.acknowledged_at is None
    assert [e["data"]["escalation_id"] for e in entries(esc, "human.unacknowledged")] == [esc.pk]
    kinds = list(CardActivity.objects.filter(escalation=esc).values_list("kind", "username"))
    assert kinds == [("acknowledged", "alice"), ("unacknowledged", "alice")]


def test_taking_over_someone_elses_card_needs_their_name_confirmed(stopped, alice, bob, make_user, notify) -> None:
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    with pytest.raises(ownership.TakeoverNeeded, match="alice holds this card") as refused:
        ownership.card_acknowledge(escalation_id=esc.pk, user=bob)
    assert refused.value.status == 409 and reload(esc).acknowledged_by == alice
    carol = make_user("carol")
    # Confirmed for a holder who is no longer the holder: asked again.
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="carol")
    with pytest.raises(ownership.TakeoverNeeded, match="carol holds this card"):
        ownership.card_acknowledge(escalation_id=esc.pk, user=bob, takeover_of=alice.pk)
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob, takeover_of=carol.pk)
    assert reload(esc).acknowledged_by == bob
    [entry] = [e for e in entries(esc, "human.acknowledged") if e["actor"]["id"] == "bob"]
    assert entry["data"]["previous_holder"] == "carol"
    # The person taken over from is told (a notification row on the card, sent by a worker).
    [told] = NotificationDelivery.objects.filter(escalation=esc, event="taken_over")
    assert told.display == "carol" and told.note.startswith("bob took over your card")


def test_reassign_hands_the_card_over_unacknowledged_and_tells_the_responder(
    stopped, alice, make_user, notify, mailoutbox, pump
) -> None:
    esc = stopped()
    dana = make_user("dana", email="dana@example.test")
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    pump()
    mailoutbox.clear()
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="dana")
    card = reload(esc)
    assert (card.assignee, card.assigned_by, card.acknowledged_by) == (dana, alice, None)
    [entry] = entries(esc, "human.reassigned")
    assert entry["data"]["to"] == "dana" and entry["data"]["previous_holder"] == "alice"
    assert pump() == ["sent"]
    [mail] = mailoutbox
    assert mail.to == ["dana@example.test"]
    assert mail.subject.startswith("[pollerdash] alice handed you a card: Deadline exceeded")
    assert f"https://pollerdash.example.test/operations/{esc.operation_id}/#card-{esc.pk}" in mail.body


def test_handing_a_card_someone_else_holds_to_yourself_is_a_confirmed_take_over(
    stopped, alice, bob, notify, mailoutbox, pump
) -> None:
    """Issue 24 item 7: `reassign` to oneself once took a card from its holder without asking and
    without telling them. It asks the take-over's question, naming the holder, and tells them."""
    alice.email = "alice@example.test"
    alice.save()
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    pump()
    mailoutbox.clear()
    with pytest.raises(ownership.TakeoverNeeded, match="alice holds this card") as refused:
        ownership.card_reassign(escalation_id=esc.pk, by=bob, to="bob")
    assert refused.value.status == 409
    assert reload(esc).assignee == alice and CardActivity.objects.filter(username="bob").count() == 0
    # A confirmation for someone who no longer holds it is asked again.
    with pytest.raises(ownership.TakeoverNeeded):
        ownership.card_reassign(escalation_id=esc.pk, by=bob, to="bob", takeover_of=bob.pk)

    ownership.card_reassign(escalation_id=esc.pk, by=bob, to="bob", takeover_of=alice.pk)
    card = reload(esc)
    assert (card.assignee, card.acknowledged_by) == (bob, bob)
    [entry] = [e for e in entries(esc, "human.acknowledged") if e["actor"]["id"] == "bob"]
    assert entry["data"]["previous_holder"] == "alice"
    pump()
    [told] = mailoutbox
    assert told.to == ["alice@example.test"] and told.subject.startswith("[pollerdash] bob took over your card")


def test_taking_a_card_nobody_holds_by_handing_it_to_yourself_tells_nobody(
    stopped, alice, notify, mailoutbox, pump
) -> None:
    alice.email = "alice@example.test"
    alice.save()
    esc = stopped()
    pump()
    mailoutbox.clear()
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="alice")
    assert reload(esc).assignee == alice
    pump()
    assert mailoutbox == [] and not NotificationDelivery.objects.filter(escalation=esc, event="reassigned").exists()


def test_the_hand_over_form_asks_the_take_over_question_when_you_pick_yourself(
    stopped, alice, bob, client: Client, notify
) -> None:
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    client.force_login(bob)
    asked = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": "bob"}, headers=HTMX)
    html = asked.content.decode()
    assert asked.status_code == 409 and "alice holds this card. Confirm that you take it over" in html
    assert '<details class="takeover" open>' in html and "Yes, take over from alice" in html
    assert reload(esc).assignee == alice
    page = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": "bob"})
    assert page.status_code == 409 and reload(esc).assignee == alice
    confirmed = client.post(reverse("escalation_acknowledge", args=[esc.pk]), {"takeover": str(alice.pk)}, headers=HTMX)
    assert confirmed.status_code == 200 and reload(esc).acknowledged_by == bob
    [told] = NotificationDelivery.objects.filter(escalation=esc, event="taken_over")
    assert told.display == "alice" and told.note.startswith("bob took over your card")


def test_reassigning_to_someone_without_the_responder_role_is_refused(stopped, alice, viewer, make_user) -> None:
    esc = stopped()
    inactive = make_user("gone", is_active=False)
    for name, why in (("vera", "responder role"), ("gone", "responder role"), ("nobody", "no account named")):
        with pytest.raises(ownership.NotAResponder, match=why):
            ownership.card_reassign(escalation_id=esc.pk, by=alice, to=name)
    assert inactive.pk and reload(esc).assignee is None and not CardActivity.objects.exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "write some text"),
        ("   \n ", "write some text"),
        ("x" * 2001, "at most 2000 characters"),
        ("bell \x07 here", "control or hidden characters"),
        ("trojan \u202e source", "control or hidden characters"),
        ("carriage\rreturn", "control or hidden characters"),
        (None, "write some text"),
    ],
)
def test_a_note_must_be_plain_bounded_text(stopped, alice, text, why) -> None:
    esc = stopped()
    with pytest.raises(ownership.InvalidNote, match=why):
        ownership.card_note(escalation_id=esc.pk, user=alice, text=text)
    assert not CardActivity.objects.exists() and not entries(esc, "human.note")


def test_a_note_is_kept_with_its_line_breaks_and_audited(stopped, alice) -> None:
    esc = stopped()
    note = ownership.card_note(escalation_id=esc.pk, user=alice, text="On the phone with the vendor\r\nETA 20 min ")
    assert note.text == "On the phone with the vendor\nETA 20 min" and note.audit_entry_id
    [entry] = entries(esc, "human.note")
    assert entry["data"]["text"] == note.text and entry["data"]["activity_id"] == note.pk
    assert reload(esc).version == esc.version


def test_acts_on_a_decided_card_are_409_with_its_state_and_write_nothing(stopped, alice, bob, client: Client) -> None:
    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="close", card_version=esc.version
    )
    client.force_login(alice)
    posts = [
        ("escalation_acknowledge", {}),
        ("escalation_assign", {"take": "1"}),
        ("escalation_unacknowledge", {}),
        ("escalation_reassign", {"to": "bob"}),
        ("escalation_note", {"note": "too late"}),
    ]
    for name, data in posts:
        fragment = client.post(reverse(name, args=[esc.pk]), data, headers=HTMX)
        assert fragment.status_code == 409, name
        assert "no longer open (decided: closed by alice)" in fragment.content.decode(), name
        page = client.post(reverse(name, args=[esc.pk]), data)
        assert page.status_code == 409 and "Nothing was changed" in page.content.decode(), name
    assert not CardActivity.objects.exists()


def test_the_views_acknowledge_hand_over_and_note_and_the_card_shows_it(
    stopped, alice, bob, viewer, client: Client, notify
) -> None:
    esc = stopped()
    client.force_login(alice)
    card = client.post(reverse("escalation_acknowledge", args=[esc.pk]), {"where": "inbox"}, headers=HTMX)
    html = card.content.decode()
    assert card.status_code == 200 and "You</strong> acknowledged this card" in html
    assert "Give it back" in html and "Hand to another responder" in html
    inbox = client.get(reverse("inbox"), {"mine": "1"}).content.decode()
    assert f'id="esc-{esc.pk}"' in inbox and "· since" in inbox

    note = client.post(
        reverse("escalation_note", args=[esc.pk]), {"note": "vendor says <b>ETA</b> 20 min"}, headers=HTMX
    )
    assert "vendor says &lt;b&gt;ETA&lt;/b&gt; 20 min" in note.content.decode()
    bad = client.post(reverse("escalation_note", args=[esc.pk]), {"note": "a\u202eb"}, headers=HTMX)
    assert bad.status_code == 422 and "note: control or hidden characters" in bad.content.decode()
    # A NUL never reaches the view (operations/infrastructure/control_characters.py): 400, naming the field.
    nul = client.post(reverse("escalation_note", args=[esc.pk]), {"note": "a\x00b"}, headers=HTMX)
    assert nul.status_code == 400 and "'note' holds a control character" in nul.content.decode()

    handed = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": "bob"}, headers=HTMX)
    assert handed.status_code == 200 and "alice handed this card to <strong>bob</strong>" in handed.content.decode()
    refused = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": "mallory"}, headers=HTMX)
    assert refused.status_code == 422 and "no account named" in refused.content.decode()
    viewer_only = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": viewer.username}, headers=HTMX)
    assert viewer_only.status_code == 422 and "do not have the responder role" in viewer_only.content.decode()
    again = client.post(reverse("escalation_reassign", args=[esc.pk]), {"to": "bob"}, headers=HTMX)
    assert again.status_code == 422 and "bob already holds this card" in again.content.decode()

    # bob's card asks alice to confirm taking it back, naming bob.
    takeover = client.post(reverse("escalation_acknowledge", args=[esc.pk]), headers=HTMX)
    text = takeover.content.decode()
    assert takeover.status_code == 409 and "bob holds this card" in text and "Yes, take over from bob" in text
    assert reload(esc).assignee == bob
    confirmed = client.post(reverse("escalation_acknowledge", args=[esc.pk]), {"takeover": str(bob.pk)}, headers=HTMX)
    assert confirmed.status_code == 200 and reload(esc).acknowledged_by == alice


def test_the_former_take_this_card_url_acknowledges(stopped, alice, client: Client) -> None:
    esc = stopped()
    client.force_login(alice)
    response = client.post(reverse("escalation_assign", args=[esc.pk]), {"take": "1"})
    assert response.status_code == 303 and reload(esc).acknowledged_by == alice
    client.post(reverse("escalation_assign", args=[esc.pk]), {"take": "0"})
    assert reload(esc).assignee is None and len(entries(esc, "human.unacknowledged")) == 1


def test_an_acknowledged_card_gets_no_reminders(stopped, alice, clock, notify, mailoutbox, pump, settings) -> None:
    settings.CARD_GROUP_WINDOW_S = 0  # two cards of their own, not one outage's group
    esc = stopped()
    other = stopped("slow_success__polls=100")
    pump()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    mailoutbox.clear()
    clock.move_to(esc.opened_at + timedelta(minutes=16), tick=False)
    pump()
    reminded = NotificationDelivery.objects.filter(level=0, repetition=1, state="sent")
    assert list(reminded.values_list("escalation_id", flat=True)) == [other.pk] and len(mailoutbox) == 1
    # Given back: the policy starts again for it.
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    pump()
    assert NotificationDelivery.objects.filter(escalation=esc, round=1, state="sent").exists()


def test_a_first_acceptance_tells_the_other_responders(stopped, alice, make_user, notify, mailoutbox, pump) -> None:
    esc = stopped("succeeded_no_result")
    make_user("bob", email="bob@example.test")
    make_user("vic", role="viewer", email="vic@example.test")
    alice.email = "alice@example.test"
    alice.save()
    pump()
    mailoutbox.clear()
    heard: list[dict] = []
    events.card_awaiting_second.connect(lambda **kwargs: heard.append(kwargs), weak=False, dispatch_uid="t-await")
    try:
        escalation_decide(
            sign_in=signed_in_now(),
            escalation_id=esc.pk,
            user=alice,
            option_id="accept_output",
            card_version=esc.version,
            comment="checked",
        )
    finally:
        events.card_awaiting_second.disconnect(dispatch_uid="t-await")
    assert heard[0]["first"].outcome == "awaiting_second" and heard[0]["escalation"].pk == esc.pk
    assert pump() == ["sent", "sent"]
    assert sorted(m.to[0] for m in mailoutbox) == ["bob@example.test", "oncall@example.test"]
    [mail, _] = mailoutbox
    assert mail.subject.startswith("[pollerdash] Second responder needed")
    assert "alice accepted the output" in mail.body
