from __future__ import annotations

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from accounts import views as accounts
from escalations.views.pagerduty import webhooks as pagerduty_webhooks
from escalations.views.slack import interactions as slack_interactions
from operations.api.reference import api_reference
from operations.observability.metrics_endpoint import prometheus_metrics

# Every app's admin module registers its admins here, where the site is served, rather than at
# every process's start-up (pollerdash/apps.py).
admin.autodiscover()

urlpatterns = [
    path("accounts/login/", accounts.LoginView.as_view(), name="login"),
    path("accounts/logout/", accounts.LogoutView.as_view(), name="logout"),
    path("accounts/reauthenticate/", accounts.reauthenticate, name="reauthenticate"),
    path("oidc/authenticate/", accounts.AuthenticationRequestView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", accounts.CallbackView.as_view(), name="oidc_authentication_callback"),
    # One sign-in page, throttled and with single sign-on, for the admin too.
    path("admin/login/", RedirectView.as_view(pattern_name="login", query_string=True)),
    # Cards and decisions moved from the escalations app into operations: old admin links still work.
    re_path(
        r"^admin/escalations/(?P<rest>(?:escalation|decision)/.*)$",
        RedirectView.as_view(url="/admin/operations/%(rest)s", query_string=True, permanent=True),
    ),
    path("admin/", admin.site.urls),
    path("metrics", prometheus_metrics, name="metrics"),
    # Slack's signed requests (not a dashboard page: no session, the signature is the credential).
    path("slack/interactions", slack_interactions, name="slack_interactions"),
    path("pagerduty/webhooks", pagerduty_webhooks, name="pagerduty_webhooks"),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin, JSON answers).
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("api/v1/docs/", api_reference, name="api_reference"),
    path("api/v1/docs", RedirectView.as_view(pattern_name="api_reference")),
    path("api/v1/", include("operations.api.routes")),
    path("", include("escalations.urls")),
]
