"""The sign-in a session holds: how and when its person last authenticated, and since when the session
has been active (for its lifetime and idle timeout, accounts/middleware.py).

Written at every successful sign-in — password (the `user_logged_in` receiver below) or OpenID
Connect (accounts/views.py, with the ID token's auth_time), first or fresh — and read by the
dashboard when a decision is posted (operations.cards.signin.SignIn).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest
from django.utils import timezone

from operations.cards.signin import PASSWORD, SignIn

SIGN_IN = "pd_sign_in"
SIGNED_IN_AT = "pd_signed_in_at"  # epoch seconds: the session's lifetime counts from here
ACTIVE_AT = "pd_active_at"  # epoch seconds: the last request the person made (not a live refresh)
OIDC_BACKEND = "accounts.oidc.OIDCBackend"


def remember(session: SessionBase, sign_in: SignIn, *, now: datetime) -> None:
    """A successful sign-in: record how, and start the session's lifetime and idle clock again."""
    session[SIGN_IN] = sign_in.as_record()
    session[SIGNED_IN_AT] = session[ACTIVE_AT] = now.timestamp()


def current(session: SessionBase) -> SignIn | None:
    return SignIn.from_record(session.get(SIGN_IN))


def on_user_logged_in(sender: object, request: HttpRequest | None, user: AbstractBaseUser, **_: object) -> None:
    """Password sign-ins (and every other backend but OpenID Connect, which records its own with the
    provider's auth_time once the callback has checked it)."""
    if request is None or getattr(user, "backend", "") == OIDC_BACKEND:
        return
    now = timezone.now()
    remember(request.session, SignIn(method=PASSWORD, at=now), now=now)
