"""Which environment variables a provider profile may name as its credential (`credential_env`).

A profile is edited by admins and operators, and the workers send whatever its variable holds as
a bearer token to the profile's URLs: a free choice of name would let a profile send any setting
(SECRET_KEY, DATABASE_URL, SITE_URL, the audit signing key through AUDIT_SIGNING_KEY_FILE, ...) to
any host. So a credential variable starts with PROVIDER_, or is listed by the operator in
PROVIDER_CREDENTIAL_ENV_ALLOWED; and pollerdash's own settings names are refused whatever the
configuration. Checked when a profile is validated (loadprofiles, the admin) and again by the
credential reader at request time, so a row stored before these rules cannot leak either.
"""

from __future__ import annotations

from django.conf import settings

PREFIX = "PROVIDER_"
# Families of pollerdash's (and its platform's) own settings; new settings join one of them.
RESERVED_PREFIXES = (
    "API_",
    "AUDIT_",
    "CALLBACK_",
    "CONN_",
    "CSRF_",
    "DATABASE_",
    "DEBUG",
    "DEFAULT_",
    "DISPATCH_",
    "DJANGO_",
    "EMAIL_",
    "LOG_",
    "LOGIN_",
    "METRICS_",
    "NOTIFY_",
    "OIDC_",
    "ONCALL_",
    "OPERATION_",
    "PAGERDUTY_",
    "POLL_",
    "POLLERDASH_",
    "Q_",
    "SECRET_",
    "SECURE_",
    "SESSION_",
    "SITE_",
    "SLACK_",
)
# A variable ending in _FILE names a file; the reader would also read NAME_FILE for NAME itself.
RESERVED_SUFFIXES = ("_FILE",)
# Names read from the environment that are not in a family above (PROVIDER_PORT: the demo's
# Procfile), and the process environment every worker has.
RESERVED_NAMES = frozenset(
    {
        "ALLOWED_HOSTS",
        "PROVIDER_ALLOWED_ORIGINS",
        "PROVIDER_CREDENTIAL_ENV_ALLOWED",
        "PROVIDER_CREDENTIAL_ORIGINS",
        "PROVIDER_ERROR_CAP_BYTES",
        "PROVIDER_PORT",
        "HOME",
        "PATH",
        "PWD",
        "USER",
    }
)


def _setting_names() -> frozenset[str]:
    # Every Django setting, so a setting added later is refused even before a rule names it.
    return frozenset(name for name in dir(settings) if name.isupper())


def reserved_problem(*, name: str) -> str | None:
    """Why `name` can never be a credential variable, or None."""
    if name.endswith(RESERVED_SUFFIXES):
        return f"{name} ends in _FILE: name the variable itself (its _FILE form is read too)"
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES) or name in _setting_names():
        return f"{name} is one of pollerdash's own settings and can never be a credential variable"
    return None


def credential_env_problem(*, name: str) -> str | None:
    """Why a profile may not name `name` as its credential variable, or None when it may."""
    reserved = reserved_problem(name=name)
    if reserved is not None:
        return reserved
    if name.startswith(PREFIX) and len(name) > len(PREFIX):
        return None
    if name in settings.PROVIDER_CREDENTIAL_ENV_ALLOWED:
        return None
    return f"{name} must start with {PREFIX} or be listed in the PROVIDER_CREDENTIAL_ENV_ALLOWED setting"
