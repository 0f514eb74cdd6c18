"""Authentication backends of our own: the throttle in front of every sign-in, and permissions without
passwords."""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


class ThrottleBackend(AxesStandaloneBackend):
    """django-axes, first in AUTHENTICATION_BACKENDS: refuses a locked-out (username, address) before
    any backend checks a password. Sign-ins without a request (the shell, management commands, the
    test client's login) come from no address and are not throttled; django-axes would refuse them
    outright. Every sign-in over HTTP here passes its request (accounts/views.py)."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: object
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class PermissionsOnlyBackend(ModelBackend):
    """Django's permission checks without password sign-in (PASSWORD_LOGIN_ENABLED=0): the admin's
    permission checks need a backend that answers them, and this one signs nobody in."""

    def authenticate(
        self, request: object, username: str | None = None, password: str | None = None, **_: object
    ) -> None:
        return None
