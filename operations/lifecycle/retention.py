"""Retention of finished work (`manage.py archive`): operations that ended more than RETENTION_DAYS
ago, with their status checks, cards and decisions, and django-q2's finished task rows (successes;
the dispatcher's housekeeping removes failures after a week).

An operation that is not finished, or that still has an open card, is never removed; neither is
anything of the audit log (operations/audit/archive.py archives and prunes that, verifiably).
Everything goes in batches, each its own short transaction, so the dispatcher polling beside it
never waits long on a lock or a burst of writes, and a run stopped midway leaves whole batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django_q.models import Success

from operations.models import Escalation, Operation
from operations.vocabulary import TERMINAL_STATUSES

BATCH = 500
TASK_BATCH = 5_000


@dataclass(frozen=True)
class Removed:
    operations: int
    rows: int
    tasks: int


def remove_finished(*, before: datetime) -> Removed:
    """Remove finished operations last updated before `before` (and what hangs off them), in batches."""
    operations = rows = 0
    while True:
        with transaction.atomic():
            batch = list(
                Operation.objects.filter(status__in=TERMINAL_STATUSES, updated_at__lt=before)
                .exclude(escalations__state=Escalation.State.OPEN)
                .order_by("updated_at")
                .values_list("pk", flat=True)[:BATCH]
            )
            if not batch:
                break
            deleted, per_model = Operation.objects.filter(pk__in=batch).delete()
        operations += per_model.get(Operation._meta.label, 0)
        rows += deleted
    return Removed(operations=operations, rows=rows, tasks=_remove_tasks(before=before))


def _remove_tasks(*, before: datetime) -> int:
    """django-q2's finished task rows that stopped before `before`, in batches."""
    tasks = 0
    while True:
        batch = list(Success.objects.filter(stopped__lt=before).values_list("pk", flat=True)[:TASK_BATCH])
        if not batch:
            return tasks
        deleted, _ = Success.objects.filter(pk__in=batch).delete()
        tasks += deleted
