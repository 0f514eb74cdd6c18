"""Session lifetime and idle timeout (SESSION_LIFETIME_S, SESSION_IDLE_TIMEOUT_S).

Django's SESSION_COOKIE_AGE alone slides with every session write, and a dashboard tab that
refreshes itself every few seconds would never be idle. So: the last sign-in bounds the session
absolutely, and only requests a person made count as activity. Live refreshes say they are
background (header `X-Pollerdash-Background: 1`, set by static/js/app.js) and neither extend the
session nor write it. Activity is written at most once a minute, not on every request.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.signins import ACTIVE_AT, SIGNED_IN_AT

ACTIVITY_WRITE_EVERY_S = 60
BACKGROUND_HEADER = "X-Pollerdash-Background"


def session_expiry_reason(*, signed_in_at: float, active_at: float, now: float, lifetime_s: int, idle_s: int) -> str:
    """Why the session is over ("" while it is not). Pure: `now` is passed in."""
    if now - signed_in_at > lifetime_s:
        return f"Your session ended {_duration(lifetime_s)} after you signed in. Please sign in again."
    if now - active_at > idle_s:
        return f"You were signed out after {_duration(idle_s)} without activity."
    return ""


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    minutes = max(1, round(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


class SessionLimitsMiddleware:
    """After authentication and messages: an expired session ends before any view runs, and the
    login page says why."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            self._check(request)
        return self.get_response(request)

    def _check(self, request: HttpRequest) -> None:
        now = timezone.now().timestamp()
        session = request.session
        # A session from before these limits existed starts its clock now.
        signed_in_at = session.setdefault(SIGNED_IN_AT, now)
        active_at = session.get(ACTIVE_AT, signed_in_at)
        reason = session_expiry_reason(
            signed_in_at=signed_in_at,
            active_at=active_at,
            now=now,
            lifetime_s=settings.SESSION_LIFETIME_S,
            idle_s=settings.SESSION_IDLE_TIMEOUT_S,
        )
        if reason:
            logout(request)
            messages.info(request, reason)
            return
        if request.headers.get(BACKGROUND_HEADER) != "1" and now - active_at >= ACTIVITY_WRITE_EVERY_S:
            session[ACTIVE_AT] = now
