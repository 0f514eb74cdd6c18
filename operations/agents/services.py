"""What agents do to their operations: acknowledge an outcome, cancel a watch; and the provider cancel a
worker forwards afterwards. Each checks the request against the locked operation, then calls the
lifecycle (operations.lifecycle.agents), which writes and audits.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from operations.agents.registration import OperationConflict, OperationNotFound
from operations.agents.registration_checks import PURPOSE_MAX, RegistrationError, check_text
from operations.lifecycle import agents
from operations.models import Agent, Operation
from operations.providers.cancel import send_provider_cancel
from operations.vocabulary import Status

WATCH_CANCELLED = agents.WATCH_CANCELLED


def _agent_operation_locked(*, agent: Agent, operation_id: str) -> Operation:
    op = Operation.objects.select_for_update().select_related("provider").filter(pk=operation_id, agent=agent).first()
    if op is None:
        raise OperationNotFound(operation_id)
    return op


def operation_acknowledge(*, agent: Agent, operation_id: str) -> Operation:
    """The agent has read the outcome: the operation leaves its open list. Idempotent."""
    with transaction.atomic():
        op = _agent_operation_locked(agent=agent, operation_id=operation_id)
        if not op.done:
            raise OperationConflict(
                "operation_not_done",
                f"Operation {op.pk} is {op.status}, not done; acknowledge it only after it finishes",
                op,
            )
        if op.acknowledged_at is not None:
            return op
        agents.acknowledge(op=op, agent=agent, now=timezone.now())
    return op


def operation_cancel_by_agent(*, agent: Agent, operation_id: str, reason: str = "") -> Operation:
    """Stop watching: the operation is `closed` with error.code `watch_cancelled`, at once.

    Where the profile documents a cancel request, it is forwarded to the provider by a worker
    (`operations.tasks.forward_provider_cancel`, enqueued in this transaction), so the agent's call
    never waits on the provider; `cancel_state` shows how far it got. While another live operation
    watches the same job nothing is sent (`not_forwarded`). A repeated cancel answers
    with the same operation; cancelling an operation that ended another way is refused.
    """
    problem = check_text("reason", reason, limit=PURPOSE_MAX)
    with transaction.atomic():
        # An unknown id is a 404 whatever the body says; only then is the reason judged.
        op = _agent_operation_locked(agent=agent, operation_id=operation_id)
        if problem is not None:
            raise RegistrationError([problem])
        if op.done:
            if op.status == Status.CLOSED and (op.error or {}).get("code") == WATCH_CANCELLED:
                return op
            raise OperationConflict(
                "operation_already_terminal",
                f"Operation {op.pk} already finished as {op.status}; nothing to cancel",
                op,
            )
        agents.cancel_watch(op=op, agent=agent, reason=reason, now=timezone.now())
    return op


def provider_cancel_forward(*, operation_id: str) -> str:
    """Send the provider's documented cancel request for an agent-cancelled operation, once."""
    if not agents.claim_cancel_forward(operation_id=operation_id):
        return "stale"
    op = Operation.objects.select_related("provider").get(pk=operation_id)
    result = send_provider_cancel(operation=op)
    agents.record_cancel_forward(operation_id=operation_id, result=result)
    return str(result.state)
