"""The business deadline's early warning: on-call is told once that a business deadline is near.

A notification, not a card: nothing is decided and polling carries on. The warning is recorded on
the operation (`business_deadline_warned_at`) by a compare-and-set in the transaction that announces
it (`events.business_deadline_near`, whose receiver queues the message with the same commit), so it
is sent once per operation whatever number of dispatchers see it due.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from operations import events
from operations.audit import entries as audit
from operations.models import Operation
from operations.vocabulary import POLLABLE_STATUSES


def warn_business_deadline(*, operation_id: str, now: datetime, warning_s: int) -> bool:
    """Record and announce the warning; False when it was already given or the job is no longer watched."""
    with transaction.atomic():
        claimed = Operation.objects.filter(
            pk=operation_id,
            status__in=sorted(POLLABLE_STATUSES),
            business_deadline_warned_at__isnull=True,
            business_deadline_waived_at__isnull=True,
        ).update(business_deadline_warned_at=now)
        if not claimed:
            return False
        op = Operation.objects.select_related("provider").get(pk=operation_id)
        events.business_deadline_near.send(sender=Operation, operation=op)
        audit.append(
            entry_type="operation.business_deadline_near",
            actor=audit.SYSTEM_CONTROLLER,
            operation_id=op.pk,
            data={
                "state": str(op.status),
                "business_deadline": audit.iso(op.business_deadline_at),
                "deadline": audit.iso(op.deadline_at),
                "warning_s": warning_s,
            },
            at=now,
        )
    return True
