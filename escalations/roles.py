"""Roles (docs/DESIGN.md section 7): Django groups `viewer` (reads) and `responder` (decides), named in
accounts/roles.py (which also maps an identity provider's groups onto them).

Superusers are admins: they manage profiles and users in the Django admin and may also decide.
A signed-in user with neither group sees a page saying so, never the data. Anonymous users are
sent to the login page; an htmx request gets an `HX-Redirect` so the whole page goes there.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render, resolve_url
from django.utils.html import format_html

from operations.responders import RESPONDER, VIEWER

__all__ = ["RESPONDER", "VIEWER", "can_decide", "can_read", "responder_required", "roles_of", "viewer_required"]


def roles_of(user: object) -> frozenset[str]:
    """The user's dashboard roles, read once per request (cached on the user object)."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    cached = getattr(user, "_pollerdash_roles", None)
    if cached is None:
        # Any authenticated user (is_authenticated checked above) has groups.
        names = set(user.groups.filter(name__in=(VIEWER, RESPONDER)).values_list("name", flat=True))  # type: ignore[attr-defined]
        if getattr(user, "is_superuser", False):
            names |= {VIEWER, RESPONDER}
        if RESPONDER in names:
            names.add(VIEWER)
        cached = frozenset(names)
        # Cached on the request's user object for this request only, not a model field.
        user._pollerdash_roles = cached  # type: ignore[attr-defined]
    return cached


def can_read(user: object) -> bool:
    return VIEWER in roles_of(user)


def can_decide(user: object) -> bool:
    return RESPONDER in roles_of(user)


def _login_redirect(request: HttpRequest) -> HttpResponse:
    if getattr(request, "htmx", False):
        # The fragment must not be replaced by a login form: send the whole page to the login,
        # coming back to the page the person was on.
        current = request.headers.get("HX-Current-URL") or request.get_full_path()
        response = HttpResponse(status=401)
        login = redirect_to_login(current, resolve_url(settings.LOGIN_URL))
        response["HX-Redirect"] = login["Location"]
        return response
    return redirect_to_login(request.get_full_path(), resolve_url(settings.LOGIN_URL))


def _forbidden(request: HttpRequest, message: str) -> HttpResponse:
    if getattr(request, "htmx", False):
        # htmx swaps a 403 in place of the card (a card asking to sign in again is one): say it there.
        return HttpResponse(format_html('<p class="flash flash-error" role="alert">{}</p>', message), status=403)
    return render(request, "403.html", {"message": message}, status=403)


def viewer_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Signed in, with the viewer or responder role (or an admin)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return _login_redirect(request)
        if not can_read(request.user):
            return _forbidden(
                request,
                "Your account has no dashboard role yet. Ask an admin to add you to the viewer or responder group.",
            )
        return view(request, *args, **kwargs)

    return wrapped


def responder_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Signed in with the responder role: every decision goes through here."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return _login_redirect(request)
        if not can_decide(request.user):
            return _forbidden(request, "Deciding on cards needs the responder role; you can read them.")
        return view(request, *args, **kwargs)

    return wrapped
