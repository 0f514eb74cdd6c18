"""The system panel: what an on-call engineer checks first (dispatch lag, processes, queue, audit protection)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from escalations.roles import viewer_required
from escalations.selectors.notifications import paging_caps
from escalations.views import DashboardRequest
from operations.audit.health import audit_protection_checks
from operations.cards.words import channel_label
from operations.models import SlackRefusal
from operations.observability import figures, metrics
from operations.vocabulary import REASON_LABELS, Reason

REASON_VALUES = frozenset(reason.value for reason in Reason)
# What the panel calls out, with the thresholds an on-call engineer would page on.
LAG_WARN_S = 1.0
OLDEST_DUE_WARN_S = 5.0
QUEUE_WAIT_WARN_S = 5.0


@viewer_required
@require_GET
def system(request: DashboardRequest) -> HttpResponse:
    snap = metrics.snapshot()
    responses = figures.response_figures(now=snap.at)
    context = {
        "responses": _response_tables(responses),
        "per_responder": responses.per_responder,
        "notifications_failed": metrics.notifications_failed(now=snap.at),
        "caps": paging_caps(now=snap.at),
        "slack_refusals": _refusals(now=snap.at),
        "snap": snap,
        "checks": audit_protection_checks(),
        "escalations": [(REASON_LABELS[Reason(r)], n) for r, n in snap.open_escalations.items()],
        # Red: the fleet has stopped working (operations.observability.liveness); amber: it is behind.
        "alerts": snap.progress.problems(),
        "warnings": _warnings(snap),
        "lag_window_min": int(metrics.LAG_WINDOW.total_seconds() // 60),
        "nav": "system",
    }
    template = "operations/_system_panel.html" if request.htmx else "operations/system.html"
    return render(request, template, context)


def _response_tables(responses: figures.ResponseFigures) -> list[dict[str, Any]]:
    """One table per (measure, grouping): rows of group label, 24 h and 7 d figures, waiting cards."""
    tables = []
    for measure, title in ((figures.ACK, "Time to acknowledge"), (figures.DECIDE, "Time to decide")):
        for by in figures.BY:
            day = responses.tables[("24h", measure, by)]
            week = responses.tables[("7d", measure, by)]
            rows = []
            for group in sorted(set(day) | set(week)):
                label = REASON_LABELS[Reason(group)] if by == "reason" and group in REASON_VALUES else group
                if by == "channel":
                    label = channel_label(group)
                rows.append({"label": label, "day": day.get(group), "week": week.get(group)})
            tables.append({"title": f"{title}, by {by}", "measure": measure, "by": by, "rows": rows})
    return tables


def _refusals(*, now: datetime) -> list[dict[str, Any]]:
    """Refused Slack and PagerDuty requests of the last 24 hours (PagerDuty's reasons are stored with
    the prefix "pagerduty:", escalations.oncall.pagerduty_webhooks)."""
    rows = []
    for refusal in SlackRefusal.objects.filter(hour__gte=now - timedelta(hours=24)).order_by("-hour", "reason"):
        source, _, why = refusal.reason.rpartition(":")
        rows.append(
            {"hour": refusal.hour, "source": channel_label(source or "slack"), "why": why, "count": refusal.count}
        )
    return rows


def _lag_cause(snap: metrics.Snapshot) -> str:
    """Why the lag is high, as far as the panel can tell. Polls that fell due while no dispatcher
    ran are late when it starts (after a deploy, or the first minutes of `make demo`): saying so
    keeps an engineer from scaling workers for a backlog that is already draining."""
    dispatchers = [process for process in snap.processes if process.kind == "dispatcher" and process.alive]
    if dispatchers:
        # The oldest live dispatcher: if even it is young, no dispatcher ran when these polls fell due.
        started = max((snap.at - process.started_at).total_seconds() for process in dispatchers)
        if started < metrics.LAG_WINDOW.total_seconds():
            return (
                f"a dispatcher started {started:.0f} s ago, so polls that fell due while none ran count as late "
                f"for the {int(metrics.LAG_WINDOW.total_seconds() // 60)}-minute window; if it stays high, "
                "workers are too few or busy."
            )
    return "workers are too few or busy."


def _warnings(snap: metrics.Snapshot) -> list[str]:
    found = []
    if not snap.live_processes.get("dispatcher"):
        found.append("No dispatcher has sent a heartbeat recently: due polls are not being handed to workers.")
    if snap.lag.p95 is not None and snap.lag.p95 > LAG_WARN_S:
        found.append(f"Dispatch lag p95 is {snap.lag.p95:.2f} s (over {LAG_WARN_S:g} s): {_lag_cause(snap)}")
    if snap.oldest_due_age_s is not None and snap.oldest_due_age_s > OLDEST_DUE_WARN_S:
        found.append(
            f"An operation has been due for {snap.oldest_due_age_s:.0f} s without a claim: dispatchers are "
            "behind, the task queue is full, or a provider account is at its rate limit."
        )
    if snap.oldest_waiting_s is not None and snap.oldest_waiting_s > QUEUE_WAIT_WARN_S:
        found.append(
            f"A task has waited {snap.oldest_waiting_s:.0f} s for a worker: "
            "is `manage.py qcluster` running and healthy?"
        )
    return found
