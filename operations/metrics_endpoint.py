"""/metrics for Prometheus: pollerdash's own collector over the database (operations.metrics).

The human system panel is a dashboard page (escalations/views/system.py) over the same snapshot.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from operations import metrics

# Only pollerdash's own collector: the figures come from the database, not from this process.
_registry = CollectorRegistry(auto_describe=False)
_registry.register(metrics.PollerdashCollector())

# A request that came through a reverse proxy carries one of these; on the loopback-only rule it
# is refused, so putting a proxy in front never publishes /metrics by accident.
_PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-Ip")


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
