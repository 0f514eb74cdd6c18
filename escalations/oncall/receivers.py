"""The domain's card events, turned into policy steps (connected in escalations.apps).

Each receiver runs inside the transaction of the change it announces, under its row locks, and
only writes rows (the run, outbox rows): what it decides commits with the change or not at all,
and workers send it afterwards.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.utils import timezone

from escalations.oncall import outbox, runs
from escalations.roles import RESPONDER
from operations.models import Decision, Escalation, NotificationDelivery


def on_card_opened(*, escalation: Escalation, **_: object) -> None:
    runs.start(escalation=escalation, now=timezone.now())


def on_card_acknowledged(*, escalation: Escalation, **_: object) -> None:
    runs.acknowledge(escalation=escalation, now=timezone.now())


def on_card_unacknowledged(*, escalation: Escalation, **_: object) -> None:
    runs.unacknowledge(escalation=escalation, now=timezone.now())


def on_card_closed(*, escalation: Escalation, **_: object) -> None:
    runs.end(escalation=escalation, now=timezone.now())


def on_card_reassigned(*, escalation: Escalation, to: object, **_: object) -> None:
    """The responder a card was handed to is told by email; the policy goes on until they acknowledge."""
    runs.tell(escalation=escalation, users=[to], event=NotificationDelivery.Event.REASSIGNED, now=timezone.now())


def on_card_awaiting_second(*, escalation: Escalation, first: Decision, **_: object) -> None:
    """An acceptance waits for a second, different responder: the other responders are told by email."""
    others = (
        get_user_model()
        .objects.filter(is_active=True, groups__name=RESPONDER)
        .exclude(pk=first.user_id)
        .exclude(email="")
        .distinct()
        .order_by("username")
    )
    runs.tell(
        escalation=escalation,
        users=list(others),
        event=NotificationDelivery.Event.AWAITING_SECOND,
        now=timezone.now(),
    )


def on_dispatcher_pass(*, now: datetime, limit: int, **_: object) -> int:
    """operations.events.dispatcher_pass: step due policy runs, then hand due notifications to workers."""
    return runs.advance_due(now=now, limit=limit) + outbox.claim_due(now=now, limit=limit)
