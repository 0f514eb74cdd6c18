"""One live watch per provider job: another agent can neither watch nor cancel a job already watched.

Counted at the real fake provider: its request log says whether a cancel ever reached it.
"""

from __future__ import annotations

import threading
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from operations.models import Operation
from operations.registration import operation_register
from operations.tasks import forward_provider_cancel
from tests.support import job_id

pytestmark = pytest.mark.django_db


def cancels_received(fake_provider: object, job: str) -> int:
    return sum(1 for r in fake_provider.requests(job) if r["kind"] == "cancel")  # type: ignore[attr-defined]


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


def test_the_database_holds_one_live_agent_watch_per_account_and_job(agent, other_agent, profile):
    job = job_id("never_finishes")
    operation_register(
        provider_slug=profile.slug, provider_job_id=job, registered_by="agent:report-bot", agent=agent.agent
    )
    other = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("never_finishes"),
        registered_by="agent:other-bot",
        agent=other_agent.agent,
    )
    # Past every check in the code: the partial unique index still refuses the second live watch.
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.filter(pk=other.pk).update(provider_job_id=job)
    Operation.objects.filter(provider_job_id=job).update(status="closed")
    Operation.objects.filter(pk=other.pk).update(provider_job_id=job)
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
