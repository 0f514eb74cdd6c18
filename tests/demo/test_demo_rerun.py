"""A second `manage.py demo` (what every `make demo` runs) reuses the demo data and prints working logins."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings

from demo import seed
from operations.agents.identities import agent_authenticate
from operations.models import EscalationPolicy, Operation, ProviderProfile
from tests.support import bind_provider_origins

pytestmark = pytest.mark.django_db
DEMO_SLACK = {"SLACK_BOT_TOKEN": "xoxb-demo-test", "SLACK_SIGNING_SECRET": "demo-test-secret"}


def run_demo(provider_url: str) -> str:
    """`manage.py demo` as `make demo` runs it: var/demo.env binds the demo's credential to the fake
    provider's address (PROVIDER_CREDENTIAL_ORIGINS)."""
    bind_provider_origins(provider_url)
    out = io.StringIO()
    call_command("demo", provider_url=provider_url, stdout=out)
    return out.getvalue()


def printed_logins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ {4}(responder2?|viewer|admin) +(\S+) ", text, flags=re.M))


def test_a_second_run_on_other_ports_keeps_the_data_and_prints_logins_and_token_that_work(tmp_path: Path) -> None:
    with override_settings(VAR_DIR=tmp_path, SITE_URL="http://127.0.0.1:8311", **DEMO_SLACK):
        first = run_demo("http://127.0.0.1:8312")
    with override_settings(VAR_DIR=tmp_path, SITE_URL="http://127.0.0.1:8101", **DEMO_SLACK):
        second = run_demo("http://127.0.0.1:8867")

    assert Operation.objects.count() == len(seed.SCENARIOS)
    assert Operation.objects.values("purpose").distinct().count() == len(seed.SCENARIOS)
    assert "kept" in second and "make demo-reset" in second
    assert "http://127.0.0.1:8101/api/v1/docs/" in second
    logins = printed_logins(second)
    assert set(logins) == {"responder", "responder2", "viewer", "admin"}
    users = get_user_model().objects
    for username, password in logins.items():
        user = users.get(username=username)
        assert user.check_password(password), username
        assert user.email == f"{username}@example.invalid"
    assert printed_logins(first)["responder"] != logins["responder"]
    # The same token both times, still working, and saved for scripts.
    token = re.search(r"(pdt_\S+)", second).group(1)
    assert token == re.search(r"(pdt_\S+)", first).group(1)
    assert agent_authenticate(token=token) is not None
    assert (tmp_path / "demo-agent-token").read_text().strip() == token
    # Profiles follow the provider's new port; the demo's policy is the default.
    assert {p.status_url.split("/v1/")[0] for p in ProviderProfile.objects.all()} == {"http://127.0.0.1:8867"}
    assert EscalationPolicy.objects.get(is_default=True).name == "demo"


def test_every_hint_it_prints_runs_as_typed(tmp_path: Path) -> None:
    # A hint naming manage.py must name the venv's Python: `manage.py x` alone failed as printed.
    with override_settings(VAR_DIR=tmp_path):
        text = run_demo("http://127.0.0.1:8312")
    assert not re.search(r"(?<!python )manage\.py", text)
