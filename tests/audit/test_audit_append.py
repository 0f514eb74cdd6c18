"""The one writer: pending entries whose stored bytes hash to their leaf hash, one INSERT for many,
times keep six digits, and no decision commits without its entry (fail closed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from operations.agents.registration import operation_register
from operations.audit import entries as audit
from operations.audit import integrate, tree
from operations.audit.verify import merkle
from operations.models import AuditEntry, AuditTree, Operation, StatusCheck
from operations.polls.controller import poll_once
from tests.audit.helpers import OP_A, append_entries, decision_data
from tests.support import job_id

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("micro", [0, 1, 999_999])
def test_round_trip_stored_bytes_leaf_hashes_and_times_keep_six_digits(micro):
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
    rows = list(AuditEntry.objects.order_by("pk"))
    assert [row.seq for row in rows] == [None] * 4  # pending until the integrator numbers them
    for row in rows:
        body = bytes(row.body)  # a memoryview on PostgreSQL
        assert merkle.leaf_hash(body).hex() == row.entry_hash
        document = json.loads(body)
        assert document["v"] == 2 and "seq" not in document and "prev" not in document
    first = json.loads(bytes(rows[0].body))
    assert first["at"] == f"2026-12-01T10:00:00.{micro:06d}Z"
    assert rows[0].at == at  # the column keeps the microseconds too
    assert first["data"]["provider_state"] is None and "provider_state" in first["data"]
    assert integrate.integrate_all() == 4
    assert list(AuditEntry.objects.order_by("pk").values_list("seq", flat=True)) == [1, 2, 3, 4]
    edge = merkle.CompactRange()
    for row in rows:
        edge.push(merkle.leaf_hash(bytes(row.body)))
    assert tree.root_at(log=rows[0].log, size=4) == edge.root()
    assert AuditTree.objects.get().root == edge.root().hex()


def test_append_many_writes_its_entries_with_one_insert():
    new = [
        audit.NewEntry(
            entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data=decision_data(n)
        )
        for n in range(5)
    ]
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        written = audit.append_many(entries=new)
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1
    assert [entry.pk is not None for entry in written] == [True] * 5
    assert AuditEntry.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_append_outside_a_transaction_is_refused():
    with pytest.raises(audit.AuditError, match="inside the decision's transaction"):
        audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data={})
    assert not AuditEntry.objects.exists()


def _refuse(*args: object, **kwargs: object) -> bytes:
    raise audit.AuditError("entry cannot be canonicalised: test")


def test_a_failing_append_rolls_the_registration_back(profile, monkeypatch):
    append_entries(1)
    monkeypatch.setattr(audit, "canonical", _refuse)
    with pytest.raises(audit.AuditError, match="canonicalised"):
        operation_register(provider_slug=profile.slug, provider_job_id=job_id("slow_success"), registered_by="op:t")
    assert not Operation.objects.exists()
    assert AuditEntry.objects.count() == 1


def test_a_failing_append_rolls_the_controller_decision_back(make_operation, clock, rng, fake_provider, monkeypatch):
    op = make_operation(job_id("slow_success", polls=3))
    before = Operation.objects.get(pk=op.pk)
    monkeypatch.setattr(audit, "canonical", _refuse)
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


def test_an_actor_needs_a_kind_and_an_id():
    with transaction.atomic(), pytest.raises(audit.AuditError, match="actor"):
        audit.append(entry_type="controller.decision", actor={"kind": "user", "id": ""}, operation_id=None, data={})
