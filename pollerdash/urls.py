from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from escalations.views.slack import interactions as slack_interactions
from operations.metrics_endpoint import prometheus_metrics

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Cards and decisions moved from the escalations app into operations: old admin links still work.
    re_path(
        r"^admin/escalations/(?P<rest>(?:escalation|decision)/.*)$",
        RedirectView.as_view(url="/admin/operations/%(rest)s", query_string=True, permanent=True),
    ),
    path("admin/", admin.site.urls),
    path("metrics", prometheus_metrics, name="metrics"),
    # Slack's signed requests (not a dashboard page: no session, the signature is the credential).
    path("slack/interactions", slack_interactions, name="slack_interactions"),
    path("api/v1/", include("operations.api.routes")),
    path("", include("escalations.urls")),
]
