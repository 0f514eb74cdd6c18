"""The provider credential never leaves the process that sends it.

tests/conftest.py runs a guard after EVERY test in the suite: responses, raw log records (before
redaction) and stored rows must not contain the canary credential. These tests prove the guard
really catches a leak, and drive the paths most likely to leak one.
"""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command

from operations import http
from operations.controller import poll_once
from operations.models import AuditEntry, Operation, StatusCheck
from operations.redaction import redact
from tests.support import CANARY, canary_log_handler, canary_rows, job_id


@pytest.mark.canary_planted
def test_the_guard_sees_a_leaked_log_record() -> None:
    before = len(canary_log_handler.leaks)
    logging.getLogger("pollerdash.test").warning("oops %s", CANARY)
    assert len(canary_log_handler.leaks) == before + 1


@pytest.mark.canary_planted
@pytest.mark.django_db
def test_the_guard_sees_a_leaked_row(make_operation) -> None:
    op = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=op.pk).update(purpose=f"token={CANARY}")
    assert canary_rows() == ["Operation row"]


def test_log_output_is_scrubbed_even_if_code_logs_a_credential() -> None:
    http.credential_headers(credential_env="PROVIDER_FAKE_TOKEN", auth_scheme="Bearer")
    assert CANARY not in redact(f"headers={{'Authorization': 'Bearer {CANARY}'}}")
    assert CANARY not in redact(f"sent {CANARY} to the provider")


@pytest.mark.django_db
def test_no_path_stores_or_shows_the_credential(make_operation, clock, rng, fake_provider, admin_client) -> None:
    ops = [
        make_operation(job_id(scenario, **params))
        for scenario, params in [
            ("slow_success", {"polls": 0}),
            ("auth_revoked", {}),
            ("late_failure", {"polls": 0}),
            ("invalid_json", {"kind": "html"}),
            ("redirect", {}),
        ]
    ]
    for op in ops:
        poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence, rng=rng)
    # The credential was sent: the provider saw an Authorization header on every request.
    assert all(r["auth"] == "present" for op in ops for r in fake_provider.requests(job_id=op.provider_job_id))
    texts = [json.dumps(list(StatusCheck.objects.values()), default=str)]
    texts += [bytes(body).decode() for body in AuditEntry.objects.values_list("body", flat=True)]
    for op in ops:
        out = StringIO()
        call_command("operation_status", op.pk, "--json", stdout=out)
        texts.append(out.getvalue())
        texts.append(admin_client.get(f"/operations/{op.pk}/").content.decode())
        texts.append(admin_client.get(f"/admin/operations/operation/{op.pk}/change/").content.decode())
    texts.append(admin_client.get("/operations/").content.decode())
    assert all(CANARY not in text for text in texts)
