"""The one writer: stored bytes re-hash to the stored hash, times keep six digits, and no decision
commits without its entry (fail closed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import transaction

from operations.audit import entries as audit
from operations.controller import poll_once
from operations.models import AuditEntry, AuditHead, Operation, StatusCheck
from operations.registration import operation_register
from tests.audit.helpers import OP_A, append_entries, decision_data, entry_hash
from tests.support import job_id

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("micro", [0, 1, 999_999])
def test_round_trip_stored_bytes_rehash_and_times_keep_six_digits(micro):
    at = datetime(2026, 12, 1, 10, 0, 0, micro, tzinfo=UTC)
    with transaction.atomic():
        audit.append(
            entry_type="controller.decision",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=OP_A,
            data=decision_data(1),
            at=at,
        )
    append_entries(3)
    rows = list(AuditEntry.objects.order_by("seq"))
    assert [row.seq for row in rows] == [1, 2, 3, 4]
    prev = audit.GENESIS_PREV
    for row in rows:
        body = bytes(row.body)  # a memoryview on PostgreSQL
        assert entry_hash(body) == row.entry_hash
        document = json.loads(body)
        assert document["prev"] == prev == row.prev_hash and document["seq"] == row.seq
        prev = row.entry_hash
    first = json.loads(bytes(rows[0].body))
    assert first["at"] == f"2026-12-01T10:00:00.{micro:06d}Z"
    assert rows[0].at == at  # the column keeps the microseconds too
    assert first["data"]["provider_state"] is None and "provider_state" in first["data"]
    head = AuditHead.objects.get()
    assert (head.seq, head.head_hash) == (4, rows[-1].entry_hash)


@pytest.mark.django_db(transaction=True)
def test_append_outside_a_transaction_is_refused():
    with pytest.raises(audit.AuditError, match="inside the decision's transaction"):
        audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data={})
    assert not AuditEntry.objects.exists()


def test_a_failing_append_rolls_the_registration_back(profile):
    append_entries(1)
    AuditHead.objects.update(head_hash="f" * 64)  # the head no longer names the stored last entry
    with pytest.raises(audit.AuditError, match="disagrees with the stored chain"):
        operation_register(provider_slug=profile.slug, provider_job_id=job_id("slow_success"), registered_by="op:t")
    assert not Operation.objects.exists()
    assert AuditEntry.objects.count() == 1


def test_a_failing_append_rolls_the_controller_decision_back(make_operation, clock, rng, fake_provider):
    op = make_operation(job_id("slow_success", polls=3))
    before = Operation.objects.get(pk=op.pk)
    AuditHead.objects.update(head_hash="e" * 64)
    with pytest.raises(audit.AuditError):
        poll_once(operation_id=op.pk, fence=op.fence, rng=rng)
    after = Operation.objects.get(pk=op.pk)
    # The request went out and stays charged (it was charged before sending); the decision about
    # its answer - state, next poll, the check's interpretation - did not commit without its entry.
    assert after.status_requests_used == before.status_requests_used + 1
    assert after.last_polled_at is None and after.last_http_status is None
    assert after.next_poll_at == before.next_poll_at
    check = StatusCheck.objects.get(operation=op)
    assert check.received_at is None and check.decision == ""
    assert list(AuditEntry.objects.values_list("type", flat=True)) == ["operation.registered"]


def test_a_head_row_ahead_of_the_chain_stops_appends_instead_of_forking():
    append_entries(2)
    AuditHead.objects.update(seq=5)
    with pytest.raises(audit.AuditError):
        append_entries(1, start=3)
    assert AuditEntry.objects.count() == 2


def test_an_actor_needs_a_kind_and_an_id():
    with transaction.atomic(), pytest.raises(audit.AuditError, match="actor"):
        audit.append(entry_type="controller.decision", actor={"kind": "user", "id": ""}, operation_id=None, data={})
