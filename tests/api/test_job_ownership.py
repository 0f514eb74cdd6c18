"""One live watch per provider job: another agent can neither watch nor cancel a job already watched.

Counted at the real fake provider: its request log says whether a cancel ever reached it.
"""

from __future__ import annotations

import json
import threading
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connections, transaction
from django.urls import reverse
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from demo.seed import load_demo_profiles
from operations.agents.registration import operation_register
from operations.models import Operation, ProviderProfile
from operations.profiles import KEY_TO_FIELD
from operations.tasks import forward_provider_cancel
from tests.support import job_id

pytestmark = pytest.mark.django_db


def cancels_received(fake_provider: object, job: str) -> int:
    return sum(1 for r in fake_provider.requests(job) if r["kind"] == "cancel")


def run_queued_cancels() -> None:
    """What a worker would do with every queued provider-cancel task."""
    for row in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(row.payload)
        if task["func"] == "operations.tasks.forward_provider_cancel":
            forward_provider_cancel(*task["args"])


def test_another_agent_can_neither_watch_nor_cancel_a_job_already_watched(
    api, other_api, profile, make_profile, fake_provider
):
    job = job_id("cancel_ok")
    victim = api.register(provider=profile.slug, provider_job_id=job)
    assert victim.status_code == 202
    victim_id = victim.json()["id"]
    # A second profile of the same provider account reaches the same job with the same credential.
    twin = make_profile(account=profile.account)

    for slug in (profile.slug, twin.slug):
        refused = other_api.register(provider=slug, provider_job_id=job, purpose="mine now")
        assert refused.status_code == 409, refused.content
        body = refused.json()
        assert body["code"] == "job_already_watched"
        assert "already being watched by another client" in body["detail"]
        # Nothing about the first watch: no id, no object, no agent name.
        assert "operation" not in body and "operation_id" not in body
        assert victim_id not in refused.content.decode() and "report-bot" not in refused.content.decode()

    # Whatever the other agent cancels, nothing reaches the provider for this job.
    for op_id in Operation.objects.exclude(pk=victim_id).values_list("pk", flat=True):
        other_api.post(f"/api/v1/operations/{op_id}/cancel", {"reason": "mine"})
    assert other_api.post(f"/api/v1/operations/{victim_id}/cancel").status_code == 404
    run_queued_cancels()
    assert cancels_received(fake_provider, job) == 0
    op = Operation.objects.get(pk=victim_id)
    assert op.status == "pending" and op.cancel_state == "" and op.cancel_requested_at is None
    assert Operation.objects.filter(provider_job_id=job).count() == 1

    # The first agent keeps its idempotent replay, and is told about its own operation.
    again = api.register(provider=profile.slug, provider_job_id=job)
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == victim_id
    other_settings = api.register(provider=twin.slug, provider_job_id=job)
    assert other_settings.status_code == 409 and other_settings.json()["code"] == "operation_exists"
    assert other_settings.json()["operation_id"] == victim_id


def test_the_job_may_be_watched_by_another_agent_once_the_first_watch_is_done(api, other_api, profile, fake_provider):
    job = job_id("cancel_ok")
    first = api.register(provider=profile.slug, provider_job_id=job).json()
    assert api.post(f"/api/v1/operations/{first['id']}/cancel").status_code == 202
    assert other_api.register(provider=profile.slug, provider_job_id=job).status_code == 202


def test_the_database_holds_one_live_agent_watch_per_provider_job_whatever_the_account_label(
    agent, other_agent, profile, make_profile
):
    job = job_id("never_finishes")
    first = operation_register(
        provider_slug=profile.slug, provider_job_id=job, registered_by="agent:report-bot", agent=agent.agent
    )
    # Another account label, the same credential and status-URL origin: the same job to the provider.
    twin = make_profile(account="another-label")
    other = operation_register(
        provider_slug=twin.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="agent:other-bot",
        agent=other_agent.agent,
    )
    # Past every check in the code: the partial unique index still refuses the second live watch.
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.filter(pk=other.pk).update(provider_job_id=job, watch_key=first.watch_key)
    Operation.objects.filter(provider_job_id=job).update(status="closed")
    Operation.objects.filter(pk=other.pk).update(provider_job_id=job, watch_key=first.watch_key)
    assert Operation.objects.filter(provider_job_id=job).count() == 2


def test_an_agent_cannot_take_over_a_job_an_operator_watches(other_api, profile, make_operation):
    job = job_id("cancel_ok")
    make_operation(job)
    refused = other_api.register(provider=profile.slug, provider_job_id=job)
    assert refused.status_code == 409 and refused.json()["code"] == "job_already_watched"


def test_an_agent_cancel_is_not_forwarded_while_an_operator_watch_of_the_job_is_live(
    api, register, make_profile, profile, fake_provider
):
    created = register("cancel_ok")
    job = created["provider_job_id"]
    twin = make_profile(account=profile.account)
    out = StringIO()
    with pytest.raises(CommandError, match="already watches this job"):
        call_command("watch", "--provider", twin.slug, "--job-id", job, stdout=out)
    call_command("watch", "--provider", twin.slug, "--job-id", job, "--again", stdout=out)
    operator_op = Operation.objects.get(pk=out.getvalue().strip())

    cancelled = api.post(f"/api/v1/operations/{created['id']}/cancel").json()
    assert cancelled["status"] == "closed" and cancelled["error"]["code"] == "watch_cancelled"
    assert cancelled["cancel"]["state"] == "not_forwarded"
    assert "another live watch" in cancelled["error"]["message"]
    run_queued_cancels()
    assert forward_provider_cancel(created["id"]) == "stale"
    assert cancels_received(fake_provider, job) == 0
    assert Operation.objects.get(pk=operator_op.pk).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_two_agents_registering_one_job_at_once_get_one_watch_and_one_refusal(live_api, agent, other_agent, profile):
    body = {"provider": profile.slug, "provider_job_id": job_id("cancel_ok")}
    barrier = threading.Barrier(2)
    answers: list[tuple[int, str]] = []

    def send(token: str) -> None:
        with httpx.Client(base_url=live_api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
            barrier.wait()
            response = client.post("/api/v1/operations", json=body)
            answers.append((response.status_code, response.json().get("code", "")))

    threads = [threading.Thread(target=send, args=(who.token,)) for who in (agent, other_agent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(answers) == [(202, ""), (409, "job_already_watched")], answers
    assert Operation.objects.filter(provider_job_id=body["provider_job_id"]).count() == 1


# --- one watcher per provider job, whatever the account label (issue 24, item 5) --------------------------


def admin_form_of(profile: ProviderProfile, **overrides: object) -> dict[str, str]:
    """The admin's change form for a profile as a browser posts it, with some fields changed."""
    values = {name: getattr(profile, name) for name in KEY_TO_FIELD.values()}
    values.update(overrides)
    return {
        name: json.dumps(value) if isinstance(value, list | dict) else "" if value is None else str(value)
        for name, value in values.items()
    }


@pytest.fixture
def demo_profiles(fake_provider) -> dict[str, ProviderProfile]:
    """The demo's fake-export and fake-gated: one credential, one status-URL origin, two account labels."""
    load_demo_profiles(provider_url=fake_provider.base_url)
    return {profile.slug: profile for profile in ProviderProfile.objects.filter(slug__in=["fake-export", "fake-gated"])}


def test_the_twin_cancel_attack_through_a_profile_of_another_account_label_is_refused(
    api, other_api, demo_profiles, admin_client, fake_provider
):
    export, gated = demo_profiles["fake-export"], demo_profiles["fake-gated"]
    assert export.account != gated.account and export.credential_env == gated.credential_env
    # An admin adds a cancel URL to fake-gated.
    form = admin_form_of(gated, cancel_method="POST", cancel_url=export.cancel_url)
    assert (
        admin_client.post(reverse("admin:operations_providerprofile_change", args=(gated.pk,)), form).status_code == 302
    )
    job = job_id("cancel_ok")
    victim = api.register(provider="fake-export", provider_job_id=job)
    assert victim.status_code == 202
    victim_id = victim.json()["id"]

    # Agent B, through the other account label: the same refusal as through the same profile.
    same_profile = other_api.register(provider="fake-export", provider_job_id=job)
    through_twin = other_api.register(provider="fake-gated", provider_job_id=job)
    assert through_twin.status_code == 409 == same_profile.status_code
    assert through_twin.json() == same_profile.json()
    assert through_twin.json()["code"] == "job_already_watched"
    assert victim_id not in through_twin.content.decode() and "report-bot" not in through_twin.content.decode()

    # B holds no watch it could cancel; whatever it cancels, nothing reaches the provider.
    assert not Operation.objects.exclude(pk=victim_id).exists()
    assert other_api.post(f"/api/v1/operations/{victim_id}/cancel").status_code == 404
    run_queued_cancels()
    assert cancels_received(fake_provider, job) == 0
    assert Operation.objects.get(pk=victim_id).status == "pending"


def test_a_cancel_is_never_forwarded_while_a_watch_under_another_account_label_is_live(
    api, register, demo_profiles, fake_provider
):
    created = register("cancel_ok", provider="fake-export")
    job = created["provider_job_id"]
    # An operator watches the same job through the other account label (operators may, on purpose).
    operator_op = operation_register(provider_slug="fake-gated", provider_job_id=job, registered_by="operator:ops")
    cancelled = api.post(f"/api/v1/operations/{created['id']}/cancel").json()
    assert cancelled["cancel"]["state"] == "not_forwarded"
    run_queued_cancels()
    assert cancels_received(fake_provider, job) == 0
    assert Operation.objects.get(pk=operator_op.pk).status == "pending"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_agents_registering_one_provider_job_through_two_account_labels_at_once_get_one_watch(
    agent, other_agent, demo_profiles, monkeypatch
):
    """Both pass the check in the code before either commits: the database's index decides."""
    from operations.agents import registration

    job = job_id("cancel_ok")
    both_checked = threading.Barrier(2, timeout=30)
    real_check = registration._watched_by_another

    def check_then_wait(**kwargs: object) -> bool:
        found = real_check(**kwargs)
        both_checked.wait()
        return found

    monkeypatch.setattr(registration, "_watched_by_another", check_then_wait)
    answers: dict[str, str] = {}

    def register_as(who: object, slug: str) -> None:
        try:
            outcome = registration.operation_register_for_agent(
                agent=who.agent,
                request=registration.AgentRegistration(provider=slug, provider_job_id=job),
            )
            answers[slug] = "registered" if not outcome.replayed else "replayed"
        except registration.OperationConflict as conflict:
            answers[slug] = conflict.code
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=register_as, args=(agent, "fake-export")),
        threading.Thread(target=register_as, args=(other_agent, "fake-gated")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(answers.values()) == ["job_already_watched", "registered"], answers
    assert Operation.objects.filter(provider_job_id=job).count() == 1
