"""The watch key is the fully expanded status URL, and a job id fills exactly one path segment
(review F5): two registrations that make the provider see one job get one key, whatever job id and
template each used; a job id can never point the poll at another path."""

from __future__ import annotations

import pytest

from operations.agents.identities import agent_token_issue
from operations.agents.registration import AgentRegistration, OperationConflict, operation_register_for_agent
from operations.agents.registration_checks import RegistrationError
from operations.profiles.checks import key_checks
from operations.providers.origins import watch_key

pytestmark = pytest.mark.django_db

FAKE = "PROVIDER_FAKE_TOKEN"


def test_the_key_is_the_expanded_url_whatever_template_and_job_id_made_it() -> None:
    one = watch_key(credential_env=FAKE, status_url="http://127.0.0.1:8765/v1/jobs/{job_id}", job_id="status")
    # Another template, another job id, the same URL at the provider: the same key.
    assert one == watch_key(credential_env=FAKE, status_url="http://127.0.0.1:8765/v1/{job_id}/status", job_id="jobs")
    # The origin's spelling does not count (case, a default port spelled out).
    assert one == watch_key(credential_env=FAKE, status_url="HTTP://127.0.0.1:8765/v1/jobs/{job_id}", job_id="status")
    assert watch_key(credential_env=FAKE, status_url="https://a.example:443/v1/{job_id}", job_id="j") == watch_key(
        credential_env=FAKE, status_url="https://A.example/v1/{job_id}", job_id="j"
    )
    others = {
        watch_key(credential_env=FAKE, status_url="http://127.0.0.1:8765/v2/jobs/{job_id}", job_id="status"),
        watch_key(credential_env=FAKE, status_url="http://127.0.0.1:8765/v1/jobs/{job_id}", job_id="Status"),
        watch_key(
            credential_env="PROVIDER_OTHER", status_url="http://127.0.0.1:8765/v1/jobs/{job_id}", job_id="status"
        ),
    }
    assert one not in others and len(others) == 3


def register(agent: object, slug: str, job: str) -> object:
    return operation_register_for_agent(
        agent=agent,
        request=AgentRegistration(provider=slug, provider_job_id=job),
    ).operation


def test_two_agents_cannot_watch_one_url_through_templates_that_differ(make_profile, fake_provider) -> None:
    base = fake_provider.base_url
    plain = make_profile(slug="plain", status_url=f"{base}/v1/jobs/{{job_id}}")
    # A second profile, same credential and origin, another label and a template that reaches the same
    # URL with another job id: /v1/{job_id}/j1 with "jobs" is /v1/jobs/j1.
    twisted = make_profile(slug="twisted", account="other-label", status_url=f"{base}/v1/{{job_id}}/j1")
    first = agent_token_issue(name="report-bot").agent
    second = agent_token_issue(name="other-bot").agent
    register(first, plain.slug, "j1")
    with pytest.raises(OperationConflict):
        register(second, twisted.slug, "jobs")


@pytest.mark.parametrize("job", ["", "a/b", "..", ".", "a?x=1", "a#b", "a%2Fb", "%2e%2e", "a\\b"])
def test_a_job_id_that_is_not_one_path_segment_is_refused(make_profile, job) -> None:
    profile = make_profile(job_id_pattern=r"^.{0,200}$")
    agent = agent_token_issue(name="report-bot").agent
    with pytest.raises(RegistrationError) as refused:
        register(agent, profile.slug, job)
    (problem,) = refused.value.problems
    assert problem.field == "provider_job_id" and problem.code == "invalid_provider_job_id"
    assert "path segment" in problem.message or "non-empty" in problem.message, problem.message


def test_the_api_names_the_field_of_a_job_id_with_a_slash(make_profile, client) -> None:
    profile = make_profile(job_id_pattern=r"^.{1,200}$")
    token = agent_token_issue(name="report-bot").token
    answer = client.post(
        "/api/v1/operations",
        {"provider": profile.slug, "provider_job_id": "../admin"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 422, answer.content
    body = answer.json()
    assert body["code"] == "invalid_provider_job_id" and "provider_job_id" in str(body)
    assert "one path segment" in str(body)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.acme.test/v1/jobs?id={job_id}",
        "https://api.acme.test/v1/job-{job_id}",
        "https://api.acme.test/v1/{job_id}.json",
    ],
)
@pytest.mark.parametrize("key", ["status_url", "cancel_url"])
def test_a_template_whose_job_id_is_not_a_whole_path_segment_is_refused(url, key) -> None:
    problems = key_checks()[key](url)
    assert problems and "whole path segment" in " ".join(problems), problems


@pytest.mark.parametrize(
    "url", ["https://api.acme.test/v1/jobs/{job_id}", "https://api.acme.test/v1/{job_id}/status?verbose=1"]
)
def test_a_whole_segment_template_passes(url) -> None:
    assert key_checks()["status_url"](url) == []


@pytest.mark.django_db(transaction=True)
def test_migration_0040_rekeys_live_operations_on_the_expanded_url():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from operations.models import Operation
    from tests.support import T0

    def migrate(targets):  # the historical apps
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(targets)
        return executor.loader.project_state(targets).apps

    old = migrate([("operations", "0039_snooze_and_ack_timeout")])
    Profile = old.get_model("operations", "ProviderProfile")
    Op = old.get_model("operations", "Operation")
    url = "http://127.0.0.1:8765/v1/jobs/{job_id}"
    profile = Profile.objects.create(
        slug="fake-export", name="e", account="fake-main", status_url=url, credential_env=FAKE
    )
    for pk, status in (("op_live", "pending"), ("op_done", "closed")):
        Op.objects.create(
            id=pk, provider=profile, account="fake-main", provider_job_id="j1", status=status, watch_key="old",
            deadline_at=T0, max_status_requests=3, max_transport_failures=3, created_at=T0, updated_at=T0,
        )  # fmt: skip
    try:
        migrate([("operations", "0040_watch_key_expanded_url")])
        keys = dict(Operation.objects.values_list("pk", "watch_key"))
        assert keys == {"op_live": watch_key(credential_env=FAKE, status_url=url, job_id="j1"), "op_done": "old"}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
