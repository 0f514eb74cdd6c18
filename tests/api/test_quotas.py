"""Per-agent quotas: 429 quota_exceeded with Retry-After, naming the quota; nothing is written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from operations.models import Escalation, Operation
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db


def assert_quota_refusal(response: object, quota: str, words: str) -> dict:
    assert response.status_code == 429, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "quota_exceeded" and body["quota"] == quota
    assert words in body["detail"]
    assert response["Retry-After"] == str(body["retry_after_s"])
    return body


def test_registrations_per_minute(api, other_api, profile, settings, clock):
    settings.AGENT_REGISTRATIONS_PER_MINUTE = 2
    clock.move_to(T0 + timedelta(seconds=15), tick=False)
    first = {"provider": profile.slug, "provider_job_id": job_id("never_finishes")}
    assert api.register(**first).status_code == 202
    assert api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202

    refused = api.register(provider=profile.slug, provider_job_id=job_id("never_finishes"))
    body = assert_quota_refusal(refused, "registrations_per_minute", "registrations-per-minute quota")
    assert "at most 2 new registrations per minute" in body["detail"]
    assert body["retry_after_s"] == 45  # the minute's window ends at T0 + 60 s
    assert Operation.objects.count() == 2
    # A replay is not a new registration, and the quota is the agent's own.
    assert api.register(**first).status_code == 200
    assert other_api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202

    clock.move_to(T0 + timedelta(seconds=60), tick=False)
    assert api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202


def test_open_operations(api, profile, settings):
    settings.AGENT_MAX_OPEN_OPERATIONS = 2
    ids = [api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).json()["id"] for _ in range(2)]
    refused = api.register(provider=profile.slug, provider_job_id=job_id("never_finishes"))
    body = assert_quota_refusal(refused, "open_operations", "open-operations quota")
    assert "you have 2 operations not done (at most 2 per agent)" in body["detail"]
    assert Operation.objects.count() == 2
    assert api.post(f"/api/v1/operations/{ids[0]}/cancel").status_code == 202
    assert api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202


def test_cards_per_hour_refuse_new_registrations_but_never_lose_an_operation(api, profile, settings, clock, drive):
    settings.AGENT_CARDS_PER_HOUR = 1
    stuck = []
    for _ in range(2):
        response = api.register(
            provider=profile.slug,
            provider_job_id=job_id("never_finishes"),
            deadline=(T0 + timedelta(seconds=11)).isoformat(),
        )
        assert response.status_code == 202
        stuck.append(Operation.objects.get(pk=response.json()["id"]))
    for op in stuck:
        drive(op)
    # Both operations that needed a person got their card, past the quota: nothing is lost.
    assert Escalation.objects.filter(operation__in=stuck, state="open").count() == 2

    refused = api.register(provider=profile.slug, provider_job_id=job_id("never_finishes"))
    body = assert_quota_refusal(refused, "cards_per_hour", "cards-per-hour quota")
    assert "your operations needed a person 2 times this hour (at most 1 per agent)" in body["detail"]
    assert 0 < body["retry_after_s"] <= 3600
    clock.move_to(T0 + timedelta(hours=1), tick=False)
    assert api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202


def test_a_quota_of_zero_is_no_quota(api, profile, settings):
    settings.AGENT_MAX_OPEN_OPERATIONS = 0
    settings.AGENT_REGISTRATIONS_PER_MINUTE = 0
    for _ in range(3):
        assert api.register(provider=profile.slug, provider_job_id=job_id("never_finishes")).status_code == 202
