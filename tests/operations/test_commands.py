from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from operations.controller import poll_once
from operations.models import Operation
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
    poll_once(operation_id=op_id, fence=Operation.objects.get(pk=op_id).fence, rng=rng)
    after = json.loads(run("operation_status", op_id, "--json"))
    assert after["status"] == "succeeded" and after["done"] is True
    assert after["result"]["values"]["result.output_url"].endswith(".csv") and after["error"] is None
    assert after["sequence"] > before["sequence"]
    assert after["agent_hint"].startswith("DONE.")


def test_operation_status_of_an_unknown_id_fails(db):
    with pytest.raises(CommandError):
        run("operation_status", "op_nope")
