"""Nobody can silence paging by spending the hourly cap (issue 24 item 3).

Two responders toggling acknowledge / give back on two cards once used up NOTIFY_MAX_PER_HOUR in
41 s (each give-back restarted the policy at level 1), and a new card's first page - PagerDuty
trigger included - was then skipped. Now a new card's first page and every PagerDuty trigger go out
whatever the hourly caps say, a give-back restarts a card's round at most once per
NOTIFY_RESTART_MIN_S, and what a person's acts cause counts against that person's own budget.
Real cards from the controller, real local receivers, the clock injected.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from escalations.oncall import caps
from operations.decisions import ownership
from operations.limits import ratelimit
from operations.models import Escalation, NotificationDelivery, PolicyRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def paging(make_policy, fake_pd, settings):
    """Every card: level 1 mails the team and triggers PagerDuty (5 min), level 2 mails the leads."""
    settings.CARD_GROUP_WINDOW_S = 0  # cards of their own, not one outage's group
    settings.NOTIFY_MAX_PER_HOUR = 60
    settings.NOTIFY_MAX_PER_ACTOR_PER_HOUR = 20
    settings.NOTIFY_RESTART_MIN_S = 300
    # The strongest attacker: no limit on how fast a person's acts come (DECISIONS_PER_MINUTE).
    settings.DECISIONS_PER_MINUTE = 0
    make_policy(
        "everyone",
        (300, [{"email": "team@example.test"}, {"pagerduty": "ONCALL_PD_CANARY"}]),
        (600, [{"email": "leads@example.test"}, {"pagerduty": "ONCALL_PD_CANARY"}]),
        default=True,
    )
    return fake_pd


def rows(esc: Escalation, **filters: object) -> list[tuple[int, int, str, str, str]]:
    return list(
        NotificationDelivery.objects.filter(escalation=esc, **filters)
        .order_by("pk")
        .values_list("round", "level", "channel", "state", "detail")
    )


def global_used() -> int:
    return ratelimit.used(key=caps.GLOBAL_KEY, window_s=caps.WINDOW_S, now=timezone.now())[0]


def test_toggling_acknowledge_and_give_back_cannot_silence_a_new_cards_first_page(
    paging, stopped, pump, clock, alice, bob, mailoutbox, settings
) -> None:
    # The per-card cap is a card's own limit, not what keeps other cards' pages flowing.
    settings.NOTIFY_MAX_PER_CARD = 0
    first, second = stopped(), stopped()
    assert sorted(pump()) == ["sent"] * 4
    # The attack as it was run: two responders, two cards, 100 toggles each over 40 s.
    for _ in range(100):
        for esc, who in ((first, alice), (second, bob)):
            ownership.card_acknowledge(escalation_id=esc.pk, user=who)
            pump()
            clock.shift(0.1)
            ownership.card_unacknowledge(escalation_id=esc.pk, user=who)
            pump()
            clock.shift(0.1)
    toggled = len(mailoutbox)
    before = len(paging.events())
    new = stopped()
    pump()
    # The promise: a new card's first page and its PagerDuty trigger go out.
    assert rows(new) == [(0, 0, "email", "sent", "sent"), (0, 0, "pagerduty", "sent", "accepted")]
    assert [m.to for m in mailoutbox[toggled:]] == [["team@example.test"]]
    assert str(new.operation_id) in mailoutbox[-1].subject
    assert [e["event_action"] for e in paging.events()[before:]] == ["trigger"]
    # And the toggling resent nothing: each give-back resumed its round (within NOTIFY_RESTART_MIN_S).
    assert toggled == 2 and PolicyRun.objects.get(pk=first.pk).round == 0
    assert global_used() == 6  # the three cards' first pages, e-mail and trigger


def test_a_new_cards_first_page_and_every_pagerduty_trigger_go_out_when_the_hourly_cap_is_spent(
    paging, stopped, pump, clock, settings, mailoutbox, alice, client: Client
) -> None:
    settings.NOTIFY_MAX_PER_HOUR = 1
    first, second = stopped(), stopped()
    pump()
    # Both first pages went out, the second beyond the cap.
    assert sorted(m.to[0] for m in mailoutbox) == ["team@example.test", "team@example.test"]
    assert global_used() == 1
    clock.shift(301)
    pump()
    # Level 2 is a reminder: its email is held back by the spent cap, its PagerDuty trigger is not.
    for esc in (first, second):
        assert rows(esc, level=1) == [
            (0, 1, "email", "skipped", "NOTIFY_MAX_PER_HOUR (1) reached"),
            (0, 1, "pagerduty", "sent", "accepted"),
        ]
    assert [e["event_action"] for e in paging.events()] == ["trigger"] * 4
    client.force_login(alice)
    html = client.get(reverse("system")).content.decode()
    assert "Messages to people this hour: 1 of 1 (NOTIFY_MAX_PER_HOUR)" in html
    assert "<strong>2</strong> messages to people held back by an hourly cap in the last hour" in html


def test_a_persons_give_backs_spend_their_own_budget_and_never_everyones(
    make_policy, stopped, pump, clock, settings, alice, mailoutbox
) -> None:
    settings.CARD_GROUP_WINDOW_S = 0
    settings.NOTIFY_RESTART_MIN_S = 0  # every give-back restarts: the budget is what holds
    settings.NOTIFY_MAX_PER_ACTOR_PER_HOUR = 3
    settings.NOTIFY_MAX_PER_HOUR = 3
    settings.DECISIONS_PER_MINUTE = 0
    make_policy("mail", (300, [{"email": "team@example.test"}]), repeat=2, default=True)
    esc, other = stopped(), stopped()
    pump()
    for _ in range(6):
        ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
        ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
        pump()
        clock.shift(1)
    restarts = rows(esc, round__gt=0)
    assert [state for *_, state, _ in restarts] == ["sent"] * 3 + ["skipped"] * 3
    assert {detail for *_, state, detail in restarts if state == "skipped"} == {
        "alice's NOTIFY_MAX_PER_ACTOR_PER_HOUR (3) reached"
    }
    assert set(NotificationDelivery.objects.filter(round__gt=0).values_list("caused_by", flat=True)) == {alice.pk}
    # Everyone's budget still holds the two first pages only: the other card's reminder goes out.
    assert global_used() == 2
    clock.shift(300)
    mailoutbox.clear()
    pump()
    assert [m.to for m in mailoutbox if str(other.operation_id) in m.subject] == [["team@example.test"]]


def test_take_overs_and_hand_overs_count_against_the_person_who_made_them(
    stopped, pump, settings, alice, bob, make_user, notify_emails
) -> None:
    settings.NOTIFY_MAX_PER_ACTOR_PER_HOUR = 1
    settings.NOTIFY_MAX_PER_HOUR = 100
    for user in (alice, bob):
        user.email = f"{user.username}@example.test"
        user.save()
    esc = stopped()
    pump()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob, takeover_of=alice.pk)
    ownership.card_reassign(escalation_id=esc.pk, by=bob, to="alice")
    used = global_used()
    pump()
    told = rows(esc, level=-1, event__in=["taken_over", "reassigned"])
    assert [(state, detail) for *_, state, detail in told] == [
        ("sent", "sent"),
        ("skipped", "bob's NOTIFY_MAX_PER_ACTOR_PER_HOUR (1) reached"),
    ]
    assert global_used() == used


def test_a_give_back_restarts_the_round_once_notify_restart_min_s_has_passed(
    paging, stopped, pump, clock, alice, mailoutbox
) -> None:
    esc = stopped()
    pump()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    clock.shift(60)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    pump()
    assert len(mailoutbox) == 1 and PolicyRun.objects.get(pk=esc.pk).round == 0
    assert not NotificationDelivery.objects.filter(escalation=esc, round__gt=0).exists()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    clock.shift(240)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    pump()
    assert [m.to for m in mailoutbox] == [["team@example.test"]] * 2
    assert [e["event_action"] for e in paging.events()] == ["trigger", "acknowledge", "trigger"]
    run = PolicyRun.objects.get(pk=esc.pk)
    assert (run.round, run.level, run.round_started_at) == (1, 0, timezone.now())
    assert set(NotificationDelivery.objects.filter(round=1).values_list("caused_by", flat=True)) == {alice.pk}


def test_the_system_page_says_how_the_caps_stand(paging, stopped, pump, clock, alice, client: Client) -> None:
    esc = stopped()
    pump()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)  # resumed: nothing resent
    clock.shift(301)
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)  # restarted, caused by alice
    pump()
    client.force_login(alice)
    html = client.get(reverse("system")).content.decode()
    # The card's first page (email and PagerDuty trigger) spent everyone's budget; alice's restart hers.
    assert "Messages to people this hour: 2 of 60 (NOTIFY_MAX_PER_HOUR)" in html
    assert "never held back" in html and "PagerDuty trigger" in html
    assert "Give-backs this hour that resumed a round instead of restarting it: 1." in html
    assert "NOTIFY_RESTART_MIN_S = 300 s" in html
    assert "<td>alice</td><td>2 of 20</td>" in html


@pytest.fixture
def notify_emails(settings) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.CARD_GROUP_WINDOW_S = 0
