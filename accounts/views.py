"""Sign-in pages: the login page (single sign-on button and/or password form), "sign in again" before a
decision that cannot be undone, and the OpenID Connect request, callback and sign-out views.

A refused single sign-on is a page naming the reason (status 400, 403 or 502), never a 500, and is
logged; an unreachable provider costs single sign-on only, never password sign-in.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView, OIDCLogoutView

from accounts import discovery, signins
from accounts.oidc import FRESH_SINCE_ATTR, PROVIDER_ERRORS
from operations.cards.signin import OIDC
from operations.decisions.check import fresh_sign_in_max_age

log = logging.getLogger(__name__)

# state -> when a fresh sign-in was asked for (epoch seconds), in the session until the callback.
FRESH_REQUESTS = "pd_oidc_fresh"
FRESH_REQUESTS_KEPT = 5


class LoginView(auth_views.LoginView):
    """The login page; with `?fresh=1` it asks a signed-in person to confirm it is them."""

    template_name = "registration/login.html"

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if not settings.PASSWORD_LOGIN_ENABLED:
            return self.render_to_response(self.get_context_data(password_off=True), status=403)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: object) -> dict[str, object]:
        context = super().get_context_data(**kwargs)
        fresh = "1" in (self.request.GET.get("fresh"), self.request.POST.get("fresh"))
        next_url = self.get_redirect_url() or resolve_url(settings.LOGIN_REDIRECT_URL)
        context["fresh"] = fresh and self.request.user.is_authenticated
        context["fresh_minutes"] = settings.FRESH_SIGN_IN_MINUTES
        context["oidc_url"] = oidc_url(next_url, fresh=fresh)
        return context


def oidc_url(next_url: str, *, fresh: bool) -> str:
    query = {"next": next_url} | ({"fresh": "1"} if fresh else {})
    return f"{reverse('oidc_authentication_init')}?{urlencode(query)}"


def reauthenticate_url(next_url: str) -> str:
    """Where "Sign in again" goes: back to `next_url` (a path on this site) afterwards."""
    return f"{reverse('reauthenticate')}?{urlencode({'next': next_url})}"


@require_GET
def reauthenticate(request: HttpRequest) -> HttpResponse:
    """GET /accounts/reauthenticate/?next=<card>: sign in again the way the person signed in."""
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = resolve_url(settings.LOGIN_REDIRECT_URL)
    sign_in = signins.current(request.session)
    if settings.OIDC_ENABLED and (sign_in is None or sign_in.method == OIDC or not settings.PASSWORD_LOGIN_ENABLED):
        return HttpResponseRedirect(oidc_url(next_url, fresh=True))
    return HttpResponseRedirect(f"{reverse('login')}?{urlencode({'next': next_url, 'fresh': '1'})}")


class AuthenticationRequestView(OIDCAuthenticationRequestView):
    """GET /oidc/authenticate/?next=…[&fresh=1]: off to the provider (code flow, PKCE, nonce, state)."""

    get_settings = staticmethod(discovery.setting)

    def __init__(self, **kwargs: object) -> None:
        View.__init__(self, **kwargs)  # not the library's: it reads the endpoint (network) here
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
            response = super().get(request)
        except discovery.DiscoveryError as exc:
            return _failure(request, str(exc), status=502)
        if request.GET.get("fresh") == "1":
            state = parse_qs(urlsplit(response["Location"]).query)["state"][0]
            pending = dict(list(request.session.get(FRESH_REQUESTS, {}).items())[-(FRESH_REQUESTS_KEPT - 1) :])
            request.session[FRESH_REQUESTS] = pending | {state: int(timezone.now().timestamp())}
        return response

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        params = dict(super().get_extra_params(request))
        if request.GET.get("fresh") == "1":
            # prompt=login makes the provider ask for credentials again; max_age obliges it to report
            # auth_time, which the callback checks (a provider may ignore prompt, or the browser may
            # have the parameter stripped).
            params |= {"prompt": "login", "max_age": str(int(fresh_sign_in_max_age().total_seconds()))}
        return params


class CallbackView(OIDCAuthenticationCallbackView):
    """GET /oidc/callback/?code&state: check everything, sign in, remember how and when."""

    get_settings = staticmethod(discovery.setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        state = request.GET.get("state", "")
        known_states = request.session.get("oidc_states", {})
        if state not in known_states:
            return _failure(request, "this sign-in was started elsewhere or has expired: start again", status=400)
        if request.GET.get("error"):
            # The provider said no (the person cancelled, or may not use this client). Unlike the
            # library, keep the session: a cancelled fresh sign-in is not a sign-out.
            del known_states[state]
            request.session.modified = True
            detail = request.GET.get("error_description") or request.GET["error"]
            return _failure(request, f"the identity provider answered: {detail[:200]}", status=400)
        setattr(request, FRESH_SINCE_ATTR, request.session.get(FRESH_REQUESTS, {}).pop(state, None))
        try:
            return super().get(request)
        except SuspiciousOperation as exc:
            return _failure(request, str(exc), status=403)
        except PROVIDER_ERRORS as exc:
            # Every request to the provider goes through discovery.fetch, whose errors say why in words.
            return _failure(request, f"the identity provider could not be reached: {str(exc)[:300]}", status=502)

    def login_success(self) -> HttpResponse:
        response = super().login_success()
        # Also when the same person signed in again: the library then skips auth.login (so that
        # other tabs keep their CSRF token), and no user_logged_in signal is sent.
        signins.remember(self.request.session, self.user.pd_sign_in, now=timezone.now())
        return response

    def login_failure(self) -> HttpResponse:
        return _failure(self.request, "the identity provider did not identify an active account here", status=403)


class LogoutView(OIDCLogoutView):
    """POST /accounts/logout/: ends the session here, then at the provider when it supports it."""

    get_settings = staticmethod(discovery.setting)


def provider_logout_url(request: HttpRequest) -> str:
    """Where the browser goes after signing out (OIDC_OP_LOGOUT_URL_METHOD): the provider's
    end_session_endpoint for a single sign-on session (RP-initiated logout), else the login page."""
    after = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
    sign_in = signins.current(request.session)
    id_token = request.session.get("oidc_id_token")
    if not settings.OIDC_ENABLED or sign_in is None or sign_in.method != OIDC or not id_token:
        return after
    try:
        end_session = discovery.setting("OIDC_OP_LOGOUT_ENDPOINT")
    except discovery.DiscoveryError:
        end_session = ""
    if not end_session:
        return after  # the provider has no RP-initiated logout: the session here still ends
    query = urlencode(
        {"id_token_hint": id_token, "post_logout_redirect_uri": after, "client_id": settings.OIDC_RP_CLIENT_ID}
    )
    return f"{end_session}?{query}"


def _failure(request: HttpRequest, reason: str, *, status: int) -> HttpResponse:
    log.warning("single sign-on refused: %s", reason)
    return render(request, "accounts/signin_failed.html", {"reason": reason}, status=status)
