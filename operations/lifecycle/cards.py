"""Decision cards: opened when waiting stops being safe, superseded when the operation ends another way,
closed by the decision that ends them. A card's `version` moves whenever anything shown on it
changes, so a decision posted against an older card is refused.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from operations import events
from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_NEEDS_ATTENTION, record_event
from operations.lifecycle.entries import controller_decision
from operations.lifecycle.transitions import ESCALATE
from operations.limits import quotas
from operations.models import CardGroup, Escalation, Operation
from operations.providers.credentials import credential_publish
from operations.vocabulary import Reason


def open_card(*, operation: Operation, reason: Reason, detail: str, context: dict[str, Any]) -> Escalation:
    """Open the decision card for an operation that just entered needs_attention.

    Runs inside the transaction that changed the operation's status, after its controller entry.
    Notifications are queued by the receivers of `events.card_opened` in this same transaction
    (django-q2's ORM broker), so they go out only if the card really opened, and from a worker.
    """
    now = timezone.now()
    detail = _capped_detail(detail)
    fingerprint = ""
    if reason is Reason.AUTHORIZATION_DENIED:
        # Recorded (and published) by the worker that was refused: the credential it sent.
        fingerprint = credential_publish(credential_env=operation.provider.credential_env)
    group, first = _group_for(account=operation.account, reason=reason, now=now)
    escalation = Escalation.objects.create(
        operation=operation,
        reason=reason,
        detail=detail,
        opened_at=now,
        credential_fingerprint=fingerprint,
        context={key: value for key, value in context.items() if value is not None},
        group=group,
    )
    if first and group is not None:
        group.first_card = escalation
        CardGroup.objects.filter(pk=group.pk).update(first_card=escalation)
    record_event(operation=operation, event_type=EVENT_NEEDS_ATTENTION)
    if operation.agent_id is not None:
        quotas.count_card(agent_id=operation.agent_id, now=now)
    events.card_opened.send(sender=Escalation, escalation=escalation)
    audit.append(
        entry_type="escalation.opened",
        actor=audit.SYSTEM_CONTROLLER,
        operation_id=operation.pk,
        data={
            "escalation_id": escalation.pk,
            "reason": str(reason),
            "detail": detail,
            "request_count": operation.status_requests_used,
            "max_requests": operation.max_status_requests,
            "deadline": audit.iso(operation.deadline_at),
        },
        at=now,
    )
    return escalation


def _capped_detail(detail: str) -> str:
    """Why the card opened, at most the column's length: an explanation quoting a provider's 10 kB
    state is cut (with "…") on the card, in its audit entry and in every message about it."""
    limit = Escalation._meta.get_field("detail").max_length or len(detail)
    return detail if len(detail) <= limit else detail[: limit - 1] + "…"


def _group_for(*, account: str, reason: Reason, now: datetime) -> tuple[CardGroup | None, bool]:
    """The group a new card joins (same account and reason, first card at most CARD_GROUP_WINDOW_S ago,
    one card still open), or a new group it opens; True when it opens one.

    Two cards of one outage opened at the same instant in two transactions may each open a group:
    at worst two rows and two notifications, never a card without either.
    """
    window = settings.CARD_GROUP_WINDOW_S
    if window <= 0:
        return None, False
    still_open = Escalation.objects.filter(group=OuterRef("pk"), state=Escalation.State.OPEN)
    group = (
        CardGroup.objects.filter(account=account, reason=reason, opened_at__gte=now - timedelta(seconds=window))
        .filter(Exists(still_open))
        .order_by("-opened_at", "-pk")
        .first()
    )
    if group is not None:
        return group, False
    return CardGroup.objects.create(account=account, reason=reason, opened_at=now), True


def escalate(*, operation_id: str, fence: int | None, reason: Reason, explanation: str) -> bool:
    """Hand a pollable operation to a human without spending a request (deadline, budget, approval).

    Fenced when `fence` is given: a claim or poll that moved the fence since it was read wins.
    """
    with transaction.atomic():
        query = Operation.objects.select_for_update().select_related("provider").filter(pk=operation_id)
        if fence is not None:
            query = query.filter(fence=fence)
        op = query.filter(status__in=sorted(ESCALATE.sources)).first()
        if op is None:
            return False
        change = ESCALATE.given(updated_at=timezone.now())
        change.apply(op=op)
        op.save(update_fields=change.fields)
        controller_decision(op=op, state=op.status, decision="escalate", reason=f"{reason}: {explanation}")
        open_card(operation=op, reason=reason, detail=explanation, context={"http_status": None})
    return True


def supersede_card(*, operation: Operation, reason: str) -> Escalation | None:
    """The operation ended another way (e.g. the agent cancelled it): its open card is superseded.

    Call inside the transaction that ends the operation, with the operation row locked, before
    that transaction's own audit entry (which records how the operation ended). Its buttons stop
    working at once: the version moves, so any decision posted from the old card is refused.
    """
    escalation = Escalation.objects.select_for_update().filter(operation=operation, state=Escalation.State.OPEN).first()
    if escalation is None:
        return None
    _end(escalation, state=Escalation.State.SUPERSEDED, now=timezone.now(), why=reason)
    events.card_closed.send(sender=Escalation, escalation=escalation, how="superseded")
    return escalation


def close_card(*, escalation: Escalation, now: datetime, why: str, channel: str = "web") -> None:
    """The decision that ends the card; call with the card locked, inside the decision's transaction.
    `channel` is where the decision came from (the response figures per channel)."""
    _end(escalation, state=Escalation.State.DECIDED, now=now, why=why)
    events.card_closed.send(sender=Escalation, escalation=escalation, how="decided", channel=channel)


def _end(escalation: Escalation, *, state: str, now: datetime, why: str) -> None:
    escalation.state = state
    escalation.closed_at = now
    escalation.closed_reason = why[:300]
    escalation.version += 1
    escalation.save(update_fields=["state", "closed_at", "closed_reason", "version"])


def new_card_version(*, escalation: Escalation) -> None:
    """Something shown on the card changed without ending it (a first acceptance, a cancel sent)."""
    escalation.version += 1
    escalation.save(update_fields=["version"])
