"""/metrics for Prometheus: pollerdash's own collector over the database (operations.observability.metrics).

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

from operations.observability import metrics

# Only pollerdash's own collector: the figures come from the database, not from this process.
_registry = CollectorRegistry(auto_describe=False)
_registry.register(metrics.PollerdashCollector())

# A request that came through a reverse proxy carries one of these (what common proxies and CDNs
# add); on the loopback rule it is refused, so a proxy on this machine never publishes /metrics.
_PROXY_HEADERS = (
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-Ip",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "Via",
    "True-Client-Ip",
    "X-Client-Ip",
    "Cf-Connecting-Ip",
)


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text, to scrapers that send METRICS_TOKEN as a bearer token. With
    METRICS_ALLOW_LOOPBACK, also to direct clients on this machine (loopback, no proxy headers):
    "loopback" alone is not a boundary — a proxy, a tunnel or any local process forwarding
    requests would turn it into "anyone"."""
    refused = _refused(request)
    if refused is not None:
        return refused
    # Prometheus text, or OpenMetrics when the scraper asks for it.
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_registry), content_type=content_type)


def _refused(request: HttpRequest) -> HttpResponse | None:
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        return None
    direct = _is_loopback(request.META.get("REMOTE_ADDR", "")) and not any(h in request.headers for h in _PROXY_HEADERS)
    if settings.METRICS_ALLOW_LOOPBACK and direct:
        return None
    if token:
        response = HttpResponse(
            "metrics need the bearer token (METRICS_TOKEN)\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="pollerdash metrics"'
        return response
    return HttpResponse(
        "metrics need METRICS_TOKEN (scrapers send it as a bearer token), or METRICS_ALLOW_LOOPBACK=1 "
        "to serve direct clients on this machine\n",
        status=403,
        content_type="text/plain",
    )


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
