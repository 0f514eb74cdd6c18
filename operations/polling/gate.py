"""The checks made before any status request is sent (docs/DESIGN.md section 4, steps 1-4)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from operations.vocabulary import POLLABLE_STATUSES, Reason


class Gate(StrEnum):
    POLL = "poll"
    NOT_DUE = "not_due"
    STOP = "stop"  # terminal, or already with a human: nothing to do
    ESCALATE = "escalate"


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    reason: Reason | None = None
    explanation: str = ""


def business_deadline_binds(*, business_deadline_at: datetime | None, deadline_at: datetime, waived: bool) -> bool:
    """Whether the business deadline stops polling (docs/DESIGN.md section 4).

    Only one that comes before the technical deadline does: a later one is informational, since
    the technical deadline stops polling first. Once a person chose to keep polling past it (any
    decision that lets polling continue, taken at or after it), it stops nothing any more.
    """
    return business_deadline_at is not None and not waived and business_deadline_at < deadline_at


def business_deadline_explanation(*, business_deadline_at: datetime, deadline_at: datetime, requests_left: int) -> str:
    return (
        f"the business deadline {business_deadline_at:%Y-%m-%d %H:%M:%S} UTC passed before the job finished; "
        f"no request was sent after it (the technical deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC and "
        f"{requests_left} request{'' if requests_left == 1 else 's'} remain)"
    )


def before_send(
    *,
    status: str,
    now: datetime,
    deadline_at: datetime,
    requests_used: int,
    max_requests: int,
    next_poll_at: datetime | None,
    per_call_approval: bool = False,
    approved_checks: int = 0,
    business_deadline_at: datetime | None = None,
    business_deadline_waived: bool = False,
) -> GateResult:
    """Whether one status request may be sent now, in docs/DESIGN.md's order.

    The deadline, the business deadline (where it binds) and the budget are checked before "not
    due", so an operation past its bounds is escalated at its next wake-up without spending a
    request. Missed polls are never caught up: a wake-up long after `next_poll_at` still allows
    exactly one request.
    """
    if status not in POLLABLE_STATUSES:
        return GateResult(Gate.STOP, explanation=f"operation is {status}")
    if now >= deadline_at:
        return GateResult(
            Gate.ESCALATE,
            Reason.DEADLINE_EXCEEDED,
            f"the deadline {deadline_at:%Y-%m-%d %H:%M:%S} UTC passed; no request was sent",
        )
    if (
        business_deadline_at is not None
        and now >= business_deadline_at
        and business_deadline_binds(
            business_deadline_at=business_deadline_at, deadline_at=deadline_at, waived=business_deadline_waived
        )
    ):
        return GateResult(
            Gate.ESCALATE,
            Reason.BUSINESS_DEADLINE_PASSED,
            business_deadline_explanation(
                business_deadline_at=business_deadline_at,
                deadline_at=deadline_at,
                requests_left=max(max_requests - requests_used, 0),
            ),
        )
    if requests_used >= max_requests:
        return GateResult(
            Gate.ESCALATE,
            Reason.REQUEST_BUDGET_EXHAUSTED,
            f"all {max_requests} status requests are spent; no request was sent",
        )
    if next_poll_at is not None and now < next_poll_at:
        return GateResult(Gate.NOT_DUE, explanation="not due yet")
    if per_call_approval and approved_checks < 1:
        return GateResult(
            Gate.ESCALATE,
            Reason.PER_CALL_APPROVAL,
            "this provider needs a human to approve every status request",
        )
    return GateResult(Gate.POLL)
