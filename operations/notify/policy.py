"""Escalation policies: validation, the per-card policy run, and the one step function.

A policy is an ordered list of levels; each level names targets and a wait before the next level;
the last level may repeat up to ten times. Grafana OnCall's step vocabulary (notify, wait, repeat)
is the model, without schedules or rotations.

Everything here is pure: no database, no clock, no I/O. The services keep a `RunState` per card
in the database (PolicyRun) and call `policy_step` in the transaction that advances it, writing the
returned notifications as outbox rows in that same transaction (escalations/oncall/runs.py). Because a step is
computed from the stored state and writes its successor with a compare-and-set on `step_seq`, a
level is decided once and only once whatever process runs it, and a worker killed mid-step rolls
back both the advance and its notifications together.

`validate_policy` is the single definition of a valid policy: the admin form and the
`loadpolicies` command both call it (through operations.notify.store), and it names every problem
at once, like a profile's validation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from operations.notify.kinds import TARGETS, Kind, Ref, targets_in_order
from operations.validation import Problem

MAX_LEVELS = 10
MAX_TARGETS_PER_LEVEL = 20
REPEAT_RANGE = (0, 10)
# A wait is whole seconds: at least 1 (a wait <= 0 is refused), at most a day (a longer silence
# between levels is a policy nobody meant).
WAIT_RANGE_S = (1, 24 * 3600)
# An acknowledgement timeout shorter than a minute would page again before anyone could decide;
# longer than a day is an acknowledgement that never times out.
ACK_TIMEOUT_RANGE_S = (60, 24 * 3600)
NAME_MAX = 100

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
# The variable's name, never its value. Like a profile's credential variable it has a prefix of its
# own (ONCALL_), so a policy can never send one of pollerdash's settings or a provider's credential
# to a chat or a pager, and a profile can never send a routing key to a provider.
ENV_PREFIX = "ONCALL_"
_ENV_NAME = re.compile(r"ONCALL_[A-Z0-9_]{1,93}")
_SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{6,20}")
# Deliberately simple: one @, no spaces or control characters, a dot in the domain. Django's
# EmailValidator runs in the admin form as well; this keeps the pure check dependency-free.
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]+\.[^@\s\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Target:
    kind: Kind
    ref: str

    @property
    def key(self) -> str:
        """Stable identity inside a policy; carries env names, never secret values."""
        ref = self.ref.lower() if self.kind is Kind.EMAIL else self.ref
        return f"{self.kind}:{ref}"


@dataclass(frozen=True)
class Level:
    wait_s: int
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class Policy:
    """A validated policy. Stored as a snapshot on each card's run when the card opens, so an
    edit made while a card is open never rewrites what that card is doing (OnCall's rule)."""

    name: str
    levels: tuple[Level, ...]
    repeat_last_level: int
    # A card acknowledged but not decided within this goes back to the policy (None: never).
    ack_timeout_s: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "repeat_last_level": self.repeat_last_level,
            "ack_timeout_s": self.ack_timeout_s,
            "levels": [
                {"wait_s": level.wait_s, "targets": [{"kind": str(t.kind), "ref": t.ref} for t in level.targets]}
                for level in self.levels
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        return cls(
            name=data["name"],
            repeat_last_level=int(data["repeat_last_level"]),
            # Snapshots taken before 2.5 have no timeout.
            ack_timeout_s=None if data.get("ack_timeout_s") is None else int(data["ack_timeout_s"]),
            levels=tuple(
                Level(
                    wait_s=int(level["wait_s"]),
                    targets=tuple(Target(kind=Kind(t["kind"]), ref=t["ref"]) for t in level["targets"]),
                )
                for level in data["levels"]
            ),
        )

    @property
    def total_sends(self) -> int:
        """Level steps in one round: every level once, then the last level's repetitions."""
        return len(self.levels) + self.repeat_last_level


# --- validation -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Directory:
    """What exists, read by the caller before validating (the check itself stays pure)."""

    usernames: Set[str]
    groups: Set[str]
    slack_app_configured: bool


def validate_policy(raw: object, *, directory: Directory) -> Policy | list[Problem]:
    """The policy, or every problem with it. The whole policy is refused if any part is wrong."""
    if not isinstance(raw, Mapping):
        return [Problem("policy", "must be a table")]
    problems: list[Problem] = []
    unknown = sorted(set(raw) - {"name", "levels", "repeat_last_level", "ack_timeout_s", "description"})
    problems += [
        Problem(key, "is not a policy key (name, description, levels, repeat_last_level, ack_timeout_s)")
        for key in unknown
    ]
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        problems.append(Problem("name", "must be 1-100 of a-z 0-9 _ - starting with a letter or digit"))
    repeat = raw.get("repeat_last_level", 0)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not REPEAT_RANGE[0] <= repeat <= REPEAT_RANGE[1]:
        problems.append(
            Problem("repeat_last_level", f"must be a whole number from {REPEAT_RANGE[0]} to {REPEAT_RANGE[1]}")
        )
    ack_timeout = raw.get("ack_timeout_s")
    low, high = ACK_TIMEOUT_RANGE_S
    if ack_timeout is not None and (
        isinstance(ack_timeout, bool) or not isinstance(ack_timeout, int) or not low <= ack_timeout <= high
    ):
        problems.append(Problem("ack_timeout_s", f"must be whole seconds from {low} to {high} (or left out)"))
    levels_raw = raw.get("levels")
    levels: list[Level] = []
    if not isinstance(levels_raw, Sequence) or isinstance(levels_raw, str | bytes) or not levels_raw:
        problems.append(Problem("levels", "needs at least one level"))
    elif len(levels_raw) > MAX_LEVELS:
        problems.append(Problem("levels", f"has {len(levels_raw)} levels; at most {MAX_LEVELS}"))
    else:
        for index, level_raw in enumerate(levels_raw):
            level, level_problems = _level(level_raw, where=f"levels[{index}]", directory=directory)
            problems += level_problems
            if level is not None:
                levels.append(level)
    if problems:
        return problems
    return Policy(
        # No problems, so every value above passed its check and has its type.
        name=name,  # type: ignore[arg-type]
        levels=tuple(levels),
        repeat_last_level=repeat,
        ack_timeout_s=ack_timeout,
    )


def _level(raw: object, *, where: str, directory: Directory) -> tuple[Level | None, list[Problem]]:
    if not isinstance(raw, Mapping):
        return None, [Problem(where, "must be a table with wait_s and targets")]
    problems = [
        Problem(f"{where}.{key}", "is not a level key (wait_s, targets)")
        for key in sorted(set(raw) - {"wait_s", "targets"})
    ]
    wait = raw.get("wait_s")
    if isinstance(wait, bool) or not isinstance(wait, int) or not WAIT_RANGE_S[0] <= wait <= WAIT_RANGE_S[1]:
        problems.append(
            Problem(f"{where}.wait_s", f"must be whole seconds from {WAIT_RANGE_S[0]} to {WAIT_RANGE_S[1]}")
        )
    targets_raw = raw.get("targets")
    targets: list[Target] = []
    if not isinstance(targets_raw, Sequence) or isinstance(targets_raw, str | bytes) or not targets_raw:
        problems.append(Problem(f"{where}.targets", "needs at least one target"))
    elif len(targets_raw) > MAX_TARGETS_PER_LEVEL:
        problems.append(Problem(f"{where}.targets", f"has {len(targets_raw)} targets; at most {MAX_TARGETS_PER_LEVEL}"))
    else:
        seen: set[str] = set()
        for index, target_raw in enumerate(targets_raw):
            target, problem = _target(target_raw, where=f"{where}.targets[{index}]", directory=directory)
            if problem is not None:
                problems.append(problem)
            elif target is not None:
                if target.key in seen:
                    problems.append(Problem(f"{where}.targets[{index}]", f"repeats {target.kind} {target.ref!r}"))
                seen.add(target.key)
                targets.append(target)
    if problems:
        return None, problems
    # No problems, so every value above passed its check and has its type.
    return Level(wait_s=wait, targets=tuple(targets)), []  # type: ignore[arg-type]


def _target(raw: object, *, where: str, directory: Directory) -> tuple[Target | None, Problem | None]:
    """A target is a one-key table: {user = "alice"}, {pagerduty = "ONCALL_PD_PAYMENTS"}, ..."""
    kinds = ", ".join(str(k) for k in targets_in_order())
    if not isinstance(raw, Mapping) or len(raw) != 1:
        return None, Problem(where, f"must be one of {{{kinds}}} = value")
    ((kind_raw, ref),) = raw.items()
    kind = next((k for k in TARGETS if k.value == kind_raw), None)
    if kind is None:
        return None, Problem(where, f"{kind_raw!r} is not a target kind ({kinds})")
    if not isinstance(ref, str) or not ref or ref != ref.strip():
        return None, Problem(f"{where}.{kind}", "must be a non-empty string without surrounding spaces")
    problem = _REF_CHECKS[TARGETS[kind]](ref, directory)
    if problem:
        return None, Problem(f"{where}.{kind}", problem)
    return Target(kind=kind, ref=ref), None


def _user_problem(ref: str, directory: Directory) -> str:
    return "" if ref in directory.usernames else f"no user named {ref!r}"


def _group_problem(ref: str, directory: Directory) -> str:
    return "" if ref in directory.groups else f"no group named {ref!r}"


def _email_problem(ref: str, directory: Directory) -> str:
    return "" if len(ref) <= 254 and _EMAIL.fullmatch(ref) else "is not an email address"


def _env_problem(ref: str, directory: Directory) -> str:
    if not _ENV_NAME.fullmatch(ref):
        # The commonest mistake is pasting the secret itself: say so without echoing it.
        return f"must name an environment variable ({ENV_PREFIX} then A-Z, 0-9, _), not hold the secret itself"
    if ref.endswith("_FILE"):
        return "name the variable itself: its _FILE form is read too"
    return ""


def _channel_problem(ref: str, directory: Directory) -> str:
    if not _SLACK_CHANNEL.fullmatch(ref):
        return "must be a Slack channel id such as C0123456789"
    if not directory.slack_app_configured:
        return "needs the Slack app (SLACK_BOT_TOKEN); use slack_webhook without it"
    return ""


# How each kind of value is checked (operations.notify.kinds.TARGETS says which kind holds which).
_REF_CHECKS: Mapping[Ref, Callable[[str, Directory], str]] = {
    Ref.USER: _user_problem,
    Ref.GROUP: _group_problem,
    Ref.EMAIL: _email_problem,
    Ref.ENV: _env_problem,
    Ref.CHANNEL: _channel_problem,
}


# --- the run of a policy on one card ------------------------------------------------------------------


class RunStatus(StrEnum):
    RUNNING = "running"  # a step is due at next_step_at
    ACKNOWLEDGED = "acknowledged"  # someone is on it: no further level is sent
    EXHAUSTED = "exhausted"  # every level and repetition went out and the last wait ran out
    ENDED = "ended"  # the card was decided or superseded


@dataclass(frozen=True)
class RunState:
    """What the database keeps per card. `level` is the index of the last level sent (-1: none
    yet); `round` grows each time an unacknowledge restarts the policy; `step_seq` grows with
    every change and is the compare-and-set fence of the row. `round_started_at`: when the current
    round began (None for runs older than it: their next give-back restarts); `held_step_at`: while
    acknowledged, when the next step would have been due, so a give-back that does not restart the
    round resumes it on its own schedule."""

    status: RunStatus
    round: int
    level: int
    repetition: int
    next_step_at: datetime | None
    step_seq: int
    round_started_at: datetime | None = None
    held_step_at: datetime | None = None
    # A responder's snooze: no step is due before it (a give-back and an acknowledgement timeout
    # restart the policy no earlier either).
    snoozed_until: datetime | None = None
    # Acknowledged under a policy with ack_timeout_s: when the policy starts again if nobody decided.
    ack_expires_at: datetime | None = None

    @classmethod
    def start(cls, *, now: datetime) -> RunState:
        _aware(now)
        return cls(
            status=RunStatus.RUNNING,
            round=0,
            level=-1,
            repetition=0,
            next_step_at=now,
            step_seq=0,
            round_started_at=now,
        )

    def due(self, now: datetime) -> bool:
        return (
            self.status is RunStatus.RUNNING
            and self.next_step_at is not None
            and self.next_step_at <= now
            and not self.snoozed(now)
        )

    def snoozed(self, now: datetime) -> bool:
        return self.snoozed_until is not None and now < self.snoozed_until

    def ack_expired(self, now: datetime) -> bool:
        return self.status is RunStatus.ACKNOWLEDGED and self.ack_expires_at is not None and self.ack_expires_at <= now

    def not_before(self, when: datetime) -> datetime:
        """`when`, or the snooze's end if that is later."""
        return max(when, self.snoozed_until) if self.snoozed_until is not None else when


@dataclass(frozen=True)
class Notify:
    """One target to notify for one level send. `slot` is the outbox row's unique identity."""

    round: int
    level: int
    repetition: int
    target: Target

    @property
    def slot(self) -> tuple[int, int, int, str]:
        return (self.round, self.level, self.repetition, self.target.key)


@dataclass(frozen=True)
class StepPlan:
    state: RunState
    notify: tuple[Notify, ...]


def policy_step(*, state: RunState, policy: Policy, now: datetime) -> StepPlan:
    """Advance a due run by one step: the next level (or the last level's next repetition), or
    exhaustion once the last wait ran out. Not due: the same state and nothing to send, so a
    duplicate or early call is harmless.

    The next step is timed from `now`, the moment this level actually went out, not from when it
    was due: a dispatcher that was down for an hour then sends the levels one wait apart instead
    of all at once, so everyone paged still gets the whole wait to acknowledge.
    """
    _aware(now)
    if not state.due(now):
        return StepPlan(state=state, notify=())
    last = len(policy.levels) - 1
    if state.level < 0:
        level, repetition = 0, 0
    elif state.level < last:
        level, repetition = state.level + 1, 0
    elif state.repetition < policy.repeat_last_level:
        level, repetition = last, state.repetition + 1
    else:
        exhausted = replace(state, status=RunStatus.EXHAUSTED, next_step_at=None, step_seq=state.step_seq + 1)
        return StepPlan(state=exhausted, notify=())
    chosen = policy.levels[level]
    notify = tuple(Notify(round=state.round, level=level, repetition=repetition, target=t) for t in chosen.targets)
    advanced = replace(
        state,
        level=level,
        repetition=repetition,
        next_step_at=now + timedelta(seconds=chosen.wait_s),
        step_seq=state.step_seq + 1,
    )
    return StepPlan(state=advanced, notify=notify)


def policy_acknowledge(*, state: RunState, now: datetime | None = None, ack_timeout_s: int | None = None) -> RunState:
    """Someone is on it: no further level goes out. Outbox rows of this run not yet attempted
    are marked skipped by the caller in the same transaction. When the next step was due is kept
    (`held_step_at`), for a give-back that resumes the round instead of restarting it. Under a
    policy with `ack_timeout_s`, the acknowledgement runs out that long after `now` (a take-over
    keeps the first acknowledgement's clock: the card has been undecided since then)."""
    if state.status is not RunStatus.RUNNING:
        return state
    expires = None
    if ack_timeout_s is not None and now is not None:
        _aware(now)
        expires = now + timedelta(seconds=ack_timeout_s)
    return replace(
        state,
        status=RunStatus.ACKNOWLEDGED,
        next_step_at=None,
        held_step_at=state.next_step_at,
        ack_expires_at=expires,
        step_seq=state.step_seq + 1,
    )


def policy_ack_timeout(*, state: RunState, now: datetime) -> RunState:
    """The acknowledgement ran out with the card undecided: the policy starts again from its first
    level as a new round, as PagerDuty re-triggers an incident after its acknowledgement timeout
    (no sooner than a snooze's end). Not expired: the same state."""
    _aware(now)
    if not state.ack_expired(now):
        return state
    return RunState(
        status=RunStatus.RUNNING,
        round=state.round + 1,
        level=-1,
        repetition=0,
        next_step_at=state.not_before(now),
        step_seq=state.step_seq + 1,
        round_started_at=now,
        snoozed_until=state.snoozed_until,
    )


def policy_snooze(*, state: RunState, until: datetime) -> RunState:
    """A responder silenced the card's reminders until `until`: no step before it, whether the run is
    running (the next step moves to `until` if it was due sooner) or acknowledged (a give-back or
    an acknowledgement timeout starts it no sooner). A later snooze replaces an earlier one."""
    _aware(until)
    if state.status in (RunStatus.EXHAUSTED, RunStatus.ENDED):
        return state
    snoozed = replace(state, snoozed_until=until, step_seq=state.step_seq + 1)
    if state.status is RunStatus.RUNNING and state.next_step_at is not None:
        return replace(snoozed, next_step_at=max(state.next_step_at, until))
    return snoozed


def policy_unacknowledge(*, state: RunState, now: datetime, restart_min_s: float = 0) -> RunState:
    """Nobody is on it any more: the policy starts again from its first level, as a new round (so
    the outbox identity of every send differs from the first round's) - at most once per
    `restart_min_s` per card. A give-back sooner after the round began resumes that round where
    it was, nothing resent, its next step due when it was due before the acknowledgement (or at
    once if that time has passed): toggling acknowledge and give back can neither page anyone
    again and again nor hold the next level back."""
    _aware(now)
    if state.status is not RunStatus.ACKNOWLEDGED:
        return state
    held = state.held_step_at
    if held is not None and resumes(state=state, now=now, restart_min_s=restart_min_s):
        return replace(
            state,
            status=RunStatus.RUNNING,
            next_step_at=state.not_before(max(now, held)),
            held_step_at=None,
            ack_expires_at=None,
            step_seq=state.step_seq + 1,
        )
    return RunState(
        status=RunStatus.RUNNING,
        round=state.round + 1,
        level=-1,
        repetition=0,
        next_step_at=state.not_before(now),
        step_seq=state.step_seq + 1,
        round_started_at=now,
        snoozed_until=state.snoozed_until,
    )


def resumes(*, state: RunState, now: datetime, restart_min_s: float) -> bool:
    """Whether a give-back now resumes the acknowledged round instead of restarting the policy:
    the round began less than `restart_min_s` ago and had a step to come back to."""
    return (
        state.status is RunStatus.ACKNOWLEDGED
        and state.round_started_at is not None
        and state.held_step_at is not None
        and state.level >= 0
        and now - state.round_started_at < timedelta(seconds=restart_min_s)
    )


def policy_end(*, state: RunState) -> RunState:
    """The card was decided or superseded: nothing more is ever sent for it."""
    if state.status is RunStatus.ENDED:
        return state
    return replace(state, status=RunStatus.ENDED, next_step_at=None, ack_expires_at=None, step_seq=state.step_seq + 1)


def _aware(value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timezone-aware datetimes only")
