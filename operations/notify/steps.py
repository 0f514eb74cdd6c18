"""The run of an escalation policy on one card: its stored state and the one step function.

Everything here is pure: no database, no clock, no I/O. The services keep a `RunState` per card
in the database (PolicyRun) and call `policy_step` in the transaction that advances it, writing the
returned notifications as outbox rows in that same transaction (escalations/oncall/runs.py). Because a step is
computed from the stored state and writes its successor with a compare-and-set on `step_seq`, a
level is decided once and only once whatever process runs it, and a worker killed mid-step rolls
back both the advance and its notifications together.

What a valid policy is (its levels, targets and their validation) is in operations.notify.policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from operations.notify.policy import Policy, Target


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
