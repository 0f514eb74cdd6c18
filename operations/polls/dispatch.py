"""The dispatcher's steps: hand due polls to django-q2 workers on time, one owner per operation.

django-q2's own scheduler ticks only every ~30 s and has no eta, so `manage.py dispatch_polls`
runs these steps in a loop on every host (any number of dispatchers may run at once):

1. `sweep_deadlines`: an operation whose deadline passed while no poll was due goes to a human
   (`deadline_exceeded`) at once, without a status request, unless a live lease holds it (the
   worker holding it escalates it itself); so does one whose business deadline passed where it
   binds (`business_deadline_passed`). `warn_business_deadlines`, on its own cadence, tells
   on-call once per operation that a business deadline is near (the profile's
   `business_deadline_warning_s`).
2. `requeue_expired_leases`: a claim whose lease ran out (its worker died or hung) loses it: the
   fence moves, so the late original can write nothing; the request it may have sent stays
   charged. The operation is due, so the next step claims it again.
3. `claim_due`: claims due operations and enqueues `operations.tasks.run_poll(operation_id,
   fence)` in the same transaction (the ORM broker writes into our database, so the claim and the
   task commit together or not at all). Rows are claimed with SELECT ... FOR UPDATE SKIP LOCKED on
   PostgreSQL and a compare-and-set update on SQLite. Per provider account, no more claims are
   admitted than the rate allowance has room for right now, and none while the account is paused.
4. `dispatch_callbacks`: hands due completion callbacks to workers.
   Then `audit.integrate.integrate_once`: pending audit entries join the Merkle tree.
5. `events.dispatcher_pass`: the layers above do their own due work (escalation policies and
   notifications, escalations.oncall), without the domain importing them.

The loop runs every step in a full pass every DISPATCH_SWEEP_EVERY_S and only step 3 in the
passes in between (`run_pass(claims_only=True)`). Every step returns how much work it did, so
tests call one step at a time and the loop goes round again at once while a step stopped at its
batch limit, sleeping otherwise (`idle_sleep_s`, or the shortest sleep after a pass that claimed).
`record_heartbeat` and `housekeeping` (operations/polls/heartbeat.py) run on their own cadence.
Locks are taken in the order used everywhere else: provider account rows (sorted by name), then
operation rows; an audit entry is a plain insert that takes no lock (operations.audit.entries).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, QuerySet
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.models import OrmQ
from django_q.tasks import async_task

from operations import events
from operations.audit import integrate
from operations.callbacks.delivery import dispatch_due_callbacks
from operations.infrastructure import fastsql
from operations.lifecycle.business import warn_business_deadline
from operations.lifecycle.cards import escalate
from operations.lifecycle.claims import (
    Claim,
    ExpiredLease,
    claim_due_rows,
    due_accounts,
    take_expired_lease,
    unleased,
)
from operations.limits import pacing
from operations.models import Operation, ProviderAccount, ProviderProfile
from operations.polling.gate import business_deadline_explanation
from operations.vocabulary import POLLABLE_STATUSES, Reason

logger = logging.getLogger(__name__)

POLL_TASK = "operations.tasks.run_poll"
POLLS_TASK = "operations.tasks.run_polls"
POLL_TASK_GROUP = "polls"

_POLLABLE = sorted(POLLABLE_STATUSES)


# --- 1. deadline sweep ----------------------------------------------------------------------------------


def sweep_deadlines(*, now: datetime | None = None, limit: int = 100) -> int:
    """Escalate pollable operations whose deadline, or binding business deadline, has passed; returns how many.

    No status request is sent: the deadline is a hard bound, and no request goes out after a
    business deadline unless a person allowed it. An operation under a live lease is left to the
    worker that holds it (its own gate escalates it before sending).
    """
    now = now or timezone.now()
    rows = list(
        Operation.objects.filter(status__in=_POLLABLE, deadline_at__lte=now)
        .filter(unleased(now=now))
        .order_by("deadline_at")
        .values_list("pk", "fence", "deadline_at", "next_poll_at")[:limit]
    )
    escalated = 0
    for pk, fence, deadline_at, next_poll_at in rows:
        waiting = f"; the next poll was due at {next_poll_at:%Y-%m-%d %H:%M:%S} UTC" if next_poll_at else ""
        explanation = f"the deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC passed{waiting}; no request was sent"
        # Fenced: a claim or a poll that moved the fence since we read it wins, and we skip.
        if escalate(operation_id=pk, fence=fence, reason=Reason.DEADLINE_EXCEEDED, explanation=explanation):
            escalated += 1
    return escalated + _sweep_business_deadlines(now=now, limit=limit - len(rows))


def _binding_business_deadlines() -> QuerySet[Operation]:
    # Where the business deadline comes before the technical one and nobody chose to poll past it
    # (operations.polling.gate.business_deadline_binds, as a query).
    return Operation.objects.filter(
        status__in=_POLLABLE, business_deadline_waived_at__isnull=True, business_deadline_at__lt=F("deadline_at")
    )


def _sweep_business_deadlines(*, now: datetime, limit: int) -> int:
    if limit <= 0:
        return 0
    columns = ("pk", "fence", "business_deadline_at", "deadline_at", "status_requests_used", "max_status_requests")
    passed = _binding_business_deadlines().filter(business_deadline_at__lte=now).filter(unleased(now=now))
    rows = list(passed.order_by("business_deadline_at").values_list(*columns)[:limit])
    escalated = 0
    for pk, fence, business_at, deadline_at, used, budget in rows:
        explanation = business_deadline_explanation(
            business_deadline_at=business_at, deadline_at=deadline_at, requests_left=max(budget - used, 0)
        )
        if escalate(operation_id=pk, fence=fence, reason=Reason.BUSINESS_DEADLINE_PASSED, explanation=explanation):
            escalated += 1
    return escalated


WARNINGS_EVERY_S = 5.0


def warn_business_deadlines(*, now: datetime | None = None, limit: int = 100) -> int:
    """Tell on-call once per operation that its business deadline is near; returns how many.

    Per profile with a `business_deadline_warning_s`: still-watched operations whose binding
    business deadline is within that many seconds. A notification, not a card: polling carries on.
    """
    now = now or timezone.now()
    warned = 0
    profiles = ProviderProfile.objects.filter(business_deadline_warning_s__isnull=False).order_by("pk")
    for profile_id, warning_s in profiles.values_list("pk", "business_deadline_warning_s"):
        due = (
            _binding_business_deadlines()
            .filter(
                provider_id=profile_id,
                business_deadline_warned_at__isnull=True,
                business_deadline_at__gt=now,
                # Typing: the query selects profiles whose warning is set.
                business_deadline_at__lte=now + timedelta(seconds=warning_s),  # type: ignore[arg-type]
            )
            .order_by("business_deadline_at")
            .values_list("pk", flat=True)
        )
        for pk in due[: limit - warned]:
            # Typing: the query selects profiles whose warning is set.
            warned += int(warn_business_deadline(operation_id=pk, now=now, warning_s=warning_s))  # type: ignore[arg-type]
        if warned >= limit:
            break
    return warned


# --- 2. expired leases ----------------------------------------------------------------------------------


def requeue_expired_leases(*, now: datetime | None = None, limit: int = 500) -> int:
    """Take expired claims away from their holders (fence + 1); returns how many.

    The request the dead holder may have sent stays charged (it was charged before sending); the
    operation is still due, so `claim_due` hands it to a live worker with the new fence.
    """
    now = now or timezone.now()
    rows = list(
        Operation.objects.filter(status__in=_POLLABLE, next_poll_at__lte=now, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .values_list("pk", "fence", "lease_owner", "lease_expires_at")[:limit]
    )
    requeued = 0
    for pk, fence, owner, expired_at in rows:
        # Typing: an expired lease has its expiry time: the query filters on it.
        if take_expired_lease(lease=ExpiredLease(operation_id=pk, owner=owner, fence=fence, expired_at=expired_at)):  # type: ignore[arg-type]
            requeued += 1
            logger.warning(
                "lease of %s on %s (fence %s) expired at %s; poll re-queued with fence %s",
                owner or "?",
                pk,
                fence,
                # Typing: an expired lease has its expiry time: the query filters on it.
                expired_at.isoformat(),  # type: ignore[union-attr]
                fence + 1,
            )
    return requeued


# --- 3. claim and enqueue -------------------------------------------------------------------------------


def queue_room() -> int:
    """How many more tasks may wait in django-q2's queue before the dispatcher holds back.

    When workers fall behind, piling more claims into the queue only lets their leases expire
    while they wait; due operations stay unclaimed instead, which the oldest-due metric shows.
    """
    # Plain SQL, like the rest of a claiming pass: its statements' ORM compilation cost the
    # dispatcher more CPU than the claims themselves at a medium load (fastsql says why).
    row = fastsql.fetchone(f"SELECT COUNT(*) FROM {fastsql.table(OrmQ)}", [])
    return settings.DISPATCH_MAX_QUEUED - (row[0] if row else 0)


def _account_rates(accounts: list[str]) -> dict[str, float]:
    """The binding rate per account: the lowest of the profiles that share it."""
    rates: dict[str, float] = {}
    rows = fastsql.fetchall(
        f"SELECT account, rate_limit_per_s FROM {fastsql.table(ProviderProfile)} "
        f"WHERE account IN ({', '.join(['%s'] * len(accounts))})",
        accounts,
    )
    for account, rate in rows:
        rates[account] = min(rate, rates.get(account, rate))
    return rates


_LOCKED_NAMES = ("id", "name", "paused_until", "pause_reason")


def _lock_accounts(accounts: list[str]) -> list[ProviderAccount]:
    # Sorted by name: two dispatchers never wait on each other in opposite orders.
    rows = fastsql.fetchall(
        f"SELECT {', '.join(_LOCKED_NAMES)} FROM {fastsql.table(ProviderAccount)} "
        f"WHERE name IN ({', '.join(['%s'] * len(accounts))}) ORDER BY name{fastsql.lock_clause()}",
        accounts,
    )
    return [fastsql.instance(ProviderAccount, _LOCKED_NAMES, row) for row in rows]


def claim_due(
    *, owner: str, now: datetime | None = None, limit: int | None = None, broker: Broker | None = None
) -> list[Claim]:
    """Claim due operations and enqueue one poll task per claim, in one transaction.

    Per provider account: skipped while paused; at most `pacing.admissible` claims, so the rate
    limit holds across every dispatcher and host (the charge enforces it exactly at send time).
    """
    now = now or timezone.now()
    limit = settings.DISPATCH_BATCH if limit is None else limit
    accounts = due_accounts(now=now)
    if not accounts:
        return []
    limit = min(limit, queue_room())
    if limit <= 0:
        return []
    broker = broker or get_broker()
    rates = _account_rates(accounts)
    claims: list[Claim] = []
    with transaction.atomic():
        for account in _lock_accounts(accounts):
            if account.paused_until and account.paused_until > now:
                continue
            if account.name not in rates:
                continue
            room = pacing.admissible(account=account.name, rate_per_s=rates[account.name], now=now)
            take = min(limit - len(claims), room)
            if take <= 0:
                continue
            claims.extend(claim_due_rows(account=account.name, now=now, take=take, owner=owner))
            if len(claims) >= limit:
                break
        # In the claims' transaction: the ORM broker's rows commit with them or not at all.
        for batch in task_batches(claims):
            if len(batch) == 1:
                claim = batch[0]
                async_task(
                    POLL_TASK,
                    claim.operation_id,
                    claim.fence,
                    broker=broker,
                    group=POLL_TASK_GROUP,
                    task_name=f"poll-{claim.operation_id}-{claim.fence}",
                )
            else:
                async_task(
                    POLLS_TASK,
                    [(claim.operation_id, claim.fence) for claim in batch],
                    broker=broker,
                    group=POLL_TASK_GROUP,
                    task_name=f"polls-{batch[0].operation_id}-{batch[0].fence}-{len(batch)}",
                )
    return claims


def task_batches(claims: list[Claim]) -> list[list[Claim]]:
    """One task per claim for a light pass (at most DISPATCH_TASK_SPREAD claims); under load, as
    few tasks as hold DISPATCH_POLLS_PER_TASK claims each.

    A group task sends its requests together (operations/polls/batch.py), so a fuller task costs its
    polls no latency and saves django-q2's fixed cost per task. Claims are dealt out in due order,
    round robin, so each task's first poll is among the most overdue.
    """
    spread = max(1, settings.DISPATCH_TASK_SPREAD)
    if len(claims) <= spread:
        return [[claim] for claim in claims]
    tasks = math.ceil(len(claims) / max(1, settings.DISPATCH_POLLS_PER_TASK))
    ordered = sorted(claims, key=lambda claim: claim.due_at)
    return [ordered[start::tasks] for start in range(tasks) if ordered[start::tasks]]


# --- 4. callbacks ---------------------------------------------------------------------------------------


def dispatch_callbacks(*, limit: int = 100) -> int:
    return dispatch_due_callbacks(limit=limit)


# --- the pass and the idle sleep ----------------------------------------------------------


SWEEP_LIMIT = 100
REQUEUE_LIMIT = 500


@dataclass
class PassResult:
    swept: int = 0
    requeued: int = 0
    claimed: int = 0
    callbacks: int = 0
    # Work done by the layers above in this pass (events.dispatcher_pass): policy steps, notifications.
    notifications: int = 0
    # Audit entries added to the Merkle tree (operations.audit.integrate); another integrator may hold the turn.
    integrated: int = 0
    # A step stopped at its batch limit: more of its work is waiting right now.
    backlog: bool = False
    # ...one of the steps other than claiming: the next pass must be a full one again.
    housework_backlog: bool = False

    @property
    def did_work(self) -> bool:
        return bool(self.swept or self.requeued or self.claimed or self.callbacks or self.notifications)


def run_pass(
    *, owner: str, now: datetime | None = None, broker: Broker | None = None, claims_only: bool = False
) -> PassResult:
    """One pass of every step, in order; the deadline sweep first so no claim is spent on it.

    `claims_only`: only step 3. The loop runs the other steps every DISPATCH_SWEEP_EVERY_S and
    claims-only passes in between: at a medium load a pass every DISPATCH_MIN_SLEEP_S claims a
    few polls, and the other steps' statements then cost more than the claims themselves.
    """
    now = now or timezone.now()
    result = PassResult()
    if claims_only:
        result.claimed = len(claim_due(owner=owner, now=now, broker=broker))
        result.backlog = result.claimed >= settings.DISPATCH_BATCH
        return result
    result.swept = sweep_deadlines(now=now, limit=SWEEP_LIMIT)
    result.requeued = requeue_expired_leases(now=now, limit=REQUEUE_LIMIT)
    result.claimed = len(claim_due(owner=owner, now=now, broker=broker))
    result.callbacks = dispatch_callbacks(limit=settings.DISPATCH_BATCH)
    # Every full pass (DISPATCH_SWEEP_EVERY_S; at once again after a full batch), so the integration
    # lag stays about one such interval (docs/DESIGN.md section 8).
    result.integrated = integrate.integrate_once(limit=integrate.BATCH) or 0
    above = [done for _, done in events.dispatcher_pass.send(sender=PassResult, now=now, limit=settings.DISPATCH_BATCH)]
    # Typing: receivers return counts; isinstance keeps only ints.
    result.notifications = sum(done for done in above if isinstance(done, int))  # type: ignore[misc]
    result.housework_backlog = (
        result.swept >= SWEEP_LIMIT
        or result.requeued >= REQUEUE_LIMIT
        or result.callbacks >= settings.DISPATCH_BATCH
        or result.integrated >= integrate.BATCH
        or any(isinstance(done, int) and done >= settings.DISPATCH_BATCH for done in above)
    )
    result.backlog = result.housework_backlog or result.claimed >= settings.DISPATCH_BATCH
    return result


def idle_sleep_s(*, now: datetime | None = None) -> float:
    """How long a dispatcher that cleared every backlog may sleep before its next pass.

    At most DISPATCH_IDLE_SLEEP_S, less when the next poll or deadline is nearer; but at least
    DISPATCH_MIN_SLEEP_S, so that a dense schedule (a poll due every few milliseconds) is claimed
    in small batches instead of one claim per pass with the dispatcher spinning on a CPU.
    """
    now = now or timezone.now()
    cap = settings.DISPATCH_IDLE_SLEEP_S
    upcoming = Operation.objects.filter(status__in=_POLLABLE).order_by()
    nearest = [
        upcoming.filter(next_poll_at__gt=now).aggregate(t=Min("next_poll_at"))["t"],
        upcoming.filter(deadline_at__gt=now).aggregate(t=Min("deadline_at"))["t"],
        _binding_business_deadlines()
        .filter(business_deadline_at__gt=now)
        .aggregate(t=Min("business_deadline_at"))["t"],
    ]
    waits = [(t - now).total_seconds() for t in nearest if t is not None]
    return max(min(settings.DISPATCH_MIN_SLEEP_S, cap), min([cap, *waits]))
