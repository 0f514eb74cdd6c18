"""Each card's run of its escalation policy, and the outbox rows every step writes.

- `start` (card opened, in the opening transaction): the run begins and level 1 is written at once,
  so a rolled-back card notifies nobody.
- `advance_due` (the dispatcher, every pass): each due run is stepped in ONE short transaction (the
  run row locked with SKIP LOCKED on PostgreSQL; a compare-and-set on `step_seq` everywhere) that
  writes the next level's rows; a process killed anywhere in it commits nothing, and two
  dispatchers never send a level twice (the unique slot of NotificationDelivery backs this up).
- `snooze` (the act's transaction): no step before the snooze's end.
- Every act that changes what a Slack-app post shows also updates it in place (escalations.oncall.
  updates): a give-back, a snooze and its end, a take-over, an acknowledgement that timed out.
- `expire_acknowledgements` (the dispatcher, every pass): a run acknowledged longer than its policy's
  ack_timeout_s with the card undecided starts again from level 1, its messages headed "Still
  undecided 30 min after bob acknowledged"; the card's acknowledgement is withdrawn in the same
  transaction (operations.lifecycle.ownership.expire_acknowledgement), so acknowledging stops it again.
- `acknowledge` / `unacknowledge` / `end` (the human act's transaction): the run stops, restarts
  from level 1 as a new round (at most once per NOTIFY_RESTART_MIN_S; a give-back sooner resumes
  the round where it was), or ends; rows not attempted yet are skipped with the reason, and each
  PagerDuty or Slack-app stream gets its ordered follow-up (operations.notify.rules). The rows a
  person's act writes (a restart's level, a hand-over, a take-over) record who caused them, so they
  count against that person's hourly budget (escalations.oncall.caps).
- The rows themselves, and the messages outside the levels (`tell`, `reply_to_click`), are written
  by escalations.oncall.outbox_rows.

Which channels have follow-ups is each channel's own word (escalations.oncall.channels.registry).
Nothing here does I/O besides the database: workers send the rows (escalations.oncall.send).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from escalations.oncall import caps, outbox_rows, updates
from escalations.oncall.channels.registry import FOLLOWED_UP
from escalations.oncall.outbox import rule_row
from escalations.oncall.updates import follow_up_row
from operations.cards.options import human_duration
from operations.lifecycle import ownership
from operations.models import Escalation, NotificationDelivery, PolicyRun
from operations.notify import rules
from operations.notify.kinds import Kind
from operations.notify.policy import Policy
from operations.notify.recipients import expand
from operations.notify.steps import (
    RunState,
    RunStatus,
    policy_ack_timeout,
    policy_acknowledge,
    policy_end,
    policy_snooze,
    policy_step,
    policy_unacknowledge,
)
from operations.notify.store import policy_for

logger = logging.getLogger(__name__)

STEPS_PER_PASS = 100
State = NotificationDelivery.State


def should_notify_opened(*, escalation: Escalation) -> bool:
    """Whether a newly opened card starts its own policy run: one run per outage.

    A card that joined an open group (same provider account and reason within CARD_GROUP_WINDOW_S)
    starts none; the group's first card's run speaks for the whole group, and its messages say how
    many cards the group holds and link to the group page.
    """
    # group_id is checked, so the group is there (mypy does not tie the two fields).
    group_first = escalation.group.first_card_id if escalation.group_id is not None else None  # type: ignore[union-attr]
    return group_first in (None, escalation.pk)


# --- starting and stepping -----------------------------------------------------------------------------


def start(*, escalation: Escalation, now: datetime) -> PolicyRun | None:
    """The card's run, with level 1 written; None when the card notifies nobody (no policy applies)."""
    if not should_notify_opened(escalation=escalation):
        return None
    policy = policy_for(profile=escalation.operation.provider)
    if policy is None:
        return None
    state = RunState.start(now=now)
    run = PolicyRun.objects.create(
        escalation=escalation,
        policy_name=policy.name,
        snapshot=policy.to_json(),
        status=str(state.status),
        next_step_at=now,
        round_started_at=now,
        updated_at=now,
    )
    _advance(run, state=state, policy=policy, now=now)
    return run


def advance_due(*, now: datetime | None = None, limit: int = STEPS_PER_PASS) -> int:
    """Step every due run once (the dispatcher's pass); returns how many steps were taken."""
    now = now or timezone.now()
    due = list(
        PolicyRun.objects.filter(status=PolicyRun.Status.RUNNING, next_step_at__lte=now)
        .order_by("next_step_at")
        .values_list("pk", flat=True)[:limit]
    )
    taken = 0
    for escalation_id in due:
        with transaction.atomic():
            # Another dispatcher stepping it right now: leave it to that one (SQLite's transactions
            # are serial, and Django takes no row lock there).
            run = PolicyRun.objects.filter(pk=escalation_id).select_for_update(skip_locked=True).first()
            if run is not None and _advance(run, state=_state(run), policy=Policy.from_json(run.snapshot), now=now):
                taken += 1
    return taken


def _advance(
    run: PolicyRun, *, state: RunState, policy: Policy, now: datetime, caused_by: User | None = None, head: str = ""
) -> bool:
    plan = policy_step(state=state, policy=policy, now=now)
    if plan.state == state or not _write(run, old=state, new=plan.state, now=now):
        return False
    outbox_rows.insert_rows(
        run.pk, expand(plan.notify, people=outbox_rows.people_of(plan.notify)), now=now, caused_by=caused_by, note=head
    )
    return True


def expire_acknowledgements(*, now: datetime | None = None, limit: int = STEPS_PER_PASS) -> int:
    """Restart every run whose acknowledgement timed out (the dispatcher's pass), each in one short
    transaction: the card's acknowledgement withdrawn, the policy from level 1 as a new round (at
    once, or at the end of a snooze), its first level headed with why. Returns how many."""
    now = now or timezone.now()
    due = list(
        PolicyRun.objects.filter(status=PolicyRun.Status.ACKNOWLEDGED, ack_expires_at__lte=now)
        .order_by("ack_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    restarted = 0
    for escalation_id in due:
        with transaction.atomic():
            run = PolicyRun.objects.filter(pk=escalation_id).select_for_update(skip_locked=True).first()
            if run is None:
                continue
            old = _state(run)
            new = policy_ack_timeout(state=old, now=now)
            if new == old:
                continue
            policy = Policy.from_json(run.snapshot)
            timeout_s = policy.ack_timeout_s or 0
            holder = ownership.expire_acknowledgement(escalation_id=escalation_id, timeout_s=timeout_s, now=now)
            if not _write(run, old=old, new=new, now=now):
                raise RuntimeError(f"policy run of card {escalation_id} changed under its lock")
            after = f" after {holder} acknowledged" if holder else " after it was acknowledged"
            head = f"Still undecided {human_duration(timedelta(seconds=timeout_s))}{after}"
            updates.update_in_place(escalation_id=escalation_id, now=now)
            _advance(run, state=new, policy=policy, now=now, head=head)
            restarted += 1
    return restarted


def _state(run: PolicyRun) -> RunState:
    return RunState(
        status=RunStatus(run.status),
        round=run.round,
        level=run.level,
        repetition=run.repetition,
        next_step_at=run.next_step_at,
        step_seq=run.step_seq,
        round_started_at=run.round_started_at,
        held_step_at=run.held_step_at,
        snoozed_until=run.snoozed_until,
        ack_expires_at=run.ack_expires_at,
    )


def _write(run: PolicyRun, *, old: RunState, new: RunState, now: datetime) -> bool:
    """The compare-and-set on step_seq: False when another process moved the run first."""
    fields = {
        "status": str(new.status),
        "round": new.round,
        "level": new.level,
        "repetition": new.repetition,
        "next_step_at": new.next_step_at,
        "step_seq": new.step_seq,
        "round_started_at": new.round_started_at,
        "held_step_at": new.held_step_at,
        "snoozed_until": new.snoozed_until,
        "ack_expires_at": new.ack_expires_at,
        "updated_at": now,
    }
    written = PolicyRun.objects.filter(pk=run.pk, step_seq=old.step_seq).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return written == 1


# --- human acts ------------------------------------------------------------------------------------------


def acknowledge(*, escalation: Escalation, now: datetime) -> None:
    """Someone is on it: no further level goes out (until the policy's ack_timeout_s, if it has one);
    pagers and Slack-app posts are told."""

    def act(state: RunState, run: PolicyRun) -> RunState:
        timeout = Policy.from_json(run.snapshot).ack_timeout_s
        return policy_acknowledge(state=state, now=now, ack_timeout_s=timeout)

    _close(escalation=escalation, now=now, act=act, changes=rules.on_acknowledge)


def snooze(*, escalation: Escalation, until: datetime, now: datetime) -> None:
    """No step before `until`; the Slack-app posts show the snooze now, and its end at `until`."""
    run = _locked_run(escalation)
    if run is None:
        return
    old = _state(run)
    new = policy_snooze(state=old, until=until)
    if new != old and not _write(run, old=old, new=new, now=now):
        raise RuntimeError(f"policy run of card {escalation.pk} changed under its lock")
    updates.update_in_place(escalation_id=escalation.pk, now=now)
    updates.update_in_place(escalation_id=escalation.pk, now=now, at=until)


def unacknowledge(*, escalation: Escalation, now: datetime, by: User | None = None) -> None:
    """Nobody is on it any more: the policy starts again from level 1, as a new round, at once, its
    messages counted against `by`'s budget - or, within NOTIFY_RESTART_MIN_S of the round's start,
    resumes that round on its own schedule, nothing resent."""
    run = _locked_run(escalation)
    if run is None:
        return
    old = _state(run)
    new = policy_unacknowledge(state=old, now=now, restart_min_s=settings.NOTIFY_RESTART_MIN_S)
    if new == old:
        return
    if not _write(run, old=old, new=new, now=now):
        raise RuntimeError(f"policy run of card {escalation.pk} changed under its lock")
    restarted = new.round != old.round
    if not restarted:
        caps.count_resumed(now=now)
    # The posts show who gave it back before a restart's new post goes out.
    updates.update_in_place(escalation_id=escalation.pk, now=now)
    # A resumed round's step that fell due while the card was held is the schedule's, not the act's.
    _advance(run, state=new, policy=Policy.from_json(run.snapshot), now=now, caused_by=by if restarted else None)


def end(*, escalation: Escalation, now: datetime) -> None:
    """The card was decided or superseded: nothing more is sent but the follow-ups that close it."""
    _close(escalation=escalation, now=now, act=lambda s, _run: policy_end(state=s), changes=rules.on_end)


def _locked_run(escalation: Escalation) -> PolicyRun | None:
    return PolicyRun.objects.filter(pk=escalation.pk).select_for_update().first()


def _close(
    *,
    escalation: Escalation,
    now: datetime,
    act: Callable[[RunState, PolicyRun], RunState],
    changes: Callable[..., rules.Changes],
) -> None:
    run = _locked_run(escalation)
    if run is None:
        return
    old = _state(run)
    new = act(old, run)
    if new != old and not _write(run, old=old, new=new, now=now):
        raise RuntimeError(f"policy run of card {escalation.pk} changed under its lock")
    rows = list(NotificationDelivery.objects.filter(escalation_id=escalation.pk).exclude(channel=Kind.SLACK_REPLY))
    plan = changes(rows=[rule_row(r) for r in rows], followed_up=FOLLOWED_UP)
    by_id = {row.pk: row for row in rows}
    for skip in plan.skip:
        NotificationDelivery.objects.filter(pk=skip.row_id, state=State.PENDING, attempts=0).update(
            state=State.SKIPPED, detail=skip.reason, next_attempt_at=None, finished_at=now
        )
    NotificationDelivery.objects.bulk_create(
        follow_up_row(
            escalation.pk, follow, display=by_id[follow.after_row_id].display, now=now, due=now, round_=run.round
        )
        for follow in plan.add
    )
    if changes is rules.on_acknowledge:
        # Acknowledged again (a take-over, after a give-back): no new acknowledge follows a stream
        # already acknowledged, yet its post must show who holds the card now.
        announced = {(follow.channel, follow.address) for follow in plan.add}
        updates.update_in_place(escalation_id=escalation.pk, now=now, announced=announced)


# --- cards open before policies existed -----------------------------------------------------------------


def adopt_open_cards(**kwargs: object) -> int:
    """post_migrate: open cards without a run start the policy they follow now (see migration 0011)."""
    if PolicyRun._meta.db_table not in connection.introspection.table_names():
        return 0
    adopted = 0
    now = timezone.now()
    orphans = Escalation.objects.filter(Q(state=Escalation.State.OPEN) & Q(policy_run__isnull=True))
    for escalation in orphans.select_related("operation__provider"):
        with transaction.atomic():
            if start(escalation=escalation, now=now) is not None:
                adopted += 1
    if adopted:
        logger.info("started escalation policies for %s card(s) open before policies existed", adopted)
    return adopted
