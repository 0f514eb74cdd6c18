"""Who a level reaches, and what an acknowledgement or a decision does to the outbox."""

from __future__ import annotations

import random

from operations.notify.kinds import Kind
from operations.notify.policy import Target
from operations.notify.recipients import People, Person, expand
from operations.notify.rules import (
    SCHEDULE_S,
    Event,
    FollowUp,
    Readiness,
    Row,
    Skip,
    State,
    follow_up_ready,
    on_acknowledge,
    on_change,
    on_end,
    retry_delay_s,
)
from operations.notify.steps import Notify

# The channels whose messages are followed up (escalations.oncall.channels.registry says which).
FOLLOWED_UP = frozenset({Kind.PAGERDUTY, Kind.SLACK_CHANNEL})

PEOPLE = People(
    by_username={
        "alice": Person("alice", "alice@example.com", is_active=True, is_responder=True),
        "bob": Person("bob", "", is_active=True, is_responder=True),
        "carol": Person("carol", "carol@example.com", is_active=False, is_responder=True),
        "dave": Person("dave", "dave@example.com", is_active=True, is_responder=False),
    },
    group_members={"oncall": ["alice", "bob", "carol", "dave"], "empty": []},
)


def notify(kind: Kind, ref: str) -> Notify:
    return Notify(round=0, level=1, repetition=0, target=Target(kind, ref))


def test_a_group_becomes_one_row_per_responder_and_the_unreachable_are_recorded_with_why():
    rows = expand([notify(Kind.GROUP, "oncall"), notify(Kind.USER, "alice")], people=PEOPLE)
    assert [(r.display, r.address, r.skip_reason) for r in rows] == [
        ("alice (oncall)", "alice@example.com", ""),
        ("bob (oncall)", "user:bob", "the account has no email address"),
        ("carol (oncall)", "user:carol", "the account is inactive"),
    ]  # dave reads but does not respond; alice, named twice, is mailed once


def test_an_empty_group_says_so_instead_of_silently_waiting_out_the_level():
    (row,) = expand([notify(Kind.GROUP, "empty")], people=PEOPLE)
    assert row.skip_reason == "the group has no members"


def test_secret_targets_keep_only_the_variable_name():
    rows = expand(
        [notify(Kind.PAGERDUTY, "ONCALL_PD_KEY"), notify(Kind.SLACK_WEBHOOK, "ONCALL_SLACK_HOOK")],
        people=PEOPLE,
    )
    assert [(r.channel, r.address) for r in rows] == [
        (Kind.PAGERDUTY, "ONCALL_PD_KEY"),
        (Kind.SLACK_WEBHOOK, "ONCALL_SLACK_HOOK"),
    ]


def test_retries_follow_the_schedule_honour_retry_after_within_a_cap_and_end():
    rng = random.Random(1)
    delays = [retry_delay_s(attempts_made=n, retry_after_s=None, rng=rng) for n in range(1, len(SCHEDULE_S) + 1)]
    assert delays[-1] is None
    for delay, base in zip(delays[:-1], SCHEDULE_S[1:], strict=True):
        assert 0.8 * base <= delay <= 1.2 * base
    assert retry_delay_s(attempts_made=1, retry_after_s=120, rng=rng) == 120
    assert retry_delay_s(attempts_made=1, retry_after_s=10**9, rng=rng) == 15 * 60


def row(id_: int, channel: Kind, event: Event, state: State, attempts: int = 0, address: str = "A") -> Row:
    return Row(id=id_, channel=channel, address=address, event=event, state=state, attempts=attempts)


def test_acknowledge_skips_unsent_level_rows_leaves_in_flight_ones_and_follows_up_what_went_out():
    rows = [
        row(1, Kind.EMAIL, Event.LEVEL, State.SENT, 1, "alice@example.com"),
        row(2, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),
        row(3, Kind.PAGERDUTY, Event.LEVEL, State.PENDING, 2, "ONCALL_PD_B"),  # in flight (retrying a 429)
        row(4, Kind.PAGERDUTY, Event.LEVEL, State.PENDING, 0, "ONCALL_PD_C"),  # level 2, not sent yet
        row(5, Kind.EMAIL, Event.LEVEL, State.PENDING, 0, "bob@example.com"),
        row(6, Kind.SLACK_WEBHOOK, Event.LEVEL, State.SENT, 1, "ONCALL_HOOK"),
        row(7, Kind.SLACK_CHANNEL, Event.LEVEL, State.SENT, 1, "C0123456789"),
        row(8, Kind.PAGERDUTY, Event.LEVEL, State.FAILED, 1, "ONCALL_PD_D"),
    ]
    changes = on_acknowledge(rows=rows, followed_up=FOLLOWED_UP)
    assert changes.skip == (Skip(4, "acknowledged before it was sent"), Skip(5, "acknowledged before it was sent"))
    assert changes.add == (
        FollowUp(Kind.PAGERDUTY, "ONCALL_PD_A", Event.ACKNOWLEDGED, 2),
        FollowUp(Kind.PAGERDUTY, "ONCALL_PD_B", Event.ACKNOWLEDGED, 3),
        FollowUp(Kind.SLACK_CHANNEL, "C0123456789", Event.ACKNOWLEDGED, 7),
    )  # no follow-up for the webhook post (cannot be edited) nor for the trigger PagerDuty refused


def test_a_decision_after_an_acknowledgement_resolves_after_the_acknowledge_and_only_once():
    rows = [
        row(2, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),
        row(9, Kind.PAGERDUTY, Event.ACKNOWLEDGED, State.PENDING, 0, "ONCALL_PD_A"),
    ]
    changes = on_end(rows=rows, followed_up=FOLLOWED_UP)
    assert changes.add == (FollowUp(Kind.PAGERDUTY, "ONCALL_PD_A", Event.ENDED, 9),)
    again = on_end(
        rows=[*rows, row(10, Kind.PAGERDUTY, Event.ENDED, State.PENDING, 0, "ONCALL_PD_A")], followed_up=FOLLOWED_UP
    )
    assert again.add == ()


def test_a_decision_after_a_give_back_resolves_the_alert_even_though_the_re_trigger_is_skipped():
    """Acknowledged, given back (a new round's trigger written, not sent yet), then decided: the
    resolve follows the last message that went out, not the skipped re-trigger, so the alert closes."""
    rows = [
        row(2, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),
        row(5, Kind.PAGERDUTY, Event.ACKNOWLEDGED, State.SENT, 1, "ONCALL_PD_A"),
        row(7, Kind.PAGERDUTY, Event.LEVEL, State.PENDING, 0, "ONCALL_PD_A"),  # round 2, not sent
    ]
    changes = on_end(rows=rows, followed_up=FOLLOWED_UP)
    assert changes.skip == (Skip(7, "the card was closed before it was sent"),)
    assert changes.add == (FollowUp(Kind.PAGERDUTY, "ONCALL_PD_A", Event.ENDED, 5),)


def test_a_level_sent_after_a_give_back_is_acknowledged_anew():
    rows = [
        row(2, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),
        row(5, Kind.PAGERDUTY, Event.ACKNOWLEDGED, State.SENT, 1, "ONCALL_PD_A"),
        row(7, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),  # the re-trigger went out
    ]
    assert on_acknowledge(rows=rows, followed_up=FOLLOWED_UP).add == (
        FollowUp(Kind.PAGERDUTY, "ONCALL_PD_A", Event.ACKNOWLEDGED, 7),
    )
    acknowledged = [*rows, row(8, Kind.PAGERDUTY, Event.ACKNOWLEDGED, State.PENDING, 0, "ONCALL_PD_A")]
    assert on_acknowledge(rows=acknowledged, followed_up=FOLLOWED_UP).add == ()


def test_any_other_act_updates_each_slack_post_in_place_after_its_last_post_unless_its_own_follow_up_does():
    rows = [
        row(1, Kind.SLACK_CHANNEL, Event.LEVEL, State.SENT, 1, "C1"),
        row(2, Kind.SLACK_CHANNEL, Event.ACKNOWLEDGED, State.SENT, 1, "C1"),
        row(3, Kind.SLACK_CHANNEL, Event.LEVEL, State.PENDING, 0, "C1"),  # a restart's post, not sent yet
        row(4, Kind.SLACK_CHANNEL, Event.LEVEL, State.FAILED, 1, "C2"),  # never reached the channel
        row(5, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1, "ONCALL_PD_A"),
        row(6, Kind.SLACK_WEBHOOK, Event.LEVEL, State.SENT, 1, "ONCALL_HOOK"),
    ]
    updated = frozenset({Kind.SLACK_CHANNEL})
    assert on_change(rows=rows, updated_in_place=updated) == (FollowUp(Kind.SLACK_CHANNEL, "C1", Event.UPDATED, 3),)
    assert on_change(rows=rows, updated_in_place=updated, announced={(Kind.SLACK_CHANNEL, "C1")}) == ()


def test_an_update_in_place_is_never_waited_for_and_a_pending_one_is_skipped_when_the_card_ends():
    """A snooze's end is an update due later: an acknowledgement or the end follows the post, not it."""
    rows = [
        row(1, Kind.SLACK_CHANNEL, Event.LEVEL, State.SENT, 1, "C1"),
        row(2, Kind.SLACK_CHANNEL, Event.UPDATED, State.SENT, 1, "C1"),
        row(3, Kind.SLACK_CHANNEL, Event.UPDATED, State.PENDING, 0, "C1"),  # the snooze's end
    ]
    assert on_acknowledge(rows=rows, followed_up=FOLLOWED_UP).add == (
        FollowUp(Kind.SLACK_CHANNEL, "C1", Event.ACKNOWLEDGED, 1),
    )
    ended = on_end(rows=rows, followed_up=FOLLOWED_UP)
    assert ended.add == (FollowUp(Kind.SLACK_CHANNEL, "C1", Event.ENDED, 1),)
    assert ended.skip == (Skip(3, "the card was closed before it was sent"),)


def test_a_follow_up_waits_for_its_predecessor_and_is_dropped_if_the_trigger_never_landed():
    trigger = row(2, Kind.PAGERDUTY, Event.LEVEL, State.PENDING, 1)
    assert follow_up_ready(predecessor=trigger)[0] is Readiness.WAIT
    assert follow_up_ready(predecessor=row(2, Kind.PAGERDUTY, Event.LEVEL, State.SENT, 1))[0] is Readiness.READY
    verdict, why = follow_up_ready(predecessor=row(2, Kind.PAGERDUTY, Event.LEVEL, State.FAILED, 6))
    assert verdict is Readiness.SKIP and "failed" in why
    # A failed acknowledge does not stop the resolve: resolving still closes the alert.
    assert (
        follow_up_ready(predecessor=row(9, Kind.PAGERDUTY, Event.ACKNOWLEDGED, State.FAILED, 6))[0] is Readiness.READY
    )
