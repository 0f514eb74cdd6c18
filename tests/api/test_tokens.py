"""Agent tokens: made by create_agent_token (shown once, only the hash kept), revoked in the admin."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from operations.models import Agent, AgentToken
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def create_token(name: str) -> tuple[dict[str, str], str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_agent_token", name, stdout=out, stderr=err)
    lines = dict(line.split(": ", 1) for line in out.getvalue().strip().splitlines())
    return lines, err.getvalue()


def test_the_command_prints_the_token_once_and_stores_only_its_hash():
    first, note = create_token("report-bot")
    assert set(first) == {"token", "webhook_secret"} and "shown once" in note
    token = first["token"]
    row = AgentToken.objects.get()
    assert row.token_sha256 == hashlib.sha256(token.encode()).hexdigest() and row.prefix == token[:12]
    stored = repr(list(AgentToken.objects.values())) + repr(list(Agent.objects.values("name", "created_at")))
    assert token not in stored
    assert Agent.objects.get().webhook_secret == first["webhook_secret"].strip()
    assert first["webhook_secret"].startswith("whsec_")
    second, _ = create_token("report-bot")
    assert set(second) == {"token"} and second["token"] != token  # same agent, a new token, no new secret
    assert Agent.objects.count() == 1 and AgentToken.objects.count() == 2


@pytest.mark.parametrize("name", ["", "   ", "x" * 101, "bad\nname", "a\tb", "bot\x7f", "bot\u202egnp"])
def test_bad_agent_names_are_refused(name):
    with pytest.raises(CommandError):
        create_token(name)
    assert not Agent.objects.exists()


def test_a_revoked_token_stops_working_at_once(admin_client):
    token = create_token("report-bot")[0]["token"]
    api = ApiClient(token)
    assert api.get("/api/v1/operations").status_code == 200
    row = AgentToken.objects.get()
    response = admin_client.post(
        reverse("admin:operations_agenttoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [row.pk]},
    )
    assert response.status_code == 302
    refused = api.get("/api/v1/operations")
    assert refused.status_code == 401 and refused.json()["code"] == "unauthenticated"


def test_last_used_is_recorded_without_a_write_per_request(clock):
    token = create_token("report-bot")[0]["token"]
    api = ApiClient(token)
    api.get("/api/v1/operations")
    first = AgentToken.objects.get().last_used_at
    clock.shift(timedelta(seconds=30))
    api.get("/api/v1/operations")
    assert AgentToken.objects.get().last_used_at == first
    clock.shift(timedelta(seconds=31))
    api.get("/api/v1/operations")
    assert AgentToken.objects.get().last_used_at > first
