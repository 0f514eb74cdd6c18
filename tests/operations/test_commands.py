from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from operations.models import Operation
from operations.polls.controller import poll_once
from tests.support import job_id

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_watch_registers_and_prints_the_id(profile):
    job = job_id("slow_success")
    op_id = run("watch", "--provider", profile.slug, "--job-id", job, "--max-requests", "5", "--purpose", "demo")
    op = Operation.objects.get(pk=op_id.strip())
    assert (op.provider_job_id, op.max_status_requests, op.purpose) == (job, 5, "demo")
    assert op.registered_by.startswith("operator:")


def test_watch_reports_bad_input_by_field(profile):
    with pytest.raises(CommandError, match="provider_job_id"):
        run("watch", "--provider", profile.slug, "--job-id", "a/b")


def test_operation_status_json_is_the_operation_object(profile, clock, rng):
    op_id = run("watch", "--provider", profile.slug, "--job-id", job_id("slow_success", polls=0)).strip()
    before = json.loads(run("operation_status", op_id, "--json"))
    assert before["object"] == "operation" and before["done"] is False
    assert before["agent_hint"].startswith("NOT DONE.")
    # No agent owns it, so the hint names the operator's command, not API calls that would 404.
    assert f"manage.py operation_status {op_id}" in before["agent_hint"] and "/api/v1" not in before["agent_hint"]
    poll_once(operation_id=op_id, fence=Operation.objects.get(pk=op_id).fence, rng=rng)
    after = json.loads(run("operation_status", op_id, "--json"))
    assert after["status"] == "succeeded" and after["done"] is True
    assert after["result"]["values"]["result.output_url"].endswith(".csv") and after["error"] is None
    assert after["sequence"] > before["sequence"]
    assert after["agent_hint"].startswith("DONE.") and "/ack" not in after["agent_hint"]


def test_watch_refuses_a_second_watch_of_the_same_job_and_bounds_the_deadline(profile):
    job = job_id("never_finishes")
    first = run("watch", "--provider", profile.slug, "--job-id", job).strip()
    with pytest.raises(CommandError, match=f"{first} already watches this job"):
        run("watch", "--provider", profile.slug, "--job-id", job)
    second = run("watch", "--provider", profile.slug, "--job-id", job, "--again").strip()
    assert second != first and Operation.objects.filter(provider_job_id=job).count() == 2
    for huge in ("1000000000000", "99999999999999999999"):
        with pytest.raises(CommandError, match="--deadline-s must be at most"):
            run("watch", "--provider", profile.slug, "--job-id", job_id("never_finishes"), "--deadline-s", huge)


def test_operation_status_of_an_unknown_id_fails(db):
    with pytest.raises(CommandError):
        run("operation_status", "op_nope")
