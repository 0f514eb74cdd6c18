from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def sign_in(request: HttpRequest) -> dict[str, object]:
    """What the sign-in page and the top bar offer: single sign-on, passwords, or both."""
    return {
        "oidc_enabled": settings.OIDC_ENABLED,
        "oidc_provider_name": settings.OIDC_PROVIDER_NAME,
        "password_login_enabled": settings.PASSWORD_LOGIN_ENABLED,
    }
