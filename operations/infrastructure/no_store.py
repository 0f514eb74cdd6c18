"""`Cache-Control: no-store` on every authenticated response.

Dashboard pages, htmx fragments, reports, CSV and JSONL exports and the API show data meant for
the person or agent that asked: a shared proxy, the browser's disk cache or its back button must
not keep a copy for the next user of the machine. Authenticated means a signed-in session or an
`Authorization` header (agent tokens, the metrics token). Static files are served by WhiteNoise
before this middleware runs, so they keep their long-lived caching.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import patch_cache_control
from django.utils.deprecation import MiddlewareMixin


def is_authenticated(request: HttpRequest) -> bool:
    if "Authorization" in request.headers:
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


def mark_no_store(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    if is_authenticated(request):
        patch_cache_control(response, no_store=True)
    return response


class NoStoreMiddleware(MiddlewareMixin):
    """After AuthenticationMiddleware in MIDDLEWARE; the API's threadless handler calls
    `mark_no_store` itself (operations/api/asgi.py)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        return mark_no_store(request, response)
