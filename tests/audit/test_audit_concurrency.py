"""Appends and integrators at once: every entry numbered exactly once, none skipped, no lock shared
by the writers; an integrator killed mid-batch loses nothing and numbers nothing twice."""

from __future__ import annotations

import threading
import time

import pytest
from django.conf import settings
from django.db import connection, transaction

from operations.audit import database, integrate
from operations.audit import entries as audit
from operations.audit.treecheck import verify_tree_segment
from operations.models import AuditEntry, AuditTree, AuditTreeNode
from tests.audit.helpers import append_entries, decision_data

WRITERS = 8
INTEGRATORS = 2
SECONDS = 2.0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_writers_and_two_integrators_number_every_entry_once():
    appended = [0] * WRITERS
    integrated = [0] * INTEGRATORS
    errors: list[str] = []
    start = threading.Barrier(WRITERS + INTEGRATORS)
    writing = threading.Event()

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
        except Exception as exc:  # reported below, with the thread's name
            errors.append(f"writer {index}: {exc!r}")
        finally:
            connection.close()  # each thread has its own connection

    def integrator(index: int) -> None:
        try:
            start.wait()
            while not writing.is_set():
                integrated[index] += integrate.integrate_once(limit=50) or 0
        except Exception as exc:
            errors.append(f"integrator {index}: {exc!r}")
        finally:
            connection.close()

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    integrators = [threading.Thread(target=integrator, args=(i,)) for i in range(INTEGRATORS)]
    for thread in writers + integrators:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    writing.set()
    for thread in integrators:
        thread.join(timeout=60)
    assert not errors
    total = sum(appended)
    assert all(appended), appended
    assert sum(integrated) > 0
    integrate.integrate_all()
    assert sum(integrated) <= total
    seqs = list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    assert AuditTree.objects.get().size == total
    assert AuditTreeNode.objects.filter(level=0).count() == total
    segment = verify_tree_segment(log=settings.AUDIT_LOG_NAME, anchor=None, keys=[])
    assert (segment.size, segment.entries) == (total, total)


@pytest.mark.django_db
def test_an_integrator_killed_mid_batch_loses_nothing_and_numbers_nothing_twice(monkeypatch):
    append_entries(5)
    assert integrate.integrate_once(limit=2) == 2
    append_entries(3, start=6)
    real = database.add_nodes

    def die(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the process killed after numbering the batch, before its nodes

    monkeypatch.setattr(database, "add_nodes", die)
    with pytest.raises(KeyboardInterrupt):
        integrate.integrate_once()
    monkeypatch.setattr(database, "add_nodes", real)
    assert list(AuditEntry.objects.exclude(seq=None).values_list("seq", flat=True)) == [1, 2]
    assert AuditTree.objects.get().size == 2
    assert integrate.integrate_all() == 6
    assert list(AuditEntry.objects.order_by("pk").values_list("seq", flat=True)) == list(range(1, 9))
    assert verify_tree_segment(log=settings.AUDIT_LOG_NAME, anchor=None, keys=[]).size == 8


@pytest.mark.django_db
def test_a_pending_entry_whose_bytes_changed_stops_integration():
    append_entries(2)
    if connection.vendor == "postgresql":  # a table owner switches the trigger off, for this transaction
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE operations_auditentry DISABLE TRIGGER operations_auditentry_no_change")
    AuditEntry.objects.filter(pk=AuditEntry.objects.order_by("pk").last().pk).update(entry_hash="0" * 64)
    with pytest.raises(integrate.IntegrationError):
        integrate.integrate_all()
    assert not AuditEntry.objects.exclude(seq=None).exists()
