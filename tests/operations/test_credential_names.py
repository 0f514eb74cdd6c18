"""A profile cannot send pollerdash's own settings to a host (issue 16, finding 3).

The reproduction: `credential_env = "SITE_URL"` (or SECRET_KEY, or AUDIT_SIGNING_KEY, read from
its _FILE) made a worker send that value as a bearer token to a listener. Credential variables
start with PROVIDER_ or are listed in PROVIDER_CREDENTIAL_ENV_ALLOWED; pollerdash's own settings
are refused whatever the configuration, when a profile is validated and again when a credential
is read (a profile stored before these rules).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from operations.models import Escalation, Operation
from operations.polls.controller import poll_once
from operations.profiles import validate_profile
from operations.providers import http
from operations.providers.cancel import send_provider_cancel
from operations.vocabulary import Reason, Status
from tests.operations.test_profiles import valid_raw
from tests.support import job_id

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "pollerdash" / "settings.py"
# Every variable settings.py reads from the environment (env_str("NAME"), env_secret("NAME"), ...).
SETTINGS_ENV_NAMES = sorted(set(re.findall(r'env_[a-z]+\(\s*"([A-Z][A-Z0-9_]*)"', SETTINGS_FILE.read_text())))
OTHER_RESERVED = [
    "AUDIT_SIGNING_KEY",
    "NOTIFY_WEBHOOK_URL_FILE",
    "SECRET_KEY_FILE",
    "PROVIDER_ACME_TOKEN_FILE",
    "DJANGO_SETTINGS_MODULE",
    "POLLERDASH_TOKEN",
    "OIDC_CLIENT_SECRET",
    "SLACK_BOT_TOKEN",
    "PAGERDUTY_ROUTING_KEY",
    "EMAIL_HOST_PASSWORD",
    "DATABASE_PASSWORD",
    "STATIC_ROOT",
    "PROVIDER_PORT",
]


def credential_env_problems(name: str) -> list[str]:
    result = validate_profile(raw=valid_raw(credential_env=name))
    if not isinstance(result, list):
        return []
    return [problem.message for problem in result if problem.key == "credential_env"]


def test_the_settings_file_reads_the_names_the_rules_must_cover():
    # The parse above found the settings, so the next test really checks each of them.
    assert {"SECRET_KEY", "DATABASE_URL", "METRICS_TOKEN", "SITE_URL", "AUDIT_SIGNING_KEY_FILE"} <= set(
        SETTINGS_ENV_NAMES
    )


@pytest.mark.parametrize("name", SETTINGS_ENV_NAMES + OTHER_RESERVED)
def test_pollerdash_settings_are_refused_even_when_allow_listed(name, settings):
    settings.PROVIDER_CREDENTIAL_ENV_ALLOWED = [name]
    problems = credential_env_problems(name)
    assert problems, f"{name} was accepted as a credential variable"
    assert any("pollerdash's own settings" in p or "ends in _FILE" in p for p in problems), problems


def test_a_credential_variable_starts_with_provider_or_is_allow_listed(settings):
    assert credential_env_problems("PROVIDER_ACME_TOKEN") == []
    assert credential_env_problems("ACME_TOKEN") == [
        "ACME_TOKEN must start with PROVIDER_ or be listed in the PROVIDER_CREDENTIAL_ENV_ALLOWED setting"
    ]
    settings.PROVIDER_CREDENTIAL_ENV_ALLOWED = ["ACME_TOKEN", "LEGACY_KEY"]
    # Allowed as a name; sent only where the operator binds it (docs/DESIGN.md section 2).
    assert credential_env_problems("ACME_TOKEN") == [
        "ACME_TOKEN has no entry in PROVIDER_CREDENTIAL_ORIGINS: the operator binds each credential variable to "
        "the origins it may be sent to, in the environment of every pollerdash process "
        "(ACME_TOKEN=https://api.provider.example)"
    ]
    settings.PROVIDER_CREDENTIAL_ORIGINS = "ACME_TOKEN=https://api.acme.test"
    assert credential_env_problems("ACME_TOKEN") == []


# --- at request time: a profile stored before the rules -----------------------------------------------


class Listener:
    """A host on 127.0.0.1 that answers like a provider and records every Authorization it is sent."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                listener.authorizations.append(self.headers.get("Authorization"))
                body = b'{"state": "running"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # http.server's naming

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.stop()


@pytest.fixture
def settings_in_environment(monkeypatch, tmp_path) -> dict[str, str]:
    """pollerdash's own settings as the workers' environment holds them."""
    key_file = tmp_path / "audit-signing-key.pem"
    key_file.write_text("audit-signing-key-material-0123456789")
    monkeypatch.setenv("SITE_URL", "https://pollerdash.internal.example")
    monkeypatch.setenv("SECRET_KEY", "the-django-secret-key-value-42")
    monkeypatch.setenv("AUDIT_SIGNING_KEY_FILE", str(key_file))
    return {
        "SITE_URL": "https://pollerdash.internal.example",
        "SECRET_KEY": "the-django-secret-key-value-42",
        "AUDIT_SIGNING_KEY": "audit-signing-key-material-0123456789",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["SITE_URL", "SECRET_KEY", "AUDIT_SIGNING_KEY"])
def test_a_stored_profile_naming_a_setting_sends_nothing_to_its_host(
    name, make_profile, make_operation, listener, settings_in_environment, clock, settings
):
    # Even where an operator bound the name to the host, the credential reader refuses it.
    settings.PROVIDER_CREDENTIAL_ORIGINS = f"{name}={listener.url}"
    # Written straight to the database, as a profile saved before these rules would be.
    profile = make_profile(
        credential_env=name,
        status_url=f"{listener.url}/v1/jobs/{{job_id}}",
        cancel_url=f"{listener.url}/v1/jobs/{{job_id}}/cancel",
    )
    op = make_operation(job_id("never_finishes"), provider=profile)

    poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence)
    cancel = send_provider_cancel(operation=Operation.objects.select_related("provider").get(pk=op.pk))

    secret = settings_in_environment[name]
    assert not any(secret in (authorization or "") for authorization in listener.authorizations)
    assert listener.authorizations == []
    op.refresh_from_db()
    assert op.status == Status.NEEDS_ATTENTION
    escalation = Escalation.objects.get(operation=op)
    assert escalation.reason == Reason.AUTHORIZATION_DENIED
    refusal = f"{name} is one of pollerdash's own settings and can never be a credential variable"
    assert escalation.detail == f"credential_env is refused: {refusal}"
    assert cancel.state == "failed_to_forward" and cancel.detail == escalation.detail
    assert http.credential_fingerprint(credential_env=name) == ""
