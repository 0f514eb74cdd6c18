"""The system panel (for people) and /metrics (for Prometheus): two views of operations.metrics."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from escalations.roles import viewer_required
from operations import metrics
from operations.audit.health import audit_protection_checks
from operations.vocabulary import REASON_LABELS, Reason

# Only pollerdash's own collector: the figures come from the database, not from this process.
_registry = CollectorRegistry(auto_describe=False)
_registry.register(metrics.PollerdashCollector())

# A request that came through a reverse proxy carries one of these; on the loopback-only rule it
# is refused, so putting a proxy in front never publishes /metrics by accident.
_PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-Ip")


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


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text. With METRICS_TOKEN set, scrapers send it as a bearer token; without one,
    only direct clients on this machine (loopback, no proxy headers) are served."""
    refused = _refused(request)
    if refused is not None:
        return refused
    # Prometheus text, or OpenMetrics when the scraper asks for it.
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_registry), content_type=content_type)


def _refused(request: HttpRequest) -> HttpResponse | None:
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return None
        response = HttpResponse(
            "metrics need the bearer token (METRICS_TOKEN)\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="pollerdash metrics"'
        return response
    if _is_loopback(request.META.get("REMOTE_ADDR", "")) and not any(h in request.headers for h in _PROXY_HEADERS):
        return None
    return HttpResponse(
        "metrics are served to this machine only; set METRICS_TOKEN to scrape from elsewhere\n",
        status=403,
        content_type="text/plain",
    )


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
