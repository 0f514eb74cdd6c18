"""One watcher per provider job, keyed on what the provider sees (issue 24, item 5): the credential
variable, the status URL's origin and the job id, stored on each operation (`watch_key`) and kept
true when a profile changes; a profile change that would make two agents watch one job is refused.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, ProgrammingError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.forms.models import model_to_dict
from django.urls import reverse

from operations.agents.identities import agent_token_issue
from operations.agents.registration import (
    AgentRegistration,
    OperationConflict,
    operation_register,
    operation_register_for_agent,
)
from operations.models import Operation, ProviderProfile
from operations.providers.cancel import send_provider_cancel
from operations.providers.origins import watch_key
from tests.operations.test_admin import form_data
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents() -> tuple[object, object]:
    return agent_token_issue(name="report-bot").agent, agent_token_issue(name="other-bot").agent


def register(agent: object, slug: str, job: str) -> Operation:
    return operation_register_for_agent(
        agent=agent,
        request=AgentRegistration(provider=slug, provider_job_id=job),
    ).operation


def test_each_operation_stores_the_key_of_the_job_it_reaches(make_profile, agents, fake_provider):
    profile = make_profile()
    op = register(agents[0], profile.slug, "job-1")
    assert op.watch_key == watch_key(
        credential_env="PROVIDER_FAKE_TOKEN", status_url=f"{fake_provider.base_url}/v1/jobs/{{job_id}}", job_id="job-1"
    )


def test_profiles_that_reach_different_jobs_do_not_block_each_other(make_profile, agents, fake_provider, settings):
    first = make_profile()
    # Another credential variable at the same origin is another account at the provider: another job.
    settings.PROVIDER_CREDENTIAL_ORIGINS += f";PROVIDER_SECOND_TOKEN={fake_provider.base_url}"
    second = make_profile(credential_env="PROVIDER_SECOND_TOKEN", account=first.account)
    mine = register(agents[0], first.slug, "job-1")
    assert register(agents[1], second.slug, "job-1").watch_key != mine.watch_key


def edit_in_admin(admin_client: object, profile: ProviderProfile, **changes: object) -> object:
    current = {name: "" if value is None else value for name, value in model_to_dict(profile).items()}
    url = reverse("admin:operations_providerprofile_change", args=(profile.pk,))
    return admin_client.post(url, form_data(**{**current, **changes}))


def test_a_profile_change_that_would_make_two_agents_watch_one_job_is_refused(
    make_profile, agents, fake_provider, settings, admin_client, tmp_path
):
    other_origin = fake_provider.base_url.replace("127.0.0.1", "localhost")
    settings.PROVIDER_CREDENTIAL_ORIGINS += f",{other_origin}"
    watched = make_profile(slug="watched")
    elsewhere = make_profile(slug="elsewhere", status_url=f"{other_origin}/v1/jobs/{{job_id}}")
    register(agents[0], watched.slug, "job-1")
    moved = register(agents[1], elsewhere.slug, "job-1")  # another origin: another job, for now
    before = moved.watch_key

    response = edit_in_admin(admin_client, elsewhere, status_url=watched.status_url)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert (
        list(errors) == ["status_url"] and "another client's live operation already watches" in errors["status_url"][0]
    )
    assert ProviderProfile.objects.get(pk=elsewhere.pk).status_url == elsewhere.status_url

    path = tmp_path / "profiles.toml"
    path.write_text(
        f'[[provider]]\nslug = "elsewhere"\nname = "x"\naccount = "{elsewhere.account}"\n'
        f'status_url = "{watched.status_url}"\njob_id_pattern = "^[a-z0-9-]+$"\nstate_field = "state"\n'
        'pending = ["running"]\nsuccess = ["succeeded"]\ncredential_env = "PROVIDER_FAKE_TOKEN"\n'
    )
    with pytest.raises(CommandError, match="elsewhere: status_url: 1 live operation"):
        call_command("loadprofiles", str(path), stdout=StringIO())
    assert ProviderProfile.objects.get(pk=elsewhere.pk).status_url == elsewhere.status_url
    assert Operation.objects.get(pk=moved.pk).watch_key == before


def test_a_profile_change_carries_its_live_operations_keys_with_it(
    make_profile, agents, fake_provider, settings, admin_client
):
    other_origin = fake_provider.base_url.replace("127.0.0.1", "localhost")
    settings.PROVIDER_CREDENTIAL_ORIGINS += f",{other_origin}"
    watched = make_profile(slug="watched")
    elsewhere = make_profile(slug="elsewhere", status_url=f"{other_origin}/v1/jobs/{{job_id}}")
    moved = register(agents[1], elsewhere.slug, "job-2")
    assert edit_in_admin(admin_client, elsewhere, status_url=watched.status_url).status_code == 302
    moved.refresh_from_db()
    assert moved.watch_key == watch_key(
        credential_env="PROVIDER_FAKE_TOKEN", status_url=watched.status_url, job_id="job-2"
    )
    # The job it now reaches is the watched profile's job-2: another agent is refused it there.
    with pytest.raises(OperationConflict) as refused:
        register(agents[0], watched.slug, "job-2")
    assert refused.value.code == "job_already_watched"


def test_a_profile_edited_around_the_service_still_blocks_a_cancel_of_a_job_another_watch_holds(
    make_profile, agents, fake_provider, settings
):
    other_origin = fake_provider.base_url.replace("127.0.0.1", "localhost")
    settings.PROVIDER_CREDENTIAL_ORIGINS += f",{other_origin}"
    watched = make_profile(slug="watched")
    elsewhere = make_profile(slug="elsewhere", status_url=f"{other_origin}/v1/jobs/{{job_id}}")
    job = job_id("cancel_ok")
    register(agents[0], watched.slug, job)
    mine = register(agents[1], elsewhere.slug, job)
    # Straight in the database: no key follows, yet the profile now reaches the watched job.
    ProviderProfile.objects.filter(pk=elsewhere.pk).update(status_url=watched.status_url)
    result = send_provider_cancel(operation=Operation.objects.select_related("provider").get(pk=mine.pk))
    assert result.state == "not_forwarded"
    assert not [r for r in fake_provider.requests(job_id=job) if r["kind"] == "cancel"]
    # ...and a third agent is refused it through either profile.
    third = agent_token_issue(name="third-bot").agent
    for slug in ("watched", "elsewhere"):
        with pytest.raises(OperationConflict):
            register(third, slug, job)


@pytest.mark.postgres
def test_as_the_application_role_the_one_watch_index_holds_and_cannot_be_dropped(
    make_profile, agents, fake_provider, app_role
):
    first = register(agents[0], make_profile().slug, "job-4")
    other = register(agents[1], make_profile(account="another-label").slug, "job-5")
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.filter(pk=other.pk).update(provider_job_id="job-4", watch_key=first.watch_key)
    for statement in (
        "DROP INDEX one_live_agent_watch_per_provider_job",
        "ALTER TABLE operations_operation DROP CONSTRAINT one_live_agent_watch_per_provider_job",
    ):
        with pytest.raises(ProgrammingError, match="must be owner"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement)


def test_an_operator_may_still_watch_a_job_twice_on_purpose(make_profile, fake_provider):
    profile = make_profile()
    twin = make_profile(account="another-label")
    first = operation_register(provider_slug=profile.slug, provider_job_id="job-3", registered_by="operator:a")
    second = operation_register(provider_slug=twin.slug, provider_job_id="job-3", registered_by="operator:b")
    assert first.watch_key == second.watch_key


# --- the migration: live operations keyed, two agents on one job named -----------------------------------

BEFORE = [("operations", "0025_profile_backoff_multiplier_range")]
AFTER = [("operations", "0027_provider_job_watch_key")]


def _migrate(targets: list[tuple[str, str]]):  # the historical apps
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_keys_live_operations_and_names_two_agents_on_one_job():
    old = _migrate(BEFORE)
    Profile = old.get_model("operations", "ProviderProfile")
    Op = old.get_model("operations", "Operation")
    Agent = old.get_model("operations", "Agent")
    url = "http://127.0.0.1:8765/v1/jobs/{job_id}"
    export = Profile.objects.create(
        slug="fake-export", name="e", account="fake-main", status_url=url, credential_env="PROVIDER_FAKE_TOKEN"
    )
    gated = Profile.objects.create(
        slug="fake-gated", name="g", account="fake-gated", status_url=url, credential_env="PROVIDER_FAKE_TOKEN"
    )
    alice, bob = Agent.objects.create(name="a-bot"), Agent.objects.create(name="b-bot")

    def op(pk: str, profile: object, agent: object, status: str = "pending") -> None:
        Op.objects.create(
            id=pk, provider=profile, account=profile.account, provider_job_id="j1", agent=agent, status=status,
            deadline_at=T0, max_status_requests=3, max_transport_failures=3, created_at=T0, updated_at=T0,
        )  # fmt: skip

    op("op_A", export, alice)
    op("op_B", gated, bob)  # the twin-cancel position, possible before 0027
    op("op_done", gated, bob, status="closed")
    op("op_operator", gated, None)
    try:
        with pytest.raises(RuntimeError) as refused:
            _migrate(AFTER)
        assert "op_A (job j1), op_B (job j1)" in str(refused.value) and "cancelled by their agents" in str(
            refused.value
        )
        Op.objects.filter(pk="op_B").update(status="closed")
        _migrate(AFTER)
        key = watch_key(credential_env="PROVIDER_FAKE_TOKEN", status_url=url, job_id="j1")
        keys = dict(Operation.objects.values_list("pk", "watch_key"))
        assert keys == {"op_A": key, "op_operator": key, "op_B": "", "op_done": ""}
    finally:
        # The test database must end at the latest migrations for the tests after this one.
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
