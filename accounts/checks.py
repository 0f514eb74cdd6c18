"""Start-up checks of the sign-in settings (`manage.py check`, and every process at start): a setting
that would leave nobody able to sign in, or everyone without a role, is named at once."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register


@register("pollerdash")
def sign_in_settings(**_: object) -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    if settings.OIDC_ENABLED:
        missing = [
            name
            for name, value in (
                ("OIDC_ISSUER", settings.OIDC_OP_ISSUER),
                ("OIDC_CLIENT_ID", settings.OIDC_RP_CLIENT_ID),
                ("OIDC_CLIENT_SECRET", settings.OIDC_RP_CLIENT_SECRET),
            )
            if not value
        ]
        if missing:
            problems.append(
                Error(f"OIDC_ENABLED=1 needs {', '.join(missing)}", hint="docs/sign-in.md", id="pollerdash.E101")
            )
        if settings.OIDC_OP_ISSUER and not settings.OIDC_OP_ISSUER.startswith(("https://", "http://")):
            problems.append(Error("OIDC_ISSUER must be a URL (https://…)", id="pollerdash.E102"))
        mapped = settings.OIDC_VIEWER_GROUPS or settings.OIDC_RESPONDER_GROUPS or settings.OIDC_ADMIN_GROUPS
        if settings.OIDC_GROUPS_CLAIM and not mapped:
            problems.append(
                Warning(
                    "OIDC_GROUPS_CLAIM is set but no OIDC_*_GROUPS map its groups to roles: people who sign in "
                    "get no role until an admin gives them one",
                    id="pollerdash.W101",
                )
            )
    elif not settings.PASSWORD_LOGIN_ENABLED:
        problems.append(
            Error("PASSWORD_LOGIN_ENABLED=0 without OIDC_ENABLED=1: nobody can sign in", id="pollerdash.E103")
        )
    return problems
