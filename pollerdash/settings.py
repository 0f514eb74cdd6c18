"""pollerdash settings: one file, every value from the environment (see docs/configuration.md)."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from operations.infrastructure.addresses import allowed_endpoints
from operations.providers.origins import parse_allowed_origins, parse_credential_origins
from pollerdash.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
)
from pollerdash.storage import s3_audit_archive

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("POLLERDASH_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
# Without DEBUG there is no fallback: an unset key stays empty, and Django refuses everything that
# signs (sessions, CSRF, list cursors, django-q2 tasks) with "The SECRET_KEY setting must not be
# empty", while commands that sign nothing (migrate, makemigrations, check) still run.
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY and DEBUG:
    # Development only.
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    # The admin without autodiscovery at start-up (pollerdash/apps.py): the URLconf imports it.
    "pollerdash.apps.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_q",
    "operations",
    "escalations",
    "accounts",
    "axes",
    "demo",
]

MIDDLEWARE = [
    # First: a NUL or other control character in the path, the query, a form field or a cookie never
    # reaches a view or a query (PostgreSQL refuses NUL in text).
    "operations.infrastructure.control_characters.ControlCharactersMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "operations.infrastructure.no_store.NoStoreMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After authentication and messages: an expired session ends before any view runs, and the
    # login page says why (SESSION_LIFETIME_S, SESSION_IDLE_TIMEOUT_S).
    "accounts.middleware.SessionLimitsMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a lockout into the 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "pollerdash.urls"
WSGI_APPLICATION = "pollerdash.wsgi.application"
ASGI_APPLICATION = "pollerdash.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.sign_in",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
# SQLite (WAL, IMMEDIATE transactions, busy timeout) is the embedded default for a one-machine
# trial; PostgreSQL is the source of truth in production (DATABASE_URL=postgres://...).
# DATABASE_POOL_MODE=transaction: DATABASE_URL points at PgBouncer with pool_mode = transaction
# (docs/deployment.md, "Topology"); "session" (the default) for PostgreSQL direct or session pooling.
DATABASE_POOL_MODE = env_str("DATABASE_POOL_MODE", "session")
if DATABASE_POOL_MODE not in {"session", "transaction"}:
    raise ImproperlyConfigured(f"DATABASE_POOL_MODE={DATABASE_POOL_MODE!r}: use session or transaction")
DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'pollerdash.sqlite3'}"),
        base_dir=BASE_DIR,
        pool_mode=DATABASE_POOL_MODE,
    )
}
IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
if DATABASE_POOL_MODE == "transaction" and not IS_POSTGRES:
    raise ImproperlyConfigured("DATABASE_POOL_MODE=transaction is for PostgreSQL behind PgBouncer, not SQLite")
if IS_POSTGRES and env_bool("DATABASE_POOL", False):
    # The web process (uvicorn, one thread per request) shares a psycopg pool. qcluster and the
    # dispatcher must not use it: the pool does not survive django-q2's fork (django-q2 #209).
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 2,
        "max_size": env_int("DATABASE_POOL_SIZE", 10),
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    # Persistent connections: measured here, CONN_MAX_AGE=0 reconnects on every django-q2 queue
    # operation and cuts throughput 4-8x (measured on a 2-core machine; bench/controller.py shows it).
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Sign-in: local passwords and OpenID Connect (docs/sign-in.md) ------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "inbox"
LOGOUT_REDIRECT_URL = "login"
# Local passwords: on for the demo and tests; switch them off in production once single sign-on
# works (the Django admin then signs in through the identity provider as well).
PASSWORD_LOGIN_ENABLED = env_bool("PASSWORD_LOGIN_ENABLED", True)
OIDC_ENABLED = env_bool("OIDC_ENABLED", False)
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "single sign-on")  # the button says "Sign in with …"
# The issuer exactly as the provider's discovery document states it; the endpoints and keys come
# from <issuer>/.well-known/openid-configuration, read on first use (accounts/discovery.py).
OIDC_OP_ISSUER = env_str("OIDC_ISSUER", "").rstrip("/")
OIDC_DISCOVERY_TTL_S = env_int("OIDC_DISCOVERY_TTL_S", 3600)
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_secret("OIDC_CLIENT_SECRET")
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")  # RS256 or ES256; keys from the provider's JWKS
OIDC_RP_SCOPES = env_str("OIDC_SCOPES", "openid email profile")
OIDC_CLOCK_SKEW_S = env_int("OIDC_CLOCK_SKEW_S", 60)
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
# The claim listing the person's groups at the provider; empty: roles are assigned in the admin.
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_VIEWER_GROUPS = env_list("OIDC_VIEWER_GROUPS")
OIDC_RESPONDER_GROUPS = env_list("OIDC_RESPONDER_GROUPS")
OIDC_ADMIN_GROUPS = env_list("OIDC_ADMIN_GROUPS")
OIDC_CREATE_USER = env_bool("OIDC_CREATE_USERS", True)
# Fixed: the code flow with PKCE and a nonce; the ID token kept in the (server-side) session for
# the id_token_hint of RP-initiated logout; the library's HTTP timeouts (connect, read).
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True
OIDC_TIMEOUT = (5, 10)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
OIDC_OP_LOGOUT_URL_METHOD = "accounts.views.provider_logout_url"
LOGIN_REDIRECT_URL_FAILURE = "login"

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out client before any backend checks a password.
    "accounts.backends.ThrottleBackend",
    *(["accounts.oidc.OIDCBackend"] if OIDC_ENABLED else []),
    # Without passwords, a backend that signs nobody in still answers the admin's permission checks.
    "django.contrib.auth.backends.ModelBackend"
    if PASSWORD_LOGIN_ENABLED
    else "accounts.backends.PermissionsOnlyBackend",
]

# Cancel at the provider, close, accept output and bulk decisions cannot be undone: they need a
# sign-in within this many minutes (operations/decisions/check.py).
FRESH_SIGN_IN_MINUTES = env_int("FRESH_SIGN_IN_MINUTES", 15)

# Throttled password sign-in (django-axes, accounts/throttle.py): this many failures for one
# username from one address pause that pair for LOGIN_LOCKOUT_MINUTES; each lockout is an audit entry.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_USERNAME_CALLABLE = "accounts.throttle.username_of_attempt"
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_ip"
AXES_VERBOSE = False

# --- Sessions and cookies -----------------------------------------------------------------------------
# An absolute lifetime from the last sign-in, and an idle timeout that live refreshes do not reset
# (accounts/middleware.py).
SESSION_LIFETIME_S = env_int("SESSION_LIFETIME_S", 12 * 3600)
SESSION_IDLE_TIMEOUT_S = env_int("SESSION_IDLE_TIMEOUT_S", 3600)
SESSION_COOKIE_AGE = SESSION_LIFETIME_S
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# Lax, not Strict: the identity provider's redirect back to /oidc/callback/ is a cross-site
# navigation, and it must carry the session that holds the sign-in's state, nonce and PKCE verifier.
SESSION_COOKIE_SAMESITE = "Lax"
# Only over https when the cookies are: a sign-in's `next` and the provider's redirect stay on it.
OIDC_REDIRECT_REQUIRE_HTTPS = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# --- HTTPS behind a TLS-terminating proxy (docs/deployment.md) --------------------------------------
# The header the proxy sets, and strips from clients, to say the request came over https (e.g.
# X-Forwarded-Proto). Unset when uvicorn runs with --proxy-headers --forwarded-allow-ips=<proxy>.
_proxy_ssl_header = env_str("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https") if _proxy_ssl_header else None
)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Prometheus scrapes /metrics over plain HTTP on the private network.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# HSTS for subdomains and preloading commit the whole domain, not only this service: the domain
# owner decides, so `check --deploy` is not asked to insist on them.
SILENCED_SYSTEM_CHECKS = [
    *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),
    *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),
]
# Content-Security-Policy on every response (django-csp 4): no inline script or style, no eval.
# htmx runs with allowEval=false and includeIndicatorStyles=false (templates/base.html).
# form-action also covers where a form's answer redirects: signing out (a POST) ends at the
# identity provider's end_session_endpoint, on the issuer's origin.
_issuer = urlsplit(OIDC_OP_ISSUER)
_ISSUER_ORIGIN = f"{_issuer.scheme}://{_issuer.netloc}" if OIDC_ENABLED and _issuer.netloc else ""
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF, *([_ISSUER_ORIGIN] if _ISSUER_ORIGIN else [])],
    }
}

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Static files ---------------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Error reports (the DEBUG page, error emails) hide webhook URLs, DSNs and routing keys as well.
DEFAULT_EXCEPTION_REPORTER_FILTER = "pollerdash.error_reports.SafeExceptionReporterFilter"

# --- Logging: stdout, secrets scrubbed --------------------------------------------------------------
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_secrets": {"()": "operations.infrastructure.redaction.RedactSecretsFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": sys.stdout,
            "formatter": "plain",
            "filters": ["redact_secrets"],
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["stdout"], "level": LOG_LEVEL, "propagate": False},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # django-axes logs every sign-in at INFO; failures and lockouts (WARNING) remain.
        "axes": {"level": "WARNING"},
        # The MCP SDK logs every stateless /mcp request at INFO ("Terminating session"); its
        # warnings and errors remain.
        "mcp": {"level": "WARNING"},
    },
}

# --- Polling bounds (docs/DESIGN.md section 4) ------------------------------------------------------------
POLL_HTTP_CONNECT_TIMEOUT_S = env_float("POLL_HTTP_CONNECT_TIMEOUT_S", 5.0)
POLL_HTTP_READ_TIMEOUT_S = env_float("POLL_HTTP_READ_TIMEOUT_S", 10.0)
POLL_HTTP_TOTAL_TIMEOUT_S = env_float("POLL_HTTP_TOTAL_TIMEOUT_S", 30.0)
POLL_BODY_CAP_BYTES = env_int("POLL_BODY_CAP_BYTES", 1024 * 1024)
# A claim's lease must outlive the one request it covers (total timeout) plus the short wait for
# the provider account's send slot; an expired lease lets the dispatcher hand the poll to another
# worker with a new fence, which turns the late original into a no-op.
POLL_LEASE_S = env_float("POLL_LEASE_S", POLL_HTTP_TOTAL_TIMEOUT_S + 30.0)
# Provider hints are clamped to this ceiling; a longer wait than this is never trusted blindly.
POLL_HINT_CAP_S = env_int("POLL_HINT_CAP_S", 15 * 60)
# Floor for any provider-guided delay (Retry-After 0, past dates): never hammer the provider.
POLL_HINT_FLOOR_S = env_float("POLL_HINT_FLOOR_S", 1.0)
# 429 without Retry-After: a much longer local delay than ordinary backoff.
POLL_RATE_LIMITED_DELAY_S = env_float("POLL_RATE_LIMITED_DELAY_S", 30.0)
# Hard limits for registrations.
OPERATION_MAX_DEADLINE_S = env_int("OPERATION_MAX_DEADLINE_S", 7 * 24 * 3600)
OPERATION_MIN_DEADLINE_S = env_int("OPERATION_MIN_DEADLINE_S", 10)
OPERATION_MAX_STATUS_REQUESTS = env_int("OPERATION_MAX_STATUS_REQUESTS", 10_000)
PROVIDER_ERROR_CAP_BYTES = env_int("PROVIDER_ERROR_CAP_BYTES", 8 * 1024)
# Credential variables a profile may name besides PROVIDER_* (comma-separated); pollerdash's own
# settings are refused whatever this says (operations/providers/credential_names.py).
PROVIDER_CREDENTIAL_ENV_ALLOWED = env_list("PROVIDER_CREDENTIAL_ENV_ALLOWED")
# Where each credential variable may be sent: NAME=https://api.acme.example[,origin…][;NAME2=…]
# (origin = scheme://host[:port]). A profile's credential goes only to its variable's origins; a
# variable with no entry is sent nowhere. Only this environment decides it (docs/DESIGN.md section 2);
# a malformed value stops start-up, naming the entry (operations/providers/origins.py).
PROVIDER_CREDENTIAL_ORIGINS = env_str("PROVIDER_CREDENTIAL_ORIGINS", "")
parse_credential_origins(PROVIDER_CREDENTIAL_ORIGINS)
# Origins a profile without a credential may use although they are not public https addresses (a
# provider on this host or network, like the demo's fake provider), comma-separated.
PROVIDER_ALLOWED_ORIGINS = env_list("PROVIDER_ALLOWED_ORIGINS")
parse_allowed_origins(tuple(PROVIDER_ALLOWED_ORIGINS))

# --- Dispatcher -------------------------------------------------------------------------------------
# Claims per transaction: bounded so the provider-account row locks a pass takes (which a
# worker's charge also needs) are held for milliseconds, not for hundreds of enqueues.
DISPATCH_BATCH = env_int("DISPATCH_BATCH", 100)
# An idle dispatcher wakes at least this often (less when the next due time is nearer): the
# dispatch lag floor. Measured: p95 due->start 0.32 s with 0.25 s.
DISPATCH_IDLE_SLEEP_S = env_float("DISPATCH_IDLE_SLEEP_S", 0.25)
# ...but never less than this: with a poll due every few milliseconds, claiming them in small
# batches costs at most this much lag and keeps the dispatcher from spinning one claim per pass.
DISPATCH_MIN_SLEEP_S = env_float("DISPATCH_MIN_SLEEP_S", 0.1)
# The steps other than claiming (deadline sweeps, expired leases, callbacks, audit integration,
# escalation policies and notifications) run in a full pass this often; the passes in between only
# claim. At a medium load the dispatcher passes every DISPATCH_MIN_SLEEP_S, and running every step
# each time cost more CPU (here and in PostgreSQL) than the claims themselves.
DISPATCH_SWEEP_EVERY_S = env_float("DISPATCH_SWEEP_EVERY_S", 0.5)
# Back-pressure: with this many tasks already waiting in django-q2's queue, claim nothing more.
# Workers that fall behind would only see the leases of queued claims expire; the due operations
# stay unclaimed instead, visible as "oldest due" age on the system panel and in /metrics. Kept
# small because every django-q2 dequeue scans the whole (unindexed) queue table.
DISPATCH_MAX_QUEUED = env_int("DISPATCH_MAX_QUEUED", 250)
DISPATCH_HEARTBEAT_S = env_float("DISPATCH_HEARTBEAT_S", 5.0)
# The fleet has stalled when operations have been due this long with no status request sent for as
# long, or a task has waited this long with no worker taking any (operations/observability/liveness.py): the
# dispatcher logs an ERROR and its heartbeat is not healthy; /system/ and /metrics show it red.
# Keep it above django-q2's task timeout (Q_TIMEOUT): a worker may rightly hold one task that long.
STALL_ALERT_S = env_float("STALL_ALERT_S", 60.0)
if not STALL_ALERT_S > 0:  # 0 would call every due operation a stall
    raise ValueError(f"STALL_ALERT_S: {STALL_ALERT_S:g} is not a positive number of seconds")
# A pass that claims more polls than this groups them into tasks of up to DISPATCH_POLLS_PER_TASK
# (one worker sends a group's requests together and writes its outcomes in one transaction),
# because django-q2's fixed cost per task (queue row, dequeue, acknowledgement) is as large as a
# poll's own. A light pass still gets one task per poll.
DISPATCH_TASK_SPREAD = env_int("DISPATCH_TASK_SPREAD", 4)
DISPATCH_POLLS_PER_TASK = env_int("DISPATCH_POLLS_PER_TASK", 8)
# /metrics: scrapers send "Authorization: Bearer <token>". METRICS_ALLOW_LOOPBACK=1 also serves
# direct clients on this machine (loopback address, no proxy headers): the demo, a Prometheus
# beside the web process.
METRICS_TOKEN = env_secret("METRICS_TOKEN")
METRICS_ALLOW_LOOPBACK = env_bool("METRICS_ALLOW_LOOPBACK", False)

# --- django-q2 (ORM broker on our own database, so an enqueue commits with the claim) ----------------
Q_WORKERS = env_int("Q_WORKERS", 4)
Q_CLUSTER = {
    "name": "pollerdash",  # identical on every host: it is the queue key and the signing salt
    "orm": "default",
    # The ORM broker with one statement to take, enqueue or acknowledge a task
    # (operations/infrastructure/queue_broker.py).
    "broker_class": "operations.infrastructure.queue_broker.Broker",
    "workers": Q_WORKERS,
    # Tasks waiting in a cluster's memory are already locked with their retry clock running;
    # keep that queue short so a task is never redelivered while it merely waits.
    "queue_limit": Q_WORKERS,
    # One row per dequeue: a larger bulk lets one cluster hoard due polls while others idle.
    "bulk": env_int("Q_BULK", 1),
    "poll": env_float("Q_POLL", 0.2),  # idle pusher sleep: the pickup latency floor (p95 0.24 s measured)
    # Hard ceiling for a task: the HTTP request is capped at POLL_HTTP_TOTAL_TIMEOUT_S, plus the
    # send-slot wait and two short transactions. Keep it (plus django-q2's 3 s guard buffer) below
    # POLL_LEASE_S: a hung worker is then killed before its lease lets another worker poll the
    # same operation, so one operation never has two requests in flight.
    "timeout": env_int("Q_TIMEOUT", int(POLL_HTTP_TOTAL_TIMEOUT_S) + 15),
    # Redelivery after `retry` seconds unacknowledged: far above timeout * (1 + queue_limit/workers)
    # so a slow task is never run twice by django-q2; pollerdash's own lease and fence handle a
    # dead worker sooner and safely.
    "retry": env_int("Q_RETRY", 3 * (int(POLL_HTTP_TOTAL_TIMEOUT_S) + 15) + 15),
    # pollerdash, not django-q2, decides whether and when to poll again: never rerun a failure.
    "ack_failures": True,
    "max_attempts": 1,
    "save_limit": -1,  # poll outcomes live in StatusCheck; successes need no django-q2 row
    "catch_up": False,
    "recycle": 500,
    "max_rss": 300_000,
    "label": "Task queue",
}
# django-q2 logs two INFO lines per task ("Enqueued", "Processed"): at 100 polls/s that is noise
# next to StatusCheck and the audit chain. Failures (ERROR) and reincarnations (CRITICAL) remain.
LOGGING["loggers"]["django-q"] = {"level": env_str("Q_LOG_LEVEL", "WARNING")}

# --- Audit log (docs/DESIGN.md section 8) ----------------------------------------------------------------
AUDIT_LOG_NAME = env_str("AUDIT_LOG_NAME", "pollerdash/audit")
AUDIT_SIGNING_KEY_FILE = env_str("AUDIT_SIGNING_KEY_FILE", "")
AUDIT_CHECKPOINT_INTERVAL_S = env_int("AUDIT_CHECKPOINT_INTERVAL_S", 60)
# Verifier key lines (manage.py audit_keys) of earlier signing keys, trusted after a rotation.
AUDIT_VERIFIER_KEYS_FILE = env_str("AUDIT_VERIFIER_KEYS_FILE", "")
# Witnesses expected to cosign checkpoints (names, comma-separated; manage.py audit_witness), and how
# long since one's newest cosignature before /system/ says it fell behind.
AUDIT_WITNESS_NAMES = env_str("AUDIT_WITNESS_NAMES", "")
AUDIT_WITNESS_MAX_LAG_S = env_int("AUDIT_WITNESS_MAX_LAG_S", 600)
# manage.py archive: where sealed ranges go (a directory under BASE_DIR, unless STORAGES has an
# "audit_archive" backend), and how long finished operations, their checks and django-q2's
# finished task rows are kept.
AUDIT_ARCHIVE_DIR = env_str("AUDIT_ARCHIVE_DIR", "var/audit-archive")
# Full and date-range audit exports the dashboard streams at once, in all and per person (each holds
# a database connection until its last byte; 0 = no cap), and the most entries one may hold: larger
# ones are for manage.py audit_export on the server (an operation's export is neither capped nor sized).
AUDIT_EXPORT_WEB_CONCURRENT = env_int("AUDIT_EXPORT_WEB_CONCURRENT", 2)
AUDIT_EXPORT_WEB_CONCURRENT_PER_USER = env_int("AUDIT_EXPORT_WEB_CONCURRENT_PER_USER", 1)
AUDIT_EXPORT_WEB_MAX_ENTRIES = env_int("AUDIT_EXPORT_WEB_MAX_ENTRIES", 1_000_000)
# A streaming export renews its slot's lease while it streams; a killed process's slot frees itself
# after this long (escalations/export_slots.py).
AUDIT_EXPORT_SLOT_LEASE_S = env_int("AUDIT_EXPORT_SLOT_LEASE_S", 120)
RETENTION_DAYS = env_int("RETENTION_DAYS", 90)
# Or an S3-compatible bucket (`pip install 'pollerdash[s3]'`), so archives outlive the host that
# wrote them; credentials from boto3's own chain, never from settings (pollerdash/storage.py).
AUDIT_ARCHIVE_S3_BUCKET = env_str("AUDIT_ARCHIVE_S3_BUCKET", "")
if AUDIT_ARCHIVE_S3_BUCKET:
    STORAGES["audit_archive"] = s3_audit_archive(
        bucket=AUDIT_ARCHIVE_S3_BUCKET,
        prefix=env_str("AUDIT_ARCHIVE_S3_PREFIX", "audit-archive"),
        endpoint_url=env_str("AUDIT_ARCHIVE_S3_ENDPOINT_URL", ""),
        region=env_str("AUDIT_ARCHIVE_S3_REGION", ""),
    )

# --- Agent API and callbacks ------------------------------------------------------------------------
API_WAIT_DEFAULT_S = 25
API_WAIT_MAX_S = 50
# One watcher per web process re-reads every awaited operation in one query this often; a wait
# returns at most about this long after the operation finished.
API_WAIT_CHECK_INTERVAL_S = env_float("API_WAIT_CHECK_INTERVAL_S", 0.25)
# Concurrent waits one agent may hold on one web process (429 too_many_waits beyond).
API_WAIT_MAX_PER_AGENT = env_int("API_WAIT_MAX_PER_AGENT", 200)
# Database threads for the async API code (waits): their number, not the number of waits, bounds
# the threads and connections the web process uses for them.
API_DB_THREADS = env_int("API_DB_THREADS", 4)
# Server-sent event streams (GET /api/v1/operations/{id}/events): comment line every N seconds
# so proxies keep the connection; a stream ends after at most this long (clients resume with
# Last-Event-ID).
API_EVENTS_KEEPALIVE_S = env_float("API_EVENTS_KEEPALIVE_S", 15.0)
API_EVENTS_MAX_S = env_float("API_EVENTS_MAX_S", 300.0)
# Per-agent quotas (operations.limits.quotas; 429 quota_exceeded with Retry-After, 0 turns one off):
# operations not done, new registrations per minute, and cards its operations opened this hour
# (beyond it new registrations wait for the next hour; registered operations are still watched).
AGENT_MAX_OPEN_OPERATIONS = env_int("AGENT_MAX_OPEN_OPERATIONS", 1000)
AGENT_REGISTRATIONS_PER_MINUTE = env_int("AGENT_REGISTRATIONS_PER_MINUTE", 120)
AGENT_CARDS_PER_HOUR = env_int("AGENT_CARDS_PER_HOUR", 30)

# MCP over Streamable HTTP at /mcp (docs/DESIGN.md section 9, "MCP"): a task's requestState is
# valid this long beyond the poll interval it came with; a subscriptions/listen stream checks the
# caller's token again at least this often (and before each notification), so a revoked token's
# stream ends within it; one stream follows at most this many tasks.
MCP_TASK_STATE_TTL_S = env_int("MCP_TASK_STATE_TTL_S", 3600)
MCP_STREAM_RECHECK_S = env_float("MCP_STREAM_RECHECK_S", 15.0)
MCP_LISTEN_MAX_TASKS = env_int("MCP_LISTEN_MAX_TASKS", 100)

# host:port pairs exempt from the public-https rule (a bare host: https on 443 only); a malformed
# entry stops start-up with its name (operations/infrastructure/addresses.py).
CALLBACK_ALLOWED_HOSTS = env_list("CALLBACK_ALLOWED_HOSTS")
allowed_endpoints(tuple(CALLBACK_ALLOWED_HOSTS))
CALLBACK_TIMEOUT_S = env_float("CALLBACK_TIMEOUT_S", 15.0)
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024

# --- Request bodies, capped before they are read (pollerdash/body_limits.py) -----------------------
# The ASGI layer in front of Django answers 413 to a Content-Length over the cap without reading the
# body, and stops reading a chunked body at the first byte over it: nothing is spooled to disk before
# a token, session or signature is checked. A path's cap is the one of its longest prefix below, else
# REQUEST_BODY_MAX_BYTES. Machine endpoints (the agent API, Slack's interactions, MCP over Streamable
# HTTP) take small JSON or form bodies; the dashboard and the admin post forms without files.
REQUEST_BODY_MAX_BYTES = env_int("REQUEST_BODY_MAX_BYTES", 1024 * 1024)
REQUEST_BODY_MACHINE_MAX_BYTES = env_int("REQUEST_BODY_MACHINE_MAX_BYTES", 64 * 1024)
REQUEST_BODY_PATH_CAPS = {
    "/api/": REQUEST_BODY_MACHINE_MAX_BYTES,
    "/slack/": REQUEST_BODY_MACHINE_MAX_BYTES,
    "/pagerduty/": REQUEST_BODY_MACHINE_MAX_BYTES,
    "/mcp": REQUEST_BODY_MACHINE_MAX_BYTES,
}

# --- Notifications (docs/DESIGN.md "Reaching on-call") ---------------------------------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "pollerdash@localhost")
# A mail server that never answers frees the worker after this long (Django's default is no timeout).
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
# escalations.mailfiles.EmailBackend (the demo): one .eml file per message here, one line printed.
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
# Without an escalation policy: the implicit "settings" policy tells these, every NOTIFY_REMINDER_S.
NOTIFY_EMAILS = env_list("NOTIFY_EMAILS")
NOTIFY_WEBHOOK_URL = env_secret("NOTIFY_WEBHOOK_URL")
NOTIFY_REMINDER_S = env_int("NOTIFY_REMINDER_S", 15 * 60)
# The policy a profile without its own follows (a name; else the one marked default in the admin).
ESCALATION_DEFAULT_POLICY = env_str("ESCALATION_DEFAULT_POLICY", "")
# Caps on messages to people, beyond which a notification is recorded as skipped, not sent (0 turns
# one off): per card (its policy's levels and repeats; the last one says so), per hour in all, and
# per hour for the messages one person's acts cause (a give-back's restart, a hand-over, a
# take-over, an acceptance to confirm), which count against that person only. Follow-ups that close
# what was sent (PagerDuty acknowledge/resolve, a Slack message updated), a new card's or group's
# first page and every PagerDuty trigger are never held back by the hourly caps
# (escalations.oncall.caps).
NOTIFY_MAX_PER_CARD = env_int("NOTIFY_MAX_PER_CARD", 24)
NOTIFY_MAX_PER_HOUR = env_int("NOTIFY_MAX_PER_HOUR", 60)
NOTIFY_MAX_PER_ACTOR_PER_HOUR = env_int("NOTIFY_MAX_PER_ACTOR_PER_HOUR", 30)
# A give-back restarts a card's policy from level 1 at most once per this many seconds; a give-back
# sooner resumes the round where it was, nothing resent (0: every give-back restarts).
NOTIFY_RESTART_MIN_S = env_int("NOTIFY_RESTART_MIN_S", 300)
# Delay before each attempt of one notification (seconds, jittered +-20 %; Retry-After is honoured
# up to 15 min): six attempts over about 18 minutes, then the row is failed and the card says so.
NOTIFY_RETRY_SCHEDULE_S = [float(s) for s in env_list("NOTIFY_RETRY_SCHEDULE_S", "0,30,60,120,300,600")]
# host:port pairs notification URLs (webhooks, the PagerDuty events URL, Slack's API and response
# URLs) may use over plain http or off Slack's hosts: local receivers in tests and the demo only.
NOTIFY_ALLOWED_HOSTS = env_list("NOTIFY_ALLOWED_HOSTS")
# PagerDuty Events API v2 (or a compatible receiver); routing keys come from ONCALL_* variables
# named by policy targets. The dedup_key prefix defaults to SITE_URL's host.
PAGERDUTY_EVENTS_URL = env_str("PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue")
PAGERDUTY_DEDUP_PREFIX = env_str("PAGERDUTY_DEDUP_PREFIX", "")
# PagerDuty v3 webhook subscriptions (optional): the subscriptions' signing secrets, comma-separated
# (two during a rotation), enable POST /pagerduty/webhooks (404 without). A v3 webhook names the
# acting PagerDuty user by id only, with no email: PAGERDUTY_USER_EMAILS maps "PUSERID=email,..." and
# the email is matched to one active pollerdash account, as Slack's confirmed email is.
PAGERDUTY_WEBHOOK_SECRETS = [s.strip() for s in env_secret("PAGERDUTY_WEBHOOK_SECRETS").split(",") if s.strip()]
PAGERDUTY_USER_EMAILS = {
    user_id.strip(): email.strip().lower()
    for user_id, _, email in (item.partition("=") for item in env_list("PAGERDUTY_USER_EMAILS"))
    if user_id.strip() and email.strip()
}
# The Slack app (optional): the signing secret enables the Acknowledge button and POST
# /slack/interactions; the bot token enables slack_channel targets (updated in place) and matching
# a clicker by their verified email (users:read.email).
SLACK_SIGNING_SECRET = env_secret("SLACK_SIGNING_SECRET")
SLACK_BOT_TOKEN = env_secret("SLACK_BOT_TOKEN")
SLACK_TEAM_ID = env_str("SLACK_TEAM_ID", "")
SLACK_APP_ID = env_str("SLACK_APP_ID", "")
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api").rstrip("/")

# --- Dashboard --------------------------------------------------------------------------------------
# Decision POSTs one person may make per minute (429 beyond it, nothing written), and how long
# repeats of one refused attempt count on its first record instead of adding records.
DECISIONS_PER_MINUTE = env_int("DECISIONS_PER_MINUTE", 30)
DECISION_REPEAT_WINDOW_S = env_int("DECISION_REPEAT_WINDOW_S", 600)
# Cards opened for the same provider account and reason within this many seconds of a group's first
# card (while one of its cards is open) form one group: one inbox row, one notification, bulk
# decisions over its members (at most 100 cards each). 0 turns grouping off.
CARD_GROUP_WINDOW_S = env_int("CARD_GROUP_WINDOW_S", 10 * 60)
