"""The pure rules of snoozes and acknowledgement timeouts (operations.notify.policy, .rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from operations.notify.kinds import Kind
from operations.notify.policy import Directory, Level, Policy, Target, validate_policy
from operations.notify.rules import snooze_choices
from operations.notify.steps import (
    RunState,
    RunStatus,
    policy_ack_timeout,
    policy_acknowledge,
    policy_snooze,
    policy_step,
    policy_unacknowledge,
)

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
DIRECTORY = Directory(usernames={"alice"}, groups=set(), slack_app_configured=False)
POLICY = Policy(
    name="p",
    levels=(Level(300, (Target(Kind.USER, "alice"),)), Level(600, (Target(Kind.USER, "alice"),))),
    repeat_last_level=3,
    ack_timeout_s=1800,
)


def raw(**extra: object) -> dict:
    return {"name": "p", "levels": [{"wait_s": 300, "targets": [{"user": "alice"}]}], **extra}


@pytest.mark.parametrize("value", [59, 86401, 0, -60, 60.5, "1800", True])
def test_an_ack_timeout_outside_a_minute_to_a_day_is_refused(value) -> None:
    problems = validate_policy(raw(ack_timeout_s=value), directory=DIRECTORY)
    assert isinstance(problems, list) and [p.key for p in problems] == ["ack_timeout_s"]


def test_an_ack_timeout_is_kept_in_the_snapshot_and_old_snapshots_have_none() -> None:
    policy = validate_policy(raw(ack_timeout_s=60), directory=DIRECTORY)
    assert isinstance(policy, Policy) and policy.ack_timeout_s == 60
    assert Policy.from_json(policy.to_json()) == policy
    old = policy.to_json()
    del old["ack_timeout_s"]
    assert Policy.from_json(old).ack_timeout_s is None


def running_after_level_one() -> RunState:
    return policy_step(state=RunState.start(now=T0), policy=POLICY, now=T0).state


def test_a_snooze_holds_the_next_step_until_its_end_and_no_longer() -> None:
    state = policy_snooze(state=running_after_level_one(), until=T0 + timedelta(hours=1))
    assert not state.due(T0 + timedelta(minutes=59, seconds=59))
    plan = policy_step(state=state, policy=POLICY, now=T0 + timedelta(hours=1))
    assert [n.level for n in plan.notify] == [1]
    # A snooze shorter than the wait changes nothing.
    short = policy_snooze(state=running_after_level_one(), until=T0 + timedelta(minutes=1))
    assert short.next_step_at == T0 + timedelta(minutes=5)


def test_a_give_back_during_a_snooze_restarts_no_sooner_than_its_end() -> None:
    until = T0 + timedelta(hours=1)
    acked = policy_acknowledge(state=policy_snooze(state=running_after_level_one(), until=until), now=T0)
    restarted = policy_unacknowledge(state=acked, now=T0 + timedelta(minutes=10), restart_min_s=300)
    assert restarted.round == 1 and restarted.next_step_at == until


def test_an_acknowledgement_runs_out_after_the_timeout_and_starts_a_new_round() -> None:
    acked = policy_acknowledge(state=running_after_level_one(), now=T0, ack_timeout_s=POLICY.ack_timeout_s)
    assert acked.ack_expires_at == T0 + timedelta(minutes=30)
    assert policy_ack_timeout(state=acked, now=T0 + timedelta(minutes=29, seconds=59)) == acked
    restarted = policy_ack_timeout(state=acked, now=T0 + timedelta(minutes=30))
    assert (restarted.status, restarted.round, restarted.level, restarted.ack_expires_at) == (
        RunStatus.RUNNING,
        1,
        -1,
        None,
    )
    assert restarted.due(T0 + timedelta(minutes=30))
    # Without a timeout an acknowledgement holds until a decision.
    assert policy_acknowledge(state=running_after_level_one(), now=T0).ack_expires_at is None


def test_snoozes_end_no_later_than_the_deadline() -> None:
    assert snooze_choices(deadline_at=T0 + timedelta(hours=4), now=T0) == [15, 60, 240]
    assert snooze_choices(deadline_at=T0 + timedelta(minutes=59), now=T0) == [15]
    assert snooze_choices(deadline_at=T0 + timedelta(minutes=14), now=T0) == []
    assert snooze_choices(deadline_at=None, now=T0) == []
