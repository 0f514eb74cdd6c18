"""The API under uvicorn (the threadless path that skips Django's middleware) applies ALLOWED_HOSTS
like the dashboard, and its authenticated answers are never cacheable."""

from __future__ import annotations

import httpx
import pytest

from tests.support import job_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def http(live_api, agent):
    with httpx.Client(base_url=live_api.url, headers={"Authorization": f"Bearer {agent.token}"}, timeout=30) as client:
        yield client


@pytest.mark.parametrize("path", ["/api/v1/operations", "/api/v1/openapi.json", "/api/v1/no-such-thing"])
def test_a_host_outside_allowed_hosts_is_refused_by_the_api_as_by_the_dashboard(http, path):
    refused = http.get(path, headers={"Host": "attacker.example"})
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "host_not_allowed"
    dashboard = http.get("/accounts/login/", headers={"Host": "attacker.example"})
    assert dashboard.status_code == 400
    assert http.get("/api/v1/operations", headers={"Host": "localhost"}).status_code == 200


def test_every_answer_to_a_bearer_token_is_no_store(http, profile):
    created = http.post(
        "/api/v1/operations", json={"provider": profile.slug, "provider_job_id": job_id("never_finishes")}
    )
    assert created.status_code == 202
    answers = [
        created,
        http.get("/api/v1/operations"),
        http.get(f"/api/v1/operations/{created.json()['id']}"),
        http.get(f"/api/v1/operations/{created.json()['id']}/wait", params={"timeout_s": "0"}),
        http.get("/api/v1/operations/op_01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        http.get("/api/v1/no-such-thing"),
        http.delete("/api/v1/operations"),
        http.get("/api/v1/openapi.json"),
        http.get("/api/v1/operations", headers={"Authorization": "Bearer pdt_not-a-token"}),
    ]
    for answer in answers:
        assert "no-store" in answer.headers.get("cache-control", ""), (answer.request.url, answer.status_code)
