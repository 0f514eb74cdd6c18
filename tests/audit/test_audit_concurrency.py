"""Concurrent appends on PostgreSQL: one contiguous chain, never a fork; wrong isolation refused."""

from __future__ import annotations

import threading
import time

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from operations.audit import entries as audit
from operations.audit.checkpoints import verify_segment
from operations.models import AuditEntry
from tests.audit.helpers import OP_A, append_entries, decision_data

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 8
SECONDS = 5.0


def test_eight_writers_for_five_seconds_leave_one_contiguous_chain():
    appended = [0] * WRITERS
    errors: list[str] = []
    start = threading.Barrier(WRITERS)

    def writer(index: int) -> None:
        try:
            start.wait()
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                with transaction.atomic():
                    audit.append(
                        entry_type="controller.decision",
                        actor=audit.SYSTEM_CONTROLLER,
                        operation_id=f"op_writer{index}",
                        data=decision_data(appended[index]),
                    )
                appended[index] += 1
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread's name
            errors.append(f"writer {index}: {exc!r}")
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    total = sum(appended)
    assert all(appended), appended  # every writer got its turn
    seqs = list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    # Every entry links to the one before it: re-hash the stored bytes and follow the links.
    segment = verify_segment(log=settings.AUDIT_LOG_NAME, anchor=None, keys=[])
    assert (segment.size, segment.entries) == (total, total)


def begin_repeatable_read() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def test_an_append_in_a_repeatable_read_transaction_is_refused():
    append_entries(1)
    with pytest.raises(audit.AuditError, match="READ COMMITTED"), transaction.atomic():
        begin_repeatable_read()
        audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data={})
    assert AuditEntry.objects.count() == 1


def test_a_stale_repeatable_read_snapshot_never_forks_the_chain():
    """The classic fork: a transaction whose snapshot predates another writer's commit."""
    append_entries(1)
    snapshot_taken, other_committed = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def stale_writer() -> None:
        try:
            with transaction.atomic():
                begin_repeatable_read()
                AuditEntry.objects.count()  # the snapshot is taken here, at seq 1
                snapshot_taken.set()
                other_committed.wait(10)
                audit.append(
                    entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data={}
                )
            outcome.append(None)
        except (audit.AuditError, DatabaseError) as exc:
            outcome.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=stale_writer)
    thread.start()
    assert snapshot_taken.wait(10)
    append_entries(1, start=2)  # commits seq 2 while the stale snapshot still sees seq 1
    other_committed.set()
    thread.join(timeout=30)
    assert outcome and outcome[0] is not None  # refused (AuditError or a serialization failure)
    seqs = list(AuditEntry.objects.order_by("seq").values_list("seq", "prev_hash"))
    assert [seq for seq, _ in seqs] == [1, 2]
    assert len({prev for _, prev in seqs}) == 2
    assert verify_segment(log=settings.AUDIT_LOG_NAME, anchor=None, keys=[]).size == 2


def test_serializable_is_refused_too():
    with pytest.raises(audit.AuditError, match="READ COMMITTED"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        audit.append(entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=OP_A, data={})
    assert not AuditEntry.objects.exists()
