"""Escalation policies: validation names every problem; the step function's guarantees hold for
any policy and any timing of the dispatcher (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operations.notify.kinds import Kind
from operations.notify.policy import Directory, Level, Policy, Problem, Target, validate_policy
from operations.notify.steps import (
    RunState,
    RunStatus,
    policy_acknowledge,
    policy_end,
    policy_step,
    policy_unacknowledge,
)

T0 = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)
DIRECTORY = Directory(usernames={"alice", "bob"}, groups={"oncall"}, slack_app_configured=False)


def problems_of(raw: object) -> list[str]:
    result = validate_policy(raw, directory=DIRECTORY)
    assert isinstance(result, list), f"expected problems, got {result}"
    return [str(p) for p in result]


# --- validation --------------------------------------------------------------------------------------


def test_a_valid_policy_is_read_whole():
    policy = validate_policy(
        {
            "name": "payments",
            "repeat_last_level": 2,
            "levels": [
                {"wait_s": 300, "targets": [{"user": "alice"}, {"email": "team@example.com"}]},
                {"wait_s": 600, "targets": [{"group": "oncall"}, {"pagerduty": "ONCALL_PD_PAYMENTS"}]},
            ],
        },
        directory=DIRECTORY,
    )
    assert isinstance(policy, Policy)
    assert [len(level.targets) for level in policy.levels] == [2, 2]
    assert policy.levels[1].targets[1] == Target(Kind.PAGERDUTY, "ONCALL_PD_PAYMENTS")
    assert Policy.from_json(policy.to_json()) == policy


def test_a_teams_target_names_the_variable_that_holds_its_workflows_url():
    raw = {"name": "chat", "levels": [{"wait_s": 60, "targets": [{"teams_webhook": "ONCALL_TEAMS_PAYMENTS"}]}]}
    policy = validate_policy(raw, directory=DIRECTORY)
    assert isinstance(policy, Policy)
    assert policy.levels[0].targets == (Target(Kind.TEAMS_WEBHOOK, "ONCALL_TEAMS_PAYMENTS"),)
    # The Workflows URL carries its own signature (sig=...): pasted here, it is refused, never echoed.
    pasted = "https://prod-01.westeurope.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t"
    problems = problems_of({"name": "chat", "levels": [{"wait_s": 60, "targets": [{"teams_webhook": pasted}]}]})
    assert problems == [
        "levels[0].targets[0].teams_webhook: must name an environment variable (ONCALL_ then A-Z, 0-9, _),"
        " not hold the secret itself"
    ]
    assert not any("s3cr3t" in problem for problem in problems)


def test_slack_reply_is_a_channel_not_a_target():
    problems = problems_of({"name": "p", "levels": [{"wait_s": 60, "targets": [{"slack_reply": "x"}]}]})
    assert problems == [
        "levels[0].targets[0]: 'slack_reply' is not a target kind"
        " (user, group, email, slack_webhook, slack_channel, pagerduty, teams_webhook)"
    ]


def test_every_problem_is_named_at_once():
    found = problems_of(
        {
            "name": "Bad Name",
            "repeat_last_level": 11,
            "levels": [
                {"wait_s": 0, "targets": [{"user": "carol"}]},
                {"wait_s": -5, "targets": [{"group": "nobody"}, {"pagerduty": "0123456789abcdef0123456789abcdef"}]},
                {"wait_s": 60, "targets": []},
            ],
        }
    )
    assert found == [
        "name: must be 1-100 of a-z 0-9 _ - starting with a letter or digit",
        "repeat_last_level: must be a whole number from 0 to 10",
        "levels[0].wait_s: must be whole seconds from 1 to 86400",
        "levels[0].targets[0].user: no user named 'carol'",
        "levels[1].wait_s: must be whole seconds from 1 to 86400",
        "levels[1].targets[0].group: no group named 'nobody'",
        "levels[1].targets[1].pagerduty: must name an environment variable (ONCALL_ then A-Z, 0-9, _),"
        " not hold the secret itself",
        "levels[2].targets: needs at least one target",
    ]


def test_a_pasted_secret_is_refused_without_being_echoed():
    secret = "https://hooks.slack.com/services/T000/B000/abcdefghijklmnop"
    found = problems_of({"name": "p", "levels": [{"wait_s": 60, "targets": [{"slack_webhook": secret}]}]})
    assert len(found) == 1 and secret not in found[0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"name": "p", "levels": []}, "levels: needs at least one level"),
        ({"name": "p"}, "levels: needs at least one level"),
        (
            {"name": "p", "repeat_last_level": True, "levels": [{"wait_s": 1, "targets": [{"user": "alice"}]}]},
            "repeat_last_level: must be a whole number from 0 to 10",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 1.5, "targets": [{"user": "alice"}]}]},
            "levels[0].wait_s: must be whole seconds from 1 to 86400",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"phone": "+1555"}]}]},
            "levels[0].targets[0]: 'phone' is not a target kind"
            " (user, group, email, slack_webhook, slack_channel, pagerduty, teams_webhook)",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"user": "alice"}, {"user": "alice"}]}]},
            "levels[0].targets[1]: repeats user 'alice'",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"slack_channel": "C0123456789"}]}]},
            "levels[0].targets[0].slack_channel: needs the Slack app (SLACK_BOT_TOKEN); use slack_webhook without it",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"email": "not an address"}]}]},
            "levels[0].targets[0].email: is not an email address",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"user": "alice"}], "repeat": 2}]},
            "levels[0].repeat: is not a level key (wait_s, targets)",
        ),
        (
            # A variable outside the ONCALL_ family could be one of pollerdash's settings or a
            # provider's credential: never sent to a pager.
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"pagerduty": "SECRET_KEY"}]}]},
            "levels[0].targets[0].pagerduty: must name an environment variable (ONCALL_ then A-Z, 0-9, _),"
            " not hold the secret itself",
        ),
        (
            {"name": "p", "levels": [{"wait_s": 60, "targets": [{"slack_webhook": "ONCALL_HOOK_FILE"}]}]},
            "levels[0].targets[0].slack_webhook: name the variable itself: its _FILE form is read too",
        ),
        ("not a table", "policy: must be a table"),
    ],
)
def test_bad_input_is_named(raw, expected):
    assert expected in problems_of(raw)


# --- the step function ------------------------------------------------------------------------------------

TWO_LEVELS = Policy(
    name="p",
    repeat_last_level=1,
    levels=(
        Level(wait_s=300, targets=(Target(Kind.USER, "alice"),)),
        Level(wait_s=600, targets=(Target(Kind.GROUP, "oncall"), Target(Kind.PAGERDUTY, "ONCALL_PD_KEY"))),
    ),
)


def test_levels_go_out_one_wait_apart_then_the_last_repeats_then_it_is_exhausted():
    state = RunState.start(now=T0)
    sent = []
    now = T0
    while state.status is RunStatus.RUNNING:
        plan = policy_step(state=state, policy=TWO_LEVELS, now=now)
        sent += [(int((now - T0).total_seconds()), n.level, n.repetition, n.target.ref) for n in plan.notify]
        state = plan.state
        now = state.next_step_at or now
    assert sent == [
        (0, 0, 0, "alice"),
        (300, 1, 0, "oncall"),
        (300, 1, 0, "ONCALL_PD_KEY"),
        (900, 1, 1, "oncall"),
        (900, 1, 1, "ONCALL_PD_KEY"),
    ]
    # Exhausted once the last repetition's wait ran out, not when it was sent.
    assert state.status is RunStatus.EXHAUSTED and now == T0 + timedelta(seconds=1500)


def test_a_step_before_it_is_due_changes_nothing():
    state = policy_step(state=RunState.start(now=T0), policy=TWO_LEVELS, now=T0).state
    early = policy_step(state=state, policy=TWO_LEVELS, now=T0 + timedelta(seconds=299))
    assert early.state == state and early.notify == ()


def test_acknowledge_stops_and_unacknowledge_starts_a_new_round_from_level_one():
    state = policy_step(state=RunState.start(now=T0), policy=TWO_LEVELS, now=T0).state
    acked = policy_acknowledge(state=state)
    assert acked.status is RunStatus.ACKNOWLEDGED and acked.next_step_at is None
    assert policy_step(state=acked, policy=TWO_LEVELS, now=T0 + timedelta(hours=5)).notify == ()
    later = T0 + timedelta(minutes=20)
    resumed = policy_unacknowledge(state=acked, now=later)
    plan = policy_step(state=resumed, policy=TWO_LEVELS, now=later)
    assert [(n.round, n.level, n.target.ref) for n in plan.notify] == [(1, 0, "alice")]


def test_a_give_back_soon_after_the_round_began_resumes_it_without_resending():
    """Issue 24 item 3: each give-back restarted the policy at level 1, so toggling acknowledge and
    give back paged everyone again and again. Within restart_min_s of the round's start a
    give-back resumes the round on its own schedule instead."""
    state = policy_step(state=RunState.start(now=T0), policy=TWO_LEVELS, now=T0).state
    acked = policy_acknowledge(state=state)
    assert acked.held_step_at == T0 + timedelta(seconds=300)
    resumed = policy_unacknowledge(state=acked, now=T0 + timedelta(seconds=60), restart_min_s=300)
    assert (resumed.status, resumed.round, resumed.level) == (RunStatus.RUNNING, 0, 0)
    assert resumed.next_step_at == T0 + timedelta(seconds=300)
    assert policy_step(state=resumed, policy=TWO_LEVELS, now=T0 + timedelta(seconds=60)).notify == ()
    # Level 2 when it was due all along: toggling neither resends level 1 nor holds level 2 back.
    plan = policy_step(state=resumed, policy=TWO_LEVELS, now=T0 + timedelta(seconds=300))
    assert {(n.round, n.level) for n in plan.notify} == {(0, 1)}
    # A step that fell due while the card was held goes out as soon as it is given back.
    late = policy_unacknowledge(state=acked, now=T0 + timedelta(seconds=299), restart_min_s=600)
    assert late.next_step_at == T0 + timedelta(seconds=300)


def test_a_give_back_once_restart_min_s_has_passed_restarts_the_round():
    state = policy_step(state=RunState.start(now=T0), policy=TWO_LEVELS, now=T0).state
    acked = policy_acknowledge(state=state)
    later = T0 + timedelta(seconds=300)
    restarted = policy_unacknowledge(state=acked, now=later, restart_min_s=300)
    assert (restarted.round, restarted.level, restarted.round_started_at) == (1, -1, later)
    assert [(n.round, n.level) for n in policy_step(state=restarted, policy=TWO_LEVELS, now=later).notify] == [(1, 0)]
    # A run stored before rounds had a start restarts on its first give-back, as it always did.
    old = RunState(RunStatus.ACKNOWLEDGED, round=0, level=0, repetition=0, next_step_at=None, step_seq=3)
    assert policy_unacknowledge(state=old, now=T0, restart_min_s=300).round == 1


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        RunState.start(now=datetime(2026, 12, 1, 19, 0))  # noqa: DTZ001 - the point of the test


# --- properties ----------------------------------------------------------------------------------------------

targets = st.sampled_from(
    [Target(Kind.USER, "alice"), Target(Kind.EMAIL, "x@example.com"), Target(Kind.PAGERDUTY, "PD")]
)
levels = st.builds(
    Level,
    wait_s=st.integers(min_value=1, max_value=3600),
    targets=st.lists(targets, min_size=1, max_size=3, unique=True).map(tuple),
)
policies = st.builds(
    Policy,
    name=st.just("p"),
    levels=st.lists(levels, min_size=1, max_size=5).map(tuple),
    repeat_last_level=st.integers(0, 10),
)
# What the dispatcher does between calls: how late it is (0..2 h), and whether a human acts.
moves = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(min_value=0, max_value=7200)),
        st.tuples(st.just("early"), st.integers(min_value=1, max_value=3600)),
        st.tuples(st.sampled_from(["ack", "unack", "end"]), st.integers(min_value=0, max_value=600)),
    ),
    max_size=60,
)


def simulate(policy: Policy, script: list[tuple[str, int]], *, restart_min_s: float = 0, starts: list | None = None):
    """Run a policy through a script; return every send as (round, level, repetition, at).
    `starts` collects when each round began."""
    state = RunState.start(now=T0)
    now = T0
    sends: list[tuple[int, int, int, datetime]] = []
    starts = [] if starts is None else starts
    starts.append(T0)
    ended = False
    for move, seconds in script:
        if move == "tick":
            # The dispatcher comes round `seconds` after the step fell due (or now, if idle).
            now = max(now, state.next_step_at or now) + timedelta(seconds=seconds)
        elif move == "early":
            # A call before the step is due (time never goes backwards, so it may still be due).
            target = now + timedelta(seconds=seconds)
            if state.next_step_at is not None and target >= state.next_step_at:
                target = max(now, state.next_step_at - timedelta(microseconds=1))
            now = target
        else:
            now = now + timedelta(seconds=seconds)
            if move == "ack":
                state = policy_acknowledge(state=state)
            elif move == "unack":
                before = state
                state = policy_unacknowledge(state=state, now=now, restart_min_s=restart_min_s)
                if state.round != before.round:
                    starts.append(now)
            else:
                state = policy_end(state=state)
            ended = ended or move == "end"
            continue
        before = state
        plan = policy_step(state=state, policy=policy, now=now)
        state = plan.state
        levels_sent = {(n.round, n.level, n.repetition) for n in plan.notify}
        assert len(levels_sent) <= 1, "one step sends one level"
        if ended:
            assert plan.notify == ()
        if plan.notify:
            assert before.due(now)
            assert state.next_step_at is not None and state.next_step_at > now
            assert [n.target for n in plan.notify] == list(policy.levels[state.level].targets)
        sends += [(r, lvl, rep, now) for (r, lvl, rep) in levels_sent]
    return sends, state


@settings(max_examples=300, deadline=None)
@given(policy=policies, script=moves)
def test_no_level_is_ever_sent_twice_in_a_round(policy, script):
    sends, _ = simulate(policy, script)
    slots = [(r, lvl, rep) for r, lvl, rep, _ in sends]
    assert len(slots) == len(set(slots))


@settings(max_examples=300, deadline=None)
@given(policy=policies, script=moves)
def test_within_a_round_levels_go_in_order_without_skipping_and_each_gets_its_whole_wait(policy, script):
    sends, _ = simulate(policy, script)
    assert_rounds_in_order(policy, sends)


def assert_rounds_in_order(policy: Policy, sends: list[tuple[int, int, int, datetime]]) -> None:
    by_round: dict[int, list[tuple[int, int, datetime]]] = {}
    for r, lvl, rep, at in sends:
        by_round.setdefault(r, []).append((lvl, rep, at))
    last = len(policy.levels) - 1
    for steps in by_round.values():
        expected = [(i, 0) for i in range(len(policy.levels))] + [
            (last, k) for k in range(1, policy.repeat_last_level + 1)
        ]
        assert [(lvl, rep) for lvl, rep, _ in steps] == expected[: len(steps)]
        for (lvl, _, at), (_, _, next_at) in zip(steps, steps[1:], strict=False):
            assert next_at - at >= timedelta(seconds=policy.levels[lvl].wait_s)
        assert len(steps) <= policy.total_sends


@settings(max_examples=300, deadline=None)
@given(policy=policies, script=moves, restart_min_s=st.integers(0, 900))
def test_rounds_begin_at_least_restart_min_s_apart_and_a_resumed_round_never_resends(policy, script, restart_min_s):
    starts: list[datetime] = []
    sends, _ = simulate(policy, script, restart_min_s=restart_min_s, starts=starts)
    assert all(b - a >= timedelta(seconds=restart_min_s) for a, b in zip(starts, starts[1:], strict=False))
    slots = [(r, lvl, rep) for r, lvl, rep, _ in sends]
    assert len(slots) == len(set(slots))
    assert len(sends) <= len(starts) * policy.total_sends
    assert_rounds_in_order(policy, sends)


@settings(max_examples=200, deadline=None)
@given(policy=policies, lateness=st.lists(st.integers(0, 7200), min_size=0, max_size=40))
def test_left_alone_a_policy_sends_everything_once_then_is_exhausted(policy, lateness):
    script = [("tick", s) for s in lateness] + [("tick", 0)] * (policy.total_sends + 2 - len(lateness))
    sends, state = simulate(policy, script)
    assert len(sends) == policy.total_sends
    assert state.status is RunStatus.EXHAUSTED and state.next_step_at is None


@settings(max_examples=200, deadline=None)
@given(policy=policies, script=moves)
def test_step_seq_grows_with_every_change_so_a_stale_writer_loses_its_compare_and_set(policy, script):
    state = RunState.start(now=T0)
    now = T0
    for move, seconds in script:
        now += timedelta(seconds=seconds)
        if move == "ack":
            new = policy_acknowledge(state=state)
        elif move == "unack":
            new = policy_unacknowledge(state=state, now=now)
        elif move == "end":
            new = policy_end(state=state)
        else:
            new = policy_step(state=state, policy=policy, now=now).state
        assert (new == state) or new.step_seq == state.step_seq + 1
        state = new


def test_problem_str_names_the_key():
    assert str(Problem("levels[0].wait_s", "must be positive")) == "levels[0].wait_s: must be positive"
