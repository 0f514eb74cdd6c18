"""Is the fleet working? Operations overdue with nothing polled, tasks that no worker takes.

A process that is alive is not necessarily working: in issue 30 every process of a soak's fleet
was alive and heartbeating while nothing had been polled for minutes (a worker killed while it
held the task queue's lock; operations/infrastructure/cluster_locks.py). So liveness is judged by progress,
from the database, which every process of every host writes:

- **polling stalled**: operations have been due for STALL_ALERT_S or longer without a worker
  taking them up (unclaimed, or claimed by a dispatcher and still waiting in the queue), outside
  paused provider accounts, and no status request at all was sent for STALL_ALERT_S;
- **task queue stalled**: a task has waited STALL_ALERT_S or longer for a worker, and no worker
  has taken any task for as long (django-q2's ORM broker writes `lock = taken + retry` on the
  row it takes, so the newest lock says when a worker last took one).

STALL_ALERT_S must stay above django-q2's `timeout` (45 s by default): a worker may rightly hold
one task that long, and a fleet whose every worker waits on a slow provider still sends requests
and takes tasks within it. The dispatcher checks this with every heartbeat (its heartbeat then
says it is not healthy, and it logs an ERROR); the system panel and /metrics show it red.
Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Min, Q
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

from operations.models import Operation, ProviderAccount, StatusCheck
from operations.vocabulary import POLLABLE_STATUSES


@dataclass(frozen=True)
class FleetProgress:
    """What the fleet has done lately, and whether it stopped."""

    at: datetime
    stall_s: float
    overdue: int  # due for stall_s or longer, not taken up by a worker
    oldest_overdue_s: float | None
    since_last_poll_s: float | None  # None: no status request was ever sent
    queue_waiting: int  # tasks waiting stall_s or longer
    oldest_waiting_s: float | None
    since_last_take_s: float | None  # None: no task is taken right now

    @property
    def polling_stalled(self) -> bool:
        return self.overdue > 0 and (self.since_last_poll_s is None or self.since_last_poll_s >= self.stall_s)

    @property
    def queue_stalled(self) -> bool:
        return self.queue_waiting > 0 and (self.since_last_take_s is None or self.since_last_take_s >= self.stall_s)

    @property
    def stalled(self) -> bool:
        return self.polling_stalled or self.queue_stalled

    def problems(self) -> list[str]:
        """One sentence per stall, for the panel, the log and the dispatcher's heartbeat."""
        found = []
        if self.polling_stalled:
            last = "ever" if self.since_last_poll_s is None else f"for {self.since_last_poll_s:.0f} s"
            found.append(
                f"Polling has stopped: {self.overdue} operation{'s' * (self.overdue != 1)} due for "
                f"{self.oldest_overdue_s or 0:.0f} s or less and no status request sent {last}."
            )
        if self.queue_stalled:
            last = "" if self.since_last_take_s is None else f" for {self.since_last_take_s:.0f} s"
            found.append(
                f"The task queue is not being taken: {self.queue_waiting} task{'s' * (self.queue_waiting != 1)} "
                f"waiting, the oldest {self.oldest_waiting_s or 0:.0f} s, and no worker took one{last}: is "
                "`manage.py qcluster` running, and what does its log say?"
            )
        return found


def fleet_progress(*, now: datetime | None = None, stall_s: float | None = None) -> FleetProgress:
    now = now or timezone.now()
    stall_s = settings.STALL_ALERT_S if stall_s is None else stall_s
    horizon = now - timedelta(seconds=stall_s)
    paused = ProviderAccount.objects.filter(paused_until__gt=now).values_list("name", flat=True)
    # Not taken up: no lease, a lease run out, or a dispatcher's claim no worker has charged yet.
    waiting_for_a_worker = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now) | Q(claimed_at__isnull=False)
    overdue = (
        Operation.objects.filter(status__in=sorted(POLLABLE_STATUSES), next_poll_at__lte=horizon)
        .filter(waiting_for_a_worker)
        .exclude(account__in=list(paused))
        .order_by()
        .aggregate(count=Count("pk"), oldest=Min("next_poll_at"))
    )
    last_poll = StatusCheck.objects.order_by().aggregate(t=Max("sent_at"))["t"]
    queue = OrmQ.objects.order_by()
    waiting = queue.filter(lock__lte=horizon).aggregate(count=Count("pk"), oldest=Min("lock"))
    newest_lock = queue.filter(lock__gt=now).aggregate(t=Max("lock"))["t"]
    last_take = None if newest_lock is None else newest_lock - timedelta(seconds=Conf.RETRY)
    return FleetProgress(
        at=now,
        stall_s=stall_s,
        overdue=overdue["count"],
        oldest_overdue_s=_age(now, overdue["oldest"]),
        since_last_poll_s=_age(now, last_poll),
        queue_waiting=waiting["count"],
        oldest_waiting_s=_age(now, waiting["oldest"]),
        since_last_take_s=_age(now, last_take),
    )


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())
