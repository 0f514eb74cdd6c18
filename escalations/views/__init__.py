"""Dashboard views (the human layer): cards and the inbox, history, operations, the system panel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_htmx.middleware import HtmxDetails


class DashboardRequest(HttpRequest):
    """What a dashboard view is handed, for the type checker only (Django builds plain HttpRequests):
    signed in, since every view is behind viewer_required or responder_required, and read by
    django-htmx's middleware."""

    user: User
    htmx: HtmxDetails
