"""Throttled password sign-in (django-axes): which username and address an attempt counts against, and
each lockout recorded in the audit chain.

Lockouts are per (username, address) pair: guessing alice's password from one address pauses that
pair, but cannot lock the real alice, on call somewhere else, out of the dashboard.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest

from operations.audit import entries as audit

THROTTLE_ACTOR = {"kind": "system", "id": "sign-in throttle"}


def username_of_attempt(request: HttpRequest, credentials: dict | None) -> str | None:
    # Only password attempts carry a username; an OpenID Connect callback (nonce, code verifier)
    # counts against none, so a refused single sign-on never locks a password account.
    if credentials and credentials.get("username"):
        return str(credentials["username"]).strip().lower()[:150]
    return None


def client_ip(request: HttpRequest) -> str | None:
    # uvicorn --proxy-headers --forwarded-allow-ips=<proxy> already puts the client's address in
    # REMOTE_ADDR (docs/deployment.md); reading X-Forwarded-For here would let any client choose
    # the address its failures count against.
    return request.META.get("REMOTE_ADDR")


def on_locked_out(
    sender: object, request: HttpRequest, username: str | None, ip_address: str | None, **_: object
) -> None:
    """Record the lockout once: django-axes signals again for every attempt made while locked (each
    extends the pause), and only the failure that reached the limit is a new lockout."""
    failures = getattr(request, "axes_failures_since_start", None)
    if isinstance(failures, int) and failures > settings.AXES_FAILURE_LIMIT:
        return
    with transaction.atomic():
        audit.append(
            entry_type="signin.locked_out",
            actor=THROTTLE_ACTOR,
            operation_id=None,
            data={
                "username": username or None,
                "ip_address": ip_address or None,
                "failures": failures if isinstance(failures, int) else None,
                "locked_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
            },
        )
