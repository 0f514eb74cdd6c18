"""The system panel: what an on-call engineer checks first (dispatch lag, processes, queue, audit protection)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from escalations.roles import viewer_required
from operations import metrics
from operations.audit.health import audit_protection_checks
from operations.vocabulary import REASON_LABELS, Reason

# What the panel calls out, with the thresholds an on-call engineer would page on.
LAG_WARN_S = 1.0
OLDEST_DUE_WARN_S = 5.0
QUEUE_WAIT_WARN_S = 5.0


@viewer_required
@require_GET
def system(request: HttpRequest) -> HttpResponse:
    snap = metrics.snapshot()
    context = {
        "snap": snap,
        "checks": audit_protection_checks(),
        "escalations": [(REASON_LABELS[Reason(r)], n) for r, n in snap.open_escalations.items()],
        "warnings": _warnings(snap),
        "lag_window_min": int(metrics.LAG_WINDOW.total_seconds() // 60),
        "nav": "system",
    }
    template = "operations/_system_panel.html" if request.htmx else "operations/system.html"
    return render(request, template, context)


def _warnings(snap: metrics.Snapshot) -> list[str]:
    found = []
    if not snap.live_processes.get("dispatcher"):
        found.append("No dispatcher has sent a heartbeat recently: due polls are not being handed to workers.")
    if snap.lag.p95 is not None and snap.lag.p95 > LAG_WARN_S:
        found.append(f"Dispatch lag p95 is {snap.lag.p95:.2f} s (over {LAG_WARN_S:g} s): workers are too few or busy.")
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
