"""Every way of holding a card, then every kind of decision, with an escalation policy paging on-call.

A taken-over card once could not be decided when a policy applied (issue 24 item 0): the outbox
rules read the card's `taken_over` message with an enum that lacked it, and the decision rolled
back with a 500. Here each ownership act (acknowledge, give back, hand over, take over, take back,
a note) is followed by each kind of decision a card offers (and a bulk decision on a group), through
the service layer, with the policy's first level sent to real local receivers before the act: the
decision applies, and on-call hears the card end (PagerDuty's alert is resolved).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from operations.decisions import ownership
from operations.decisions.bulk import Member, decide_bulk
from operations.decisions.services import escalation_decide
from operations.models import Decision, Escalation, NotificationDelivery, PolicyRun
from operations.notify import rules
from operations.providers.credentials import credentials_publish_all
from tests.support import signed_in_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def paging(make_policy, make_user, alice, bob, fake_pd, settings):
    """The default policy: level 1 mails alice and triggers PagerDuty, level 2 mails bob."""
    settings.SITE_URL = "https://pollerdash.example.test"
    alice.email, bob.email = "alice@example.test", "bob@example.test"
    alice.save(), bob.save()
    make_policy(
        "everyone",
        (300, [{"user": "alice"}, {"pagerduty": "ONCALL_PD_CANARY"}]),
        (600, [{"user": "bob"}]),
        default=True,
    )
    return fake_pd


def reload(esc: Escalation) -> Escalation:
    return Escalation.objects.get(pk=esc.pk)


# --- the ownership acts: each returns the person who holds (or may decide) the card afterwards ----------


def acknowledged(esc, alice, bob):
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    return alice


def given_back(esc, alice, bob):
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    return alice


def handed_over(esc, alice, bob):
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_reassign(escalation_id=esc.pk, by=alice, to="bob")
    return bob


def taken_over(esc, alice, bob):
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob, takeover_of=alice.pk)
    return bob


def taken_back(esc, alice, bob):
    """Two take-overs: the card then holds two `taken_over` messages."""
    taken_over(esc, alice, bob)
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice, takeover_of=bob.pk)
    return alice


def handed_to_self(esc, alice, bob):
    """Handing a card someone else holds to oneself is a take-over, confirmed the same way."""
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    ownership.card_reassign(escalation_id=esc.pk, by=bob, to="bob", takeover_of=alice.pk)
    return bob


def noted(esc, alice, bob):
    ownership.card_note(escalation_id=esc.pk, user=alice, text="vendor is looking at it")
    return alice


ACTS: dict[str, Callable] = {
    "acknowledge": acknowledged,
    "give_back": given_back,
    "hand_over": handed_over,
    "take_over": taken_over,
    "take_over_twice": taken_back,
    "hand_to_self": handed_to_self,
    "note": noted,
}


# --- the decisions: how to open a card that offers it, and whether deciding it ends the card ----------


@dataclass(frozen=True)
class Kind:
    option: str
    scenario: str = "never_finishes"
    params: tuple[tuple[str, str], ...] = ()
    closes: bool = True
    comment: str = ""
    per_call: bool = False
    business: bool = False
    rotate: bool = False


DECISIONS = {
    "close": Kind("close"),
    "extend": Kind("extend:15m:4"),
    "inspect": Kind("inspect", closes=False),
    "cancel_at_provider": Kind("cancel_at_provider", scenario="cancel_ok"),
    "treat_as_pending": Kind("treat_as_pending:15m:4", scenario="unknown_state", params=(("value", "needs_payment"),)),
    "accept_output": Kind("accept_output", scenario="succeeded_no_result", comment="checked the bucket by hand"),
    "keep_waiting": Kind("keep_waiting", business=True),
    "approve_one_check": Kind("approve_one_check", scenario="slow_success", params=(("polls", "5"),), per_call=True),
    "retry_after_rotation": Kind(
        "retry_after_rotation", scenario="auth_revoked", params=(("accept", "rotated42"),), rotate=True
    ),
}


def open_card(kind: Kind, *, stopped, make_profile, monkeypatch) -> Escalation:
    kwargs: dict[str, object] = {"params": dict(kind.params)}
    if kind.per_call:
        kwargs["provider"] = make_profile(approval_mode="per_call", cancel_method="", cancel_url="")
    if kind.business:
        kwargs["deadline_at"] = timezone.now() + timedelta(minutes=10)
        kwargs["business_deadline_at"] = timezone.now() + timedelta(minutes=2)
    esc = stopped(kind.scenario, **kwargs)
    if kind.rotate:
        monkeypatch.setenv("PROVIDER_FAKE_TOKEN", "new-token-rotated42")
        credentials_publish_all()
    return esc


def decide(esc: Escalation, user, kind: Kind):
    return escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=user,
        option_id=kind.option,
        card_version=reload(esc).version,
        comment=kind.comment,
    )


@pytest.mark.parametrize("decision", list(DECISIONS))
@pytest.mark.parametrize("act", list(ACTS))
def test_every_ownership_act_then_every_decision_applies_with_a_policy_paging(
    act, decision, paging, stopped, make_profile, monkeypatch, alice, bob, pump
) -> None:
    kind = DECISIONS[decision]
    esc = open_card(kind, stopped=stopped, make_profile=make_profile, monkeypatch=monkeypatch)
    pump()
    assert [e["event_action"] for e in paging.events()] == ["trigger"]

    decider = ACTS[act](esc, alice, bob)
    result = decide(esc, decider, kind)
    assert not result.refused, result.message
    if kind.option == "accept_output":
        assert result.outcome == Decision.Outcome.AWAITING_SECOND
        # Four eyes: the other responder confirms.
        result = decide(esc, bob if decider == alice else alice, kind)
        assert not result.refused, result.message
    assert result.outcome == (Decision.Outcome.APPLIED if kind.closes else Decision.Outcome.RECORDED)

    pump()
    card = reload(esc)
    run = PolicyRun.objects.get(pk=esc.pk)
    if kind.closes:
        assert card.state == Escalation.State.DECIDED
        assert run.status == PolicyRun.Status.ENDED
        assert [e["event_action"] for e in paging.events()][-1] == "resolve"
    else:
        assert card.state == Escalation.State.OPEN
    assert not NotificationDelivery.objects.filter(escalation=esc, state="pending").exists()


@pytest.mark.parametrize("act", list(ACTS))
def test_every_ownership_act_then_a_bulk_decision_on_the_group(
    act, paging, stopped, make_profile, alice, bob, pump, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    outage = make_profile(slug="acme-main", account="acme")
    first, second = stopped(provider=outage), stopped(provider=outage)
    assert first.group_id == reload(second).group_id is not None
    pump()
    decider = ACTS[act](reload(first), alice, bob)
    if decider == bob:
        ownership.card_acknowledge(escalation_id=second.pk, user=bob)
    members = [Member(c.pk, reload(c).version) for c in (first, second)]
    result = decide_bulk(
        sign_in=signed_in_now(),
        group_id=first.group_id,
        user=decider,
        option_id="close",
        members=members,
        confirmed_count=2,
    )
    assert (result.bulk.outcome, result.bulk.applied) == ("applied", 2), result.refused
    pump()
    assert {reload(c).state for c in (first, second)} == {"decided"}
    assert PolicyRun.objects.get(pk=first.pk).status == PolicyRun.Status.ENDED
    assert [e["event_action"] for e in paging.events()][-1] == "resolve"


def test_through_the_dashboard_a_card_taken_over_is_closed_by_its_new_holder(paging, stopped, alice, bob, pump) -> None:
    esc = stopped()
    pump()
    alices, bobs = Client(), Client()
    alices.force_login(alice)
    bobs.force_login(bob)
    assert alices.post(reverse("escalation_acknowledge", args=[esc.pk])).status_code == 303
    taken = bobs.post(reverse("escalation_acknowledge", args=[esc.pk]), {"takeover": str(alice.pk)})
    assert taken.status_code == 303 and reload(esc).acknowledged_by == bob
    closed = bobs.post(reverse("escalation_decide", args=[esc.pk]), {"option": "close", "version": reload(esc).version})
    assert closed.status_code == 303
    assert reload(esc).state == Escalation.State.DECIDED
    pump()
    assert [e["event_action"] for e in paging.events()] == ["trigger", "acknowledge", "resolve"]


# --- one vocabulary ---------------------------------------------------------------------------------------


def test_the_outbox_model_and_the_rules_share_one_vocabulary() -> None:
    """The model's enums ARE the pure rules' enums, and its fields allow exactly their values: a new
    event, state or kind cannot be written by one side and unknown to the other. One enum names both
    a policy's targets and the outbox's channels (operations.notify.kinds)."""
    from operations.models import PolicyTarget
    from operations.notify.kinds import CHANNELS, TARGETS, Kind
    from operations.notify.steps import RunStatus

    assert NotificationDelivery.Event is rules.Event and NotificationDelivery.State is rules.State
    assert PolicyRun.Status is RunStatus and PolicyTarget.Kind is Kind
    fields = {
        (NotificationDelivery, "event"): list(rules.Event),
        (NotificationDelivery, "state"): list(rules.State),
        (NotificationDelivery, "channel"): [kind for kind in Kind if kind in CHANNELS],
        (PolicyRun, "status"): list(RunStatus),
        (PolicyTarget, "kind"): [kind for kind in Kind if kind in TARGETS],
    }
    for (model, name), members in fields.items():
        allowed = [value for value, _ in model._meta.get_field(name).choices]
        assert allowed == [member.value for member in members], f"{model.__name__}.{name}"


@pytest.mark.parametrize("event", [value for value, _ in NotificationDelivery._meta.get_field("event").choices])
def test_every_event_the_model_holds_is_read_by_the_rules(event, stopped) -> None:
    from escalations.oncall.channels.registry import FOLLOWED_UP
    from escalations.oncall.outbox import rule_row

    esc = stopped()
    row = NotificationDelivery.objects.create(
        escalation=esc,
        round=0,
        level=-1,
        repetition=1,
        channel="email",
        address="someone@example.test",
        display="someone",
        event=event,
        created_at=timezone.now(),
    )
    assert rule_row(row).event == event
    assert rules.on_end(rows=[rule_row(row)], followed_up=FOLLOWED_UP) is not None
