"""Settings for the test OpenID Provider (never a production configuration)."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

DEBUG = False
SECRET_KEY = os.environ["TESTOP_SECRET_KEY"]
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ISSUER = os.environ["TESTOP_ISSUER"]  # http://127.0.0.1:<port>/o
GROUP_CLAIM = os.environ.get("TESTOP_GROUP_CLAIM", "groups")
CONTROL_TOKEN = os.environ["TESTOP_CONTROL_TOKEN"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
    "tests.oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["TESTOP_DB"]}}
# Tables straight from the models: a fresh OP starts in well under a second instead of running
# every migration of auth, sessions and django-oauth-toolkit.
MIGRATION_MODULES = {app: None for app in ("auth", "contenttypes", "sessions", "oauth2_provider", "oidc_provider")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/login/"
# The OP's own session cookie must not collide with the RP's on 127.0.0.1 (cookies ignore ports).
SESSION_COOKIE_NAME = "testop_sessionid"
CSRF_COOKIE_NAME = "testop_csrftoken"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["TESTOP_RSA_KEY"],
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    # A valid id_token_hint logs out without a confirmation page (like Keycloak with a hint).
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validators.TestOPValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Name and username",
        "email": "Email address",
        "groups": "Group membership",
    },
    "ID_TOKEN_EXPIRE_SECONDS": 300,
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
