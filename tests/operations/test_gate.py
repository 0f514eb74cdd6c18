from __future__ import annotations

from datetime import UTC, datetime, timedelta

from operations.polling.gate import Gate, before_send, business_deadline_binds
from operations.vocabulary import Reason

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def gate(**overrides: object):
    args: dict[str, object] = {
        "status": "running",
        "now": NOW,
        "deadline_at": NOW + timedelta(minutes=10),
        "requests_used": 2,
        "max_requests": 12,
        "next_poll_at": NOW,
    }
    args.update(overrides)
    return before_send(**args)


def test_a_due_operation_within_bounds_may_poll() -> None:
    assert gate().gate is Gate.POLL


def test_terminal_and_escalated_operations_are_left_alone() -> None:
    for status in ("succeeded", "failed", "closed", "needs_attention"):
        assert gate(status=status).gate is Gate.STOP


def test_the_deadline_is_checked_before_anything_else() -> None:
    result = gate(deadline_at=NOW, requests_used=12, next_poll_at=NOW + timedelta(hours=1))
    assert (result.gate, result.reason) == (Gate.ESCALATE, Reason.DEADLINE_EXCEEDED)


def test_a_spent_budget_escalates_without_a_request() -> None:
    result = gate(requests_used=12)
    assert (result.gate, result.reason) == (Gate.ESCALATE, Reason.REQUEST_BUDGET_EXHAUSTED)


def test_not_yet_due_is_not_polled() -> None:
    assert gate(next_poll_at=NOW + timedelta(seconds=1)).gate is Gate.NOT_DUE


def test_a_long_overdue_operation_gets_one_poll_not_a_burst() -> None:
    assert gate(next_poll_at=NOW - timedelta(days=3)).gate is Gate.POLL


def test_per_call_approval_needs_an_approved_check() -> None:
    assert gate(per_call_approval=True).reason is Reason.PER_CALL_APPROVAL
    assert gate(per_call_approval=True, approved_checks=1).gate is Gate.POLL


def test_a_passed_business_deadline_before_the_technical_one_stops_the_next_request() -> None:
    passed = NOW - timedelta(seconds=1)
    result = gate(business_deadline_at=passed, next_poll_at=NOW + timedelta(hours=1))
    assert (result.gate, result.reason) == (Gate.ESCALATE, Reason.BUSINESS_DEADLINE_PASSED)
    assert "the business deadline 2026-12-01 09:59:59 UTC passed before the job finished" in result.explanation
    assert "no request was sent after it (the technical deadline 2026-12-01 10:10:00 UTC and 10 requests remain)" in (
        result.explanation
    )
    # It is checked before the budget, after the technical deadline.
    assert gate(business_deadline_at=passed, requests_used=12).reason is Reason.BUSINESS_DEADLINE_PASSED
    assert gate(business_deadline_at=passed, deadline_at=NOW).reason is Reason.DEADLINE_EXCEEDED


def test_a_business_deadline_that_has_not_passed_is_later_than_the_deadline_or_was_waived_stops_nothing() -> None:
    assert gate(business_deadline_at=NOW + timedelta(seconds=1)).gate is Gate.POLL
    # At or after the technical deadline it is informational: the technical deadline stops polling first.
    deadline = NOW + timedelta(minutes=10)
    assert not business_deadline_binds(business_deadline_at=deadline, deadline_at=deadline, waived=False)
    assert business_deadline_binds(business_deadline_at=NOW, deadline_at=deadline, waived=False)
    assert gate(business_deadline_at=NOW - timedelta(minutes=1), business_deadline_waived=True).gate is Gate.POLL
