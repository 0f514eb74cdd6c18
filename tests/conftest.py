"""Shared fixtures: a real fake provider over HTTP, profiles and operations, the secret canary.

Tests talk to the fake provider over real loopback HTTP and count requests from its own log.
Time is injected with time-machine; randomness with a seeded Random.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from hypothesis import settings as hypothesis_settings

from tests.support import (
    CANARY,
    CANARY_PD_KEY,
    T0,
    bind_provider_origins,
    canary_emails,
    canary_log_handler,
    canary_rows,
    has_canary,
    job_id,
)

os.environ["PROVIDER_FAKE_TOKEN"] = CANARY
# A routing key named by the tests' policies (ONCALL_*): the guard below proves it never reaches a
# row, a log line, a response or an email. Tests that post to a Slack webhook put CANARY_SLACK_HOOK
# in its URL; the Slack app's secrets are set per test (tests/escalations/conftest.py).
os.environ["ONCALL_PD_CANARY"] = CANARY_PD_KEY
# Property tests draw the same examples on every run, so a failure in CI reproduces on a laptop.
hypothesis_settings.register_profile("pollerdash", derandomize=True, database=None)
hypothesis_settings.load_profile("pollerdash")
# `make test` sets SECRET_KEY; a bare `pytest` run gets the same test-only key, here and in the
# processes the integration tests start.
os.environ.setdefault("SECRET_KEY", "test-only-not-secret")
try:
    settings.SECRET_KEY  # noqa: B018 - Django refuses to read an empty key
except ImproperlyConfigured:
    settings.SECRET_KEY = os.environ["SECRET_KEY"]
bind_provider_origins()
__all__ = ["CANARY", "T0", "job_id"]


def is_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def browser_available() -> bool:
    return shutil.which("chromium") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """PostgreSQL-only tests belong to the PostgreSQL pass, SQLite-only ones to the SQLite pass;
    missing browsers fail when required."""
    require_browser = os.environ.get("REQUIRE_BROWSER") == "1"
    deselected, kept = [], []
    for item in items:
        if item.get_closest_marker("postgres") and not is_postgres():
            deselected.append(item)
            continue
        if item.get_closest_marker("sqlite") and is_postgres():
            deselected.append(item)
            continue
        if item.get_closest_marker("browser") and not browser_available() and not require_browser:
            item.add_marker(pytest.mark.skip(reason="no chromium on this machine (set REQUIRE_BROWSER=1 to fail)"))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> list[str]:
    db = settings.DATABASES["default"]
    return [f"pollerdash database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"]


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("REQUIRE_POSTGRES") == "1" and os.environ.get("DATABASE_URL", "").startswith("postgres"):
        import psycopg

        db = settings.DATABASES["default"]
        try:
            psycopg.connect(
                host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", connect_timeout=5
            ).close()
        except psycopg.Error as exc:
            pytest.exit(f"REQUIRE_POSTGRES=1 but PostgreSQL is unreachable: {exc}", returncode=3)
    if is_postgres():
        _install_flush_bypass()


@pytest.fixture(autouse=True)
def _fresh_process_caches() -> None:
    # Rolled-back rows can come back with the same id and, under a frozen clock, the same
    # updated_at: per-process caches of rows must not outlive a test.
    from escalations.oncall import slack_refusals
    from operations.polls.poll_inputs import clear_profile_cache
    from operations.providers.credentials import forget_published

    clear_profile_cache()
    forget_published()
    slack_refusals.forget()


@pytest.fixture(autouse=True)
def _provider_origins(request: pytest.FixtureRequest) -> None:
    """The tests' credentials may go to the fake provider this test talks to, which profiles without a
    credential may reach too (PROVIDER_CREDENTIAL_ORIGINS, PROVIDER_ALLOWED_ORIGINS). Set before each
    test, ahead of its own settings overrides: a value set while another test's override was active
    would not outlive that test."""
    url = None
    if "fake_provider" in request.fixturenames:
        url = request.getfixturevalue("fake_provider").base_url
    bind_provider_origins(url)


@pytest.fixture(autouse=True)
def _canary_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test: no log record, response, email or stored row may hold the canary credential,
    as is or encoded (tests/support.py CANARY_FORMS)."""
    from django.core.handlers.base import BaseHandler

    leaks: list[str] = []
    original = BaseHandler.get_response

    def get_response(self: BaseHandler, req: object) -> object:
        response = original(self, req)
        if not getattr(response, "streaming", False) and has_canary(response.content):
            leaks.append(f"response to {getattr(req, 'path', '?')}")
        return response

    BaseHandler.get_response = get_response
    # First in line (Django's logging set-up may have replaced the handlers), so it sees each
    # record before the redaction filter scrubs it in place.
    for name in ("", "django"):
        handlers = logging.getLogger(name).handlers
        if canary_log_handler not in handlers:
            handlers.insert(0, canary_log_handler)
    start = len(canary_log_handler.leaks)
    try:
        yield
    finally:
        BaseHandler.get_response = original
    leaks += canary_log_handler.leaks[start:]
    leaks += canary_emails()
    if _uses_db(request):
        leaks += canary_rows()
    if request.node.get_closest_marker("canary_planted"):
        return
    assert not leaks, f"the canary credential leaked: {leaks}"


def _uses_db(request: pytest.FixtureRequest) -> bool:
    # Only tests that may use the database: one that merely sets it up (the API's session fixtures
    # do, for every API test) has no access, and reading rows after it would fail, not check.
    names = set(request.fixturenames)
    return bool(names & {"db", "transactional_db"}) or bool(request.node.get_closest_marker("django_db"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "canary_planted: the test plants the canary on purpose")


# --- fake provider, profiles, operations ----------------------------------------------------------


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup: None, django_db_blocker: Any) -> Iterator[Any]:
    """PGBOUNCER=1 on PostgreSQL: the PgBouncer (transaction pooling) the process tests' pollerdash
    processes go through; None otherwise. Stopped before the test database is dropped (its server
    connections would keep it)."""
    from tests.integration.support import start_pgbouncer

    with django_db_blocker.unblock():
        bouncer = start_pgbouncer()
    try:
        yield bouncer
    finally:
        if bouncer is not None:
            bouncer.stop()
            with django_db_blocker.unblock():
                _wait_for_server_sessions_to_end()


def _wait_for_server_sessions_to_end() -> None:
    """PgBouncer's server connections end a moment after it is killed; the test database can be
    dropped only then."""
    import time

    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            cursor.execute(sql)
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.05)


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[object]:
    from demo.fakeprovider import FakeProvider

    provider = FakeProvider().start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def make_profile(db: None, fake_provider: object) -> Callable[..., object]:
    from operations.models import ProviderAccount, ProviderProfile

    def make(**overrides: object) -> ProviderProfile:
        base = fake_provider.base_url
        slug = str(overrides.pop("slug", f"fake-{uuid.uuid4().hex[:8]}"))
        fields: dict[str, object] = {
            "name": "Fake export",
            "account": slug,
            "status_url": f"{base}/v1/jobs/{{job_id}}",
            "job_id_pattern": r"^[A-Za-z0-9_.:=+-]{1,200}$",
            "state_field": "state",
            "pending_states": ["queued", "running"],
            "success_states": ["succeeded"],
            "failure_states": ["failed"],
            "cancelled_states": ["cancelled"],
            "expired_states": ["expired"],
            "required_result_fields": ["result.output_url"],
            "expiry_field": "expires_at",
            "progress_field": "progress_percent",
            "counts_fields": {
                "total": "summary.processed",
                "succeeded": "summary.succeeded",
                "failed": "summary.failed",
            },
            "poll_hint_seconds_field": "poll_after_seconds",
            "poll_hint_time_field": "next_check_at",
            "request_id_header": "X-Request-Id",
            "credential_env": "PROVIDER_FAKE_TOKEN",
            "auth_scheme": "Bearer",
            "base_delay_s": 5,
            "max_delay_s": 120,
            "jitter_floor": 0.5,
            "default_deadline_s": 2400,
            "default_max_status_requests": 12,
            "default_max_transport_failures": 3,
            "not_found_grace_s": 60,
            # Tests freeze the clock; pacing has its own tests with a real limit.
            "rate_limit_per_s": 10_000,
            "cancel_method": "POST",
            "cancel_url": f"{base}/v1/jobs/{{job_id}}/cancel",
            "console_url": f"{base}/console/{{job_id}}",
            "approval_mode": "session",
            "extension_options": [{"minutes": 15, "checks": 4}, {"minutes": 60, "checks": 8}],
            "max_extensions": 3,
        }
        fields.update(overrides)
        profile = ProviderProfile.objects.create(slug=slug, **fields)
        ProviderAccount.objects.get_or_create(name=profile.account)
        return profile

    return make


@pytest.fixture
def profile(make_profile: Callable[..., object]) -> object:
    return make_profile()


@pytest.fixture
def app_role(db: None) -> str:
    """The rest of the test runs as the application role of README "Database roles" (PostgreSQL): it
    reads and writes every table and owns none. Undone with the test's transaction."""
    role = f"pd_app_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cursor.execute(f"SET LOCAL ROLE {role}")
    return role


@pytest.fixture
def clock(time_machine: object) -> object:
    """The injected clock, frozen at T0; tests move it with clock.move_to(...) / clock.shift(...)."""
    time_machine.move_to(T0, tick=False)
    return time_machine


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)


@pytest.fixture
def make_operation(profile: object) -> Callable[..., object]:
    from operations.agents.registration import operation_register

    def make(job: str, *, provider: object | None = None, **kwargs: object) -> object:
        kwargs.setdefault("registered_by", "operator:test")
        return operation_register(
            provider_slug=(provider or profile).slug,
            provider_job_id=job,
            **kwargs,
        )

    return make


@pytest.fixture
def drive(clock: object, rng: random.Random) -> Callable[..., list[str]]:
    """Poll an operation the way the dispatcher would: at each due time, once, until it stops."""
    from operations.models import Operation
    from operations.polls.controller import poll_once
    from operations.vocabulary import POLLABLE_STATUSES

    def run(operation: object, *, max_polls: int = 50) -> list[str]:
        results: list[str] = []
        for _ in range(max_polls):
            op = Operation.objects.get(pk=operation.pk)
            if op.status not in POLLABLE_STATUSES:
                break
            if op.next_poll_at is not None and op.next_poll_at > datetime.now(UTC):
                clock.move_to(op.next_poll_at, tick=False)
            results.append(str(poll_once(operation_id=op.pk, fence=op.fence, rng=rng)))
        return results

    return run


@pytest.fixture
def pump() -> Callable[..., list[str]]:
    """What `dispatch_polls` and the workers do, in-process: step due policies, claim due
    notifications, run their tasks; again until nothing is left to run now. Returns the outcomes."""
    from django.utils import timezone
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    from escalations import tasks
    from escalations.oncall import receivers

    def run(*, rounds: int = 10) -> list[str]:
        outcomes: list[str] = []
        for _ in range(rounds):
            receivers.on_dispatcher_pass(now=timezone.now(), limit=100)
            queued = [(row.pk, SignedPackage.loads(row.payload)) for row in OrmQ.objects.order_by("id")]
            runnable = [(pk, task) for pk, task in queued if task["func"] == "escalations.tasks.deliver_notification"]
            if not runnable:
                break
            for pk, task in runnable:
                OrmQ.objects.filter(pk=pk).delete()
                outcomes.append(tasks.deliver_notification(*task["args"]))
        return outcomes

    return run


AUDIT_TABLES = (
    "operations_auditentry",
    "operations_auditcheckpoint",
    "operations_audittreenode",
    "operations_auditcosignature",
    "operations_auditarchive",
)


def _set_audit_triggers(*, enabled: bool) -> None:
    with connection.cursor() as cursor:
        for table in AUDIT_TABLES:
            for trigger in (f"{table}_no_change", f"{table}_no_truncate"):
                state = "ENABLE ALWAYS" if enabled else "DISABLE"
                cursor.execute(f"ALTER TABLE {table} {state} TRIGGER {trigger}")


def _install_flush_bypass() -> None:
    """Let pytest-django empty the append-only audit tables between transactional tests.

    The triggers refuse TRUNCATE for everyone, which is the point; the test harness is the table
    owner and switches them off only around its own flush, so every test runs with them on.
    """
    from django.test.testcases import TransactionTestCase

    original = TransactionTestCase._fixture_teardown

    def fixture_teardown(self: TransactionTestCase) -> None:
        _set_audit_triggers(enabled=False)
        try:
            original(self)
        finally:
            _set_audit_triggers(enabled=True)

    TransactionTestCase._fixture_teardown = fixture_teardown


# --- the test OpenID Provider (tests/oidc_provider/) -------------------------------------------------


@pytest.fixture(scope="session")
def oidc_provider(live_server: object) -> Iterator[object]:
    """A real OpenID Provider (django-oauth-toolkit) on loopback, started once per test session; tests
    create their own users on it (`put_user`). Redirects back to the live server (Chromium) and to
    the test client's host."""
    import secrets

    from tests.oidc_provider.fixture import start_op

    base = live_server.url
    with start_op(
        client_id="pollerdash-tests",
        client_secret=secrets.token_urlsafe(24),
        redirect_uris=[f"{base}/oidc/callback/", "http://testserver/oidc/callback/"],
        post_logout_redirect_uris=[f"{base}/accounts/login/"],
    ) as running:
        yield running


@pytest.fixture
def oidc(oidc_provider: object, settings: object) -> object:
    """Single sign-on on, against the test provider: its group `oncall` gives the responder role,
    `watchers` the viewer role, `pd-admins` the admin role."""
    from accounts import discovery

    op = oidc_provider
    settings.OIDC_ENABLED = True
    settings.OIDC_OP_ISSUER = op.issuer
    settings.OIDC_RP_CLIENT_ID = op.client_id
    settings.OIDC_RP_CLIENT_SECRET = op.client_secret
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_RESPONDER_GROUPS = ["oncall"]
    settings.OIDC_VIEWER_GROUPS = ["watchers"]
    settings.OIDC_ADMIN_GROUPS = ["pd-admins"]
    settings.AUTHENTICATION_BACKENDS = [
        "accounts.backends.ThrottleBackend",
        "accounts.oidc.OIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    # Signing out ends at the provider's end_session_endpoint: its origin joins form-action, as the
    # settings derive it from OIDC_ISSUER.
    policy = settings.CONTENT_SECURITY_POLICY
    directives = {**policy["DIRECTIVES"], "form-action": ["'self'", f"http://127.0.0.1:{op.port}"]}
    settings.CONTENT_SECURITY_POLICY = {**policy, "DIRECTIVES": directives}
    discovery.forget()
    return op
