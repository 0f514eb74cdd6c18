"""The controller's audit entry, built in one place for every lifecycle step that writes one."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from operations.audit import entries as audit
from operations.models import Operation


def controller_decision(
    *, op: Operation, state: str, decision: str, reason: str, at: datetime | None = None, **fields: object
) -> None:
    """Append a `controller.decision` entry with the operation's bounds as they now stand."""
    entry = decision_entry(op=op, state=state, decision=decision, reason=reason, at=at, **fields)
    audit.append(
        entry_type=entry.entry_type, actor=entry.actor, operation_id=entry.operation_id, data=entry.data, at=entry.at
    )


def decision_entry(
    *, op: Operation, state: str, decision: str, reason: str, at: datetime | None = None, **fields: object
) -> audit.NewEntry:
    """The `controller.decision` entry, for a caller that appends several at once (a group of polls)."""
    data: dict[str, object] = {
        "state": str(state),
        "next_poll_at": None,
        "delay_source": None,
        "delay_ms": None,
        "request_count": op.status_requests_used,
        "max_requests": op.max_status_requests,
        "transport_failures": op.transport_failures_used,
        "max_transport_failures": op.max_transport_failures,
        "deadline": audit.iso(op.deadline_at),
        "decision": decision,
        "reason": reason,
    }
    for key, value in fields.items():
        if isinstance(value, datetime):
            value = audit.iso(value)
        elif isinstance(value, StrEnum):
            value = str(value)
        data[key] = value
    return audit.NewEntry(
        entry_type="controller.decision", actor=audit.SYSTEM_CONTROLLER, operation_id=op.pk, data=data, at=at
    )
