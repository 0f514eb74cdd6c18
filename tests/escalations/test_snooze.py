"""Snooze and acknowledgement timeout: a responder silences a card's reminders for 15 min, 1 h or
4 h (never past the operation's deadline), shown on the card and audited; a policy's ack_timeout_s
sends an acknowledged, undecided card back to its policy. Time moves with time-machine."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from operations.lifecycle import humans
from operations.models import AuditEntry, CardActivity, Escalation, NotificationDelivery, PolicyRun
from operations.notify import store

pytestmark = pytest.mark.django_db


def save_policy(name: str, *levels: tuple[int, list[dict[str, str]]], **extra: object) -> None:
    raw = {"name": name, "levels": [{"wait_s": w, "targets": t} for w, t in levels], **extra}
    [policy] = store.validate_all([raw])
    store.policies_save(policies=[policy], actor={"kind": "operator", "id": "test"})


@pytest.fixture
def two_levels(profile, alice, bob):
    """Level 1: alice, 5 minutes; level 2: bob, repeated; acknowledgements time out after 30 min."""
    alice.email, bob.email = "alice@example.test", "bob@example.test"
    alice.save(), bob.save()
    save_policy(
        "payments", (300, [{"user": "alice"}]), (600, [{"user": "bob"}]), repeat_last_level=10, ack_timeout_s=1800
    )
    profile.escalation_policy = "payments"
    profile.save()
    return profile


@pytest.fixture
def long_card(stopped):
    """A card whose operation still has three hours before its deadline (its budget ran out)."""
    return lambda: stopped(max_status_requests=2, deadline_at=timezone.now() + timedelta(hours=3))


def levels_sent(esc: Escalation) -> list[tuple[int, int, int, str]]:
    return list(
        NotificationDelivery.objects.filter(escalation=esc, event="level")
        .order_by("pk")
        .values_list("round", "level", "repetition", "address")
    )


def test_snooze_one_hour_silences_reminders_for_the_whole_hour_and_they_resume_after(
    two_levels, long_card, client, alice, pump, clock, mailoutbox
) -> None:
    """The promise: "Snooze 1 h" means no reminder for an hour, and the next one right after."""
    esc = long_card()
    pump()
    assert [m.to for m in mailoutbox] == [["alice@example.test"]]
    client.force_login(alice)
    page = client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "60"})
    assert page.status_code == 303
    card = client.get(page["Location"]).content.decode()
    assert "Reminders snoozed by" in card and "until" in card
    # Level 2 was due 5 minutes in: nothing, minute by minute, for the whole hour.
    for _ in range(59):
        clock.shift(60)
        assert pump() == [], f"a reminder went out {timezone.now()} while snoozed"
    clock.shift(59)
    assert pump() == [] and len(mailoutbox) == 1
    clock.shift(1)
    assert pump() == ["sent"]
    assert [m.to for m in mailoutbox] == [["alice@example.test"], ["bob@example.test"]]
    # The next reminder keeps the policy's own wait after that.
    clock.shift(599)
    assert pump() == []
    clock.shift(1)
    assert pump() == ["sent"]


def test_a_snooze_is_an_audited_act_shown_in_the_cards_activity(two_levels, long_card, client, alice) -> None:
    esc = long_card()
    client.force_login(alice)
    client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "15"})
    [activity] = CardActivity.objects.filter(escalation=esc)
    assert (activity.kind, activity.username, activity.until) == (
        "snoozed",
        "alice",
        timezone.now() + timedelta(minutes=15),
    )
    entry = AuditEntry.objects.get(pk=activity.audit_entry_id)
    assert entry.type == "human.snoozed" and b'"minutes":15' in bytes(entry.body)
    assert PolicyRun.objects.get(pk=esc.pk).snoozed_until == activity.until
    story = client.get(f"/operations/{esc.operation_id}/").content.decode()
    assert "snoozed the card" in story


def test_the_card_activity_exports_say_until_when_a_snooze_silences_reminders(
    two_levels, long_card, client, alice, pump, clock
) -> None:
    esc = long_card()
    client.force_login(alice)
    client.post(f"/cards/{esc.pk}/acknowledge/")
    client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "60"})
    until = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    clock.shift(3600 + 1800)
    pump()  # the acknowledgement ran out: its activity has a time of its own, which is no snooze's end
    assert CardActivity.objects.filter(escalation=esc, kind="ack_expired").exists()
    client.force_login(alice)  # signed in anew after the hour and a half
    for url in (f"/operations/{esc.operation_id}/card-activity.csv", "/history/card-activity.csv"):
        answer = client.get(url)
        text = b"".join(answer).decode()
        assert answer.status_code == 200, (url, answer.status_code, text[:300])
        rows = list(csv.DictReader(io.StringIO(text)))
        assert list(rows[0])[-1] == "snoozed_until", url
        assert [(r["kind"], r["snoozed_until"]) for r in rows] == [
            ("acknowledged", ""),
            ("snoozed", until),
            ("ack_expired", ""),
        ], url


@pytest.mark.parametrize("minutes", ["240", "30", "0", "-15", "60 ", "1e3", ""])
def test_a_snooze_past_the_deadline_or_of_another_length_is_refused(
    two_levels, long_card, client, alice, minutes
) -> None:
    esc = long_card()  # three hours left: 4 h would outlast the watch
    client.force_login(alice)
    answer = client.post(f"/cards/{esc.pk}/snooze/", {"minutes": minutes})
    assert answer.status_code == 422
    assert Escalation.objects.get(pk=esc.pk).snoozed_until is None
    assert not CardActivity.objects.filter(escalation=esc).exists()


def test_a_card_past_its_deadline_offers_no_snooze_and_a_viewer_cannot_snooze(
    two_levels, stopped, client, alice, viewer
) -> None:
    esc = stopped()  # deadline exceeded
    client.force_login(alice)
    page = client.get(f"/operations/{esc.operation_id}/").content.decode()
    assert 'name="minutes"' not in page
    assert client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "15"}).status_code == 422
    client.force_login(viewer)
    assert client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "15"}).status_code == 403
    assert Escalation.objects.get(pk=esc.pk).snoozed_until is None


def test_an_acknowledgement_timeout_restarts_the_policy(two_levels, long_card, alice, pump, clock, mailoutbox) -> None:
    esc = long_card()
    pump()
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    clock.shift(1799)
    assert pump() == []
    clock.shift(1)
    assert pump() == ["sent"]
    assert levels_sent(esc)[-1] == (1, 0, 0, "alice@example.test")
    assert mailoutbox[-1].subject.startswith("[pollerdash] Still undecided 30 min after alice acknowledged")
    card = Escalation.objects.get(pk=esc.pk)
    assert card.acknowledged_by is None and card.assignee == alice
    [expired] = CardActivity.objects.filter(escalation=esc, kind="ack_expired")
    entry = AuditEntry.objects.get(pk=expired.audit_entry_id)
    assert entry.type == "escalation.ack_expired" and b'"kind":"system"' in bytes(entry.body)
    # Acknowledging again stops it again, with a new timeout.
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    clock.shift(600)
    assert pump() == []
    assert PolicyRun.objects.get(pk=esc.pk).status == "acknowledged"


def test_a_decision_before_the_timeout_ends_it(two_levels, long_card, alice, pump, clock) -> None:
    from operations.decisions.services import escalation_decide
    from tests.support import signed_in_now

    esc = long_card()
    humans.acknowledge(escalation_id=esc.pk, user=alice, now=timezone.now())
    escalation_decide(
        escalation_id=esc.pk, user=alice, sign_in=signed_in_now(), option_id="close", card_version=esc.version
    )
    clock.shift(3600)
    pump()
    assert PolicyRun.objects.get(pk=esc.pk).status == "ended"
    assert not CardActivity.objects.filter(escalation=esc, kind="ack_expired").exists()


def test_an_acknowledgement_timeout_waits_for_a_snooze(two_levels, long_card, client, alice, pump, clock) -> None:
    esc = long_card()
    pump()
    client.force_login(alice)
    client.post(f"/cards/{esc.pk}/acknowledge/")
    client.post(f"/cards/{esc.pk}/snooze/", {"minutes": "60"})
    clock.shift(1800)
    assert pump() == []  # the acknowledgement ran out, but the snooze holds
    assert Escalation.objects.get(pk=esc.pk).acknowledged_by is None
    clock.shift(1800)
    assert pump() == ["sent"]
