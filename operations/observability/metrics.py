"""How the scheduling machinery is doing: figures for the system panel and for Prometheus.

Every pollerdash process (web, workers, dispatchers, signer) on every host writes to the one
database, so the database is the one place that sees the whole fleet. The Prometheus collector
therefore queries it when scraped: correct with any number of processes and hosts, and with no
per-process registry files. Each figure is one indexed query over a recent window, never a scan
of the whole history, so a scrape stays cheap however long pollerdash has run.

Nothing here writes, and nothing exported carries a secret: operation ids, provider job ids,
credentials and pause reasons stay out; labels are pollerdash's own words and account names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Min
from django.utils import timezone
from django_q.models import OrmQ
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from operations.audit import integrate
from operations.audit.health import audit_protection_checks
from operations.infrastructure import fastsql, sql_quantiles
from operations.lifecycle.claims import due_unclaimed
from operations.models import (
    Escalation,
    NotificationDelivery,
    Operation,
    ProcessHeartbeat,
    ProviderAccount,
    StatusCheck,
)
from operations.observability import figures, liveness
from operations.vocabulary import NOT_DONE_STATUSES, Reason

LAG_WINDOW = timedelta(minutes=5)
RATE_WINDOW = timedelta(seconds=60)
# A process is alive while its heartbeat is this fresh (dispatchers beat every 5 s, the signer
# every tick); rows of processes gone longer than PROCESS_SHOWN_FOR no longer show.
PROCESS_ALIVE_WITHIN = timedelta(seconds=30)
PROCESS_SHOWN_FOR = timedelta(minutes=15)
QUANTILES = (0.5, 0.95, 0.99)
IN_FLIGHT = "in_flight"  # a StatusCheck sent whose answer has not been recorded (yet)


@dataclass(frozen=True)
class Lag:
    """Dispatch lag (StatusCheck.started_at - the due time the poll served) over a window."""

    samples: int
    quantiles: dict[float, float] = field(default_factory=dict)  # empty without samples
    max_s: float | None = None

    @property
    def p50(self) -> float | None:
        return self.quantiles.get(0.5)

    @property
    def p95(self) -> float | None:
        return self.quantiles.get(0.95)

    @property
    def p99(self) -> float | None:
        return self.quantiles.get(0.99)


@dataclass(frozen=True)
class PausedAccount:
    name: str
    paused_until: datetime
    remaining_s: float
    reason: str


@dataclass(frozen=True)
class Process:
    name: str
    kind: str
    started_at: datetime
    last_seen_at: datetime
    seen_ago_s: float
    alive: bool
    # What the process reported wrong with its last heartbeat (a dispatcher: the fleet's stalls).
    problems: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """Alive and making progress: a process that beats while nothing moves is not healthy."""
        return self.alive and not self.problems


@dataclass(frozen=True)
class Snapshot:
    at: datetime
    lag: Lag
    polls_per_s: float
    polls_by_decision: dict[str, int]  # over LAG_WINDOW
    due_unclaimed: int
    oldest_due_age_s: float | None
    paused_accounts: list[PausedAccount]
    processes: list[Process]
    queue_waiting: int  # enqueued, no worker has taken it yet
    queue_taken: int  # taken by a worker, not yet acknowledged
    oldest_waiting_s: float | None
    open_escalations: dict[str, int]  # every reason, zeros included
    operations_by_status: dict[str, int]  # the statuses that are not done
    progress: liveness.FleetProgress

    @property
    def live_processes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for process in self.processes:
            if process.alive:
                counts[process.kind] = counts.get(process.kind, 0) + 1
        return counts

    @property
    def healthy_processes(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(self.live_processes, 0)
        for process in self.processes:
            if process.healthy:
                counts[process.kind] += 1
        return counts


def dispatch_lag(*, now: datetime, window: timedelta = LAG_WINDOW) -> Lag:
    """How late the window's checks started after they were due (computed by the database where it can)."""
    samples, values, worst = sql_quantiles.seconds_quantiles(
        StatusCheck,
        start="due_at",
        end="started_at",
        where=f"{fastsql.column(StatusCheck, 'sent_at')} >= %s AND {fastsql.column(StatusCheck, 'due_at')} IS NOT NULL",
        params=[fastsql.prep(StatusCheck, "sent_at", now - window)],
        quantiles=QUANTILES,
    )
    if not samples:
        return Lag(samples=0)
    return Lag(samples=samples, quantiles=dict(zip(QUANTILES, values, strict=True)), max_s=worst)


def snapshot(*, now: datetime | None = None) -> Snapshot:
    now = now or timezone.now()
    paused = [
        # paused_until__gt below: every row has a pause end (the stubs type the column as nullable).
        PausedAccount(name=name, paused_until=until, remaining_s=(until - now).total_seconds(), reason=reason)  # type: ignore[arg-type,operator]
        for name, until, reason in ProviderAccount.objects.filter(paused_until__gt=now)
        .order_by("paused_until")
        .values_list("name", "paused_until", "pause_reason")
    ]
    # Operations of a paused account wait on purpose; they are shown with the pause, not as lag.
    due = due_unclaimed(now=now).exclude(account__in=[p.name for p in paused])
    due_figures = due.aggregate(count=Count("pk"), oldest=Min("next_poll_at"))
    queue = OrmQ.objects.order_by()
    waiting = queue.filter(lock__lte=now).aggregate(count=Count("pk"), oldest=Min("lock"))
    recent = StatusCheck.objects.filter(sent_at__gte=now - LAG_WINDOW).order_by()
    by_decision = {
        (row["decision"] or IN_FLIGHT): row["count"] for row in recent.values("decision").annotate(count=Count("pk"))
    }
    return Snapshot(
        at=now,
        lag=dispatch_lag(now=now),
        polls_per_s=StatusCheck.objects.filter(sent_at__gte=now - RATE_WINDOW).count() / RATE_WINDOW.total_seconds(),
        polls_by_decision=dict(sorted(by_decision.items())),
        due_unclaimed=due_figures["count"],
        oldest_due_age_s=None if due_figures["oldest"] is None else (now - due_figures["oldest"]).total_seconds(),
        paused_accounts=paused,
        processes=_processes(now),
        queue_waiting=waiting["count"],
        queue_taken=queue.filter(lock__gt=now).count(),
        oldest_waiting_s=None if waiting["oldest"] is None else (now - waiting["oldest"]).total_seconds(),
        open_escalations=_open_escalations(),
        operations_by_status=_not_done(),
        progress=liveness.fleet_progress(now=now),
    )


def _processes(now: datetime) -> list[Process]:
    rows = ProcessHeartbeat.objects.filter(last_seen_at__gte=now - PROCESS_SHOWN_FOR).order_by("kind", "name")
    return [
        Process(
            name=row.name,
            kind=row.kind,
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            seen_ago_s=(now - row.last_seen_at).total_seconds(),
            alive=row.last_seen_at >= now - PROCESS_ALIVE_WITHIN,
            problems=_problems(row.info),
        )
        for row in rows
    ]


def _problems(info: object) -> tuple[str, ...]:
    reported = info.get("stalled") if isinstance(info, dict) else None
    return tuple(str(problem) for problem in reported) if isinstance(reported, list) else ()


def _open_escalations() -> dict[str, int]:
    counts = dict.fromkeys((str(reason) for reason in Reason), 0)
    for row in (
        Escalation.objects.filter(state=Escalation.State.OPEN).order_by().values("reason").annotate(n=Count("pk"))
    ):
        counts[row["reason"]] = row["n"]
    return counts


def _not_done() -> dict[str, int]:
    statuses = sorted(str(s) for s in NOT_DONE_STATUSES)
    counts = dict.fromkeys(statuses, 0)
    for row in Operation.objects.filter(status__in=statuses).order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    return counts


class PollerdashCollector(Collector):
    """Prometheus collector: one database snapshot per scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        snap = snapshot()
        yield from _dispatch_metrics(snap=snap)
        yield from _backlog_metrics(snap=snap)
        yield from _process_metrics(snap=snap)
        yield from figures.histograms()
        yield from _notification_and_audit_metrics(now=snap.at)


def _dispatch_metrics(*, snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """How late polls go out, what waits unclaimed, and what was sent."""
    lag = GaugeMetricFamily(
        "pollerdash_dispatch_lag_seconds",
        "Dispatch lag (poll start minus the due time it served), quantiles over the last 5 minutes",
        labels=["quantile"],
    )
    for q, value in snap.lag.quantiles.items():
        lag.add_metric([str(q)], value)
    yield lag
    yield _gauge("pollerdash_dispatch_lag_max_seconds", "Largest dispatch lag over the last 5 minutes", snap.lag.max_s)
    yield _gauge("pollerdash_dispatch_lag_samples", "Polls behind the dispatch lag figures", snap.lag.samples)
    yield _gauge(
        "pollerdash_oldest_due_unclaimed_seconds",
        "Age of the oldest operation due for a poll that no dispatcher has claimed (0 when none)",
        snap.oldest_due_age_s or 0.0,
    )
    yield _gauge(
        "pollerdash_due_unclaimed_operations",
        "Operations due for a poll and not claimed yet (paused accounts excluded)",
        snap.due_unclaimed,
    )
    yield _gauge("pollerdash_polls_per_second", "Status requests sent per second, last minute", snap.polls_per_s)
    yield _labelled(
        "pollerdash_recent_polls",
        "Status requests sent in the last 5 minutes, by decision (in_flight: no answer recorded yet)",
        "decision",
        snap.polls_by_decision,
    )


def _backlog_metrics(*, snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """What waits on people, on paused accounts and in the task queue."""
    yield _labelled("pollerdash_open_escalations", "Open escalations by reason", "reason", snap.open_escalations)
    yield _labelled(
        "pollerdash_operations", "Operations that are not done, by status", "status", snap.operations_by_status
    )
    yield _gauge(
        "pollerdash_paused_accounts", "Provider accounts paused by a 429/503 Retry-After", len(snap.paused_accounts)
    )
    yield _labelled(
        "pollerdash_account_pause_remaining_seconds",
        "Seconds until a paused provider account may be polled again",
        "account",
        {p.name: p.remaining_s for p in snap.paused_accounts},
    )
    yield _gauge("pollerdash_task_queue_waiting", "django-q2 tasks waiting for a worker", snap.queue_waiting)
    yield _gauge("pollerdash_task_queue_taken", "django-q2 tasks taken by a worker, not yet done", snap.queue_taken)
    yield _gauge(
        "pollerdash_task_queue_oldest_waiting_seconds",
        "Age of the oldest task no worker has taken (0 when none): workers stalled or too few",
        snap.oldest_waiting_s or 0.0,
    )


def _process_metrics(*, snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """Which processes are alive and healthy, and whether the fleet makes progress."""
    yield _labelled(
        "pollerdash_live_processes",
        "Processes with a fresh heartbeat, by kind",
        "kind",
        snap.live_processes or {"dispatcher": 0},
    )
    yield _labelled(
        "pollerdash_healthy_processes",
        "Processes with a fresh heartbeat that report no stall, by kind (alive is not enough)",
        "kind",
        snap.healthy_processes or {"dispatcher": 0},
    )
    progress = snap.progress
    yield _gauge(
        "pollerdash_polling_stalled",
        "1 when operations have been due STALL_ALERT_S or longer and no status request was sent for as long",
        int(progress.polling_stalled),
    )
    yield _gauge(
        "pollerdash_task_queue_stalled",
        "1 when a task has waited STALL_ALERT_S or longer and no worker took any for as long",
        int(progress.queue_stalled),
    )
    yield _gauge(
        "pollerdash_seconds_since_last_poll",
        "Seconds since the last status request was sent (absent before the first)",
        progress.since_last_poll_s,
    )


def _notification_and_audit_metrics(*, now: datetime) -> Iterator[GaugeMetricFamily]:
    """Notifications that failed for good, and the audit log's integration and protection."""
    yield _labelled(
        "pollerdash_notifications_failed_24h",
        "Notifications that failed for good in the last 24 hours, by channel",
        "channel",
        notifications_failed(now=now),
    )
    audit_lag = integrate.lag()
    yield _gauge(
        "pollerdash_audit_integration_lag_seconds",
        "Age of the oldest audit entry awaiting integration into the Merkle tree (0 when none)",
        audit_lag.seconds(now),
    )
    yield _gauge("pollerdash_audit_pending_entries", "Audit entries awaiting integration", audit_lag.pending)
    yield _labelled(
        "pollerdash_audit_protection_ok",
        "Audit log protection checks (1 ok, 0 failing)",
        "check",
        {check.name: 1 if check.ok else 0 for check in audit_protection_checks()},
    )


def notifications_failed(*, now: datetime, window: timedelta = timedelta(hours=24)) -> dict[str, float]:
    """Notifications that ended failed within `window`, by channel (an indexed window)."""
    rows = (
        NotificationDelivery.objects.filter(state=NotificationDelivery.State.FAILED, finished_at__gte=now - window)
        .values("channel")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["channel"]: row["n"] for row in rows}


def _gauge(name: str, documentation: str, value: float | None) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, documentation)
    if value is not None:
        gauge.add_metric([], value)
    return gauge


def _labelled(name: str, documentation: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        gauge.add_metric([key], value)
    return gauge
