"""How long cards wait for a human: time to acknowledge and time to decide.

Definitions (per card):
- time to acknowledge = first response - opened_at, where the first response is the first
  acknowledgement, or the closing decision when nobody acknowledged first (whoever decided was on
  it). Written once to Escalation.first_response_at; an unacknowledge does not clear it.
- time to decide = closed_at - opened_at of cards closed by a decision. A half-approved
  accept_output and an inspect do not close a card, so they do not count; superseded cards (the
  operation ended another way) count in neither.

`record_*` run in the transaction of the acknowledgement or decision (receivers of the domain's
own card events, connected in operations.apps) and increment the histogram counters once per card,
so /metrics reads a few rows whatever the history (operations.observability.metrics). `response_figures` is what
/system/ shows: p50/p95 over 24 h and 7 days by reason and by provider, next to the cards still
waiting, so a good p95 cannot hide cards nobody answered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, F, Q
from django.utils import timezone
from prometheus_client.core import HistogramMetricFamily

from operations.models import CardResponseCounter, Decision, Escalation
from operations.vocabulary import Channel

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
# Upper bounds (seconds): the minutes an on-call human answers in, up to a day.
BUCKETS_S = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)
INF = "+Inf"
ACK, DECIDE = "ack", "decide"


def bucket_of(seconds: float) -> str:
    """The counter row one sample increments: its smallest upper bound, or +Inf."""
    return next((str(bound) for bound in BUCKETS_S if seconds <= bound), INF)


def _count(*, metric: str, escalation: Escalation, seconds: float, channel: str) -> None:
    key = {
        "metric": metric,
        "reason": escalation.reason,
        "provider": escalation.operation.provider.slug,
        "channel": channel,
        "bucket": bucket_of(seconds),
    }
    counter = CardResponseCounter.objects.filter(**key)
    if counter.update(count=F("count") + 1, sum_s=F("sum_s") + seconds):
        return
    # The first sample of this row: create it without failing the transaction when another one
    # created it meanwhile (INSERT ... ON CONFLICT DO NOTHING), then the same atomic increment.
    CardResponseCounter.objects.bulk_create([CardResponseCounter(**key)], ignore_conflicts=True)
    counter.update(count=F("count") + 1, sum_s=F("sum_s") + seconds)


def record_response(*, escalation: Escalation, at: datetime, channel: str = Channel.WEB) -> bool:
    """The card's first response, once (compare-and-set from null); True when this was it."""
    first = Escalation.objects.filter(pk=escalation.pk, first_response_at__isnull=True)
    if not first.update(first_response_at=at, first_response_channel=channel):
        return False
    escalation.first_response_at = at
    escalation.first_response_channel = channel
    seconds = max(0.0, (at - escalation.opened_at).total_seconds())
    _count(metric=ACK, escalation=escalation, seconds=seconds, channel=channel)
    return True


def on_card_acknowledged(*, escalation: Escalation, channel: str = Channel.WEB, **_: object) -> None:
    record_response(escalation=escalation, at=timezone.now(), channel=channel)


def on_card_closed(*, escalation: Escalation, how: str, channel: str = Channel.WEB, **_: object) -> None:
    """A decision closed the card: it is its time to decide (and its first response if none came)."""
    if how != "decided" or escalation.closed_at is None:
        return
    at = escalation.closed_at
    record_response(escalation=escalation, at=at, channel=channel)
    Escalation.objects.filter(pk=escalation.pk).update(decided_channel=channel)
    escalation.decided_channel = channel
    seconds = max(0.0, (at - escalation.opened_at).total_seconds())
    _count(metric=DECIDE, escalation=escalation, seconds=seconds, channel=channel)


# --- /system/ --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    samples: int
    p50_s: float | None
    p95_s: float | None
    waiting: int  # open cards without this response yet, whatever their age
    oldest_waiting_s: float | None


@dataclass(frozen=True)
class Sample:
    reason: str
    provider: str
    opened_at: datetime
    responded_at: datetime | None
    decided_at: datetime | None
    # Where the first response and the closing decision came from ("" before 2.5: not counted by channel).
    ack_channel: str = ""
    decide_channel: str = ""


BY = ("reason", "provider", "channel")


def _group(sample: Sample, *, by: str, measure: str) -> str:
    if by == "channel":
        return sample.ack_channel if measure == ACK else sample.decide_channel
    return str(getattr(sample, by))


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as PostgreSQL's percentile_cont."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(
    *, samples: Iterable[Sample], waiting: Iterable[Sample], now: datetime, window: timedelta, measure: str, by: str
) -> dict[str, Figure]:
    """Figures per reason, provider or channel (`by`) for ACK or DECIDE, over cards answered within
    `window`. By channel, a card still waiting has none yet: only answered cards count there."""
    since = now - window
    values: dict[str, list[float]] = {}
    for sample in samples:
        at = sample.responded_at if measure == ACK else sample.decided_at
        group = _group(sample, by=by, measure=measure)
        if at is not None and since <= at <= now and group:
            values.setdefault(group, []).append((at - sample.opened_at).total_seconds())
    ages: dict[str, list[float]] = {}
    for card in waiting if by != "channel" else ():
        if measure == DECIDE or card.responded_at is None:
            ages.setdefault(_group(card, by=by, measure=measure), []).append((now - card.opened_at).total_seconds())
    out: dict[str, Figure] = {}
    for group in sorted(set(values) | set(ages)):
        ordered = sorted(values.get(group, []))
        open_ages = ages.get(group, [])
        out[group] = Figure(
            samples=len(ordered),
            p50_s=percentile(ordered, 0.5) if ordered else None,
            p95_s=percentile(ordered, 0.95) if ordered else None,
            waiting=len(open_ages),
            oldest_waiting_s=max(open_ages) if open_ages else None,
        )
    return out


@dataclass(frozen=True)
class ResponseFigures:
    # (window, measure, by) -> group -> Figure, e.g. ("24h", "ack", "reason")["deadline_exceeded"]
    tables: Mapping[tuple[str, str, str], Mapping[str, Figure]]
    # username -> {"decisions_24h": n, "decisions_7d": n}
    per_responder: list[tuple[str, dict[str, int]]]


def response_figures(*, now: datetime | None = None) -> ResponseFigures:
    """Everything /system/ shows about response times: three bounded, indexed queries."""
    now = now or timezone.now()
    since = now - max(WINDOWS.values())
    answered = (
        Escalation.objects.filter(first_response_at__gte=since)
        .values_list(
            "reason",
            "operation__provider__slug",
            "opened_at",
            "first_response_at",
            "state",
            "closed_at",
            "first_response_channel",
            "decided_channel",
        )
        .order_by()
    )
    samples = [
        Sample(reason, provider, opened, responded, closed if state == Escalation.State.DECIDED else None, ack, decide)
        for reason, provider, opened, responded, state, closed, ack, decide in answered
    ]
    open_cards = [
        Sample(reason, provider, opened, responded, None)
        for reason, provider, opened, responded in Escalation.objects.filter(state=Escalation.State.OPEN)
        .values_list("reason", "operation__provider__slug", "opened_at", "first_response_at")
        .order_by()
    ]
    tables = {
        (label, measure, by): summarise(
            samples=samples, waiting=open_cards, now=now, window=window, measure=measure, by=by
        )
        for label, window in WINDOWS.items()
        for measure in (ACK, DECIDE)
        for by in BY
    }
    # Counted in the database, one row per responder: a busy week is thousands of decisions, and
    # fetching each into Python was most of /system/'s time at 100,000 operations (docs/benchmarks.md).
    per_window = {
        f"decisions_{label}": Count("pk", filter=Q(decided_at__gte=now - window)) for label, window in WINDOWS.items()
    }
    counts: dict[str, dict[str, int]] = {}
    for row in (
        Decision.objects.filter(decided_at__gte=since, outcome=Decision.Outcome.APPLIED)
        .values("username")
        .annotate(**per_window)
        .order_by()
    ):
        username = row.pop("username")
        counts[username] = {key: count for key, count in row.items() if count}
    per_responder = sorted(counts.items(), key=lambda item: (-item[1].get("decisions_7d", 0), item[0]))
    return ResponseFigures(tables=tables, per_responder=per_responder)


# --- /metrics ---------------------------------------------------------------------------------------------

HISTOGRAMS = {
    ACK: (
        "pollerdash_card_time_to_ack_seconds",
        "Seconds from a card opening to its first acknowledgement (or closing decision), by reason, provider "
        "and channel",
    ),
    DECIDE: (
        "pollerdash_card_time_to_decide_seconds",
        "Seconds from a card opening to the decision that closed it, by reason, provider and channel",
    ),
}


def histograms() -> list[HistogramMetricFamily]:
    """Both cumulative histograms, from the counter rows (one small query)."""
    rows: dict[str, dict[tuple[str, str, str], dict[str, tuple[int, float]]]] = {ACK: {}, DECIDE: {}}
    for metric, reason, provider, channel, bucket, count, sum_s in CardResponseCounter.objects.values_list(
        "metric", "reason", "provider", "channel", "bucket", "count", "sum_s"
    ).order_by():
        rows.setdefault(metric, {}).setdefault((reason, provider, channel), {})[bucket] = (count, sum_s)
    families = []
    for metric, (name, documentation) in HISTOGRAMS.items():
        # `channel` is empty for cards answered before 2.5: Prometheus reads an empty label as none.
        family = HistogramMetricFamily(name, documentation, labels=["reason", "provider", "channel"])
        for labels, per_bucket in sorted(rows.get(metric, {}).items()):
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound in (*(str(b) for b in BUCKETS_S), INF):
                running += per_bucket.get(bound, (0, 0.0))[0]
                buckets.append((bound if bound == INF else f"{float(bound):.1f}", running))
            family.add_metric(list(labels), buckets=buckets, sum_value=sum(s for _, s in per_bucket.values()))
        families.append(family)
    return families
