"""Slack-app posts updated in place after every act on a card, wherever it was taken.

An act that changes what a card's post shows (given back, snoozed, a snooze's end, handed on,
taken over, acknowledged again, an acknowledgement that timed out) writes, in its own transaction,
one `updated` row per Slack-app stream (operations.notify.rules.on_change); a worker sends it like
every other row (chat.update, escalations.oncall.channels.slack_channel), rendering the card as it
is when it is sent. Acknowledging and closing have follow-ups of their own (runs._close).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime

from escalations.oncall.channels.registry import UPDATED_IN_PLACE
from escalations.oncall.outbox import rule_row
from escalations.oncall.outbox_rows import OUTSIDE_LEVELS
from operations.models import NotificationDelivery
from operations.notify import rules
from operations.notify.kinds import Kind

Event = NotificationDelivery.Event

Stream = tuple[Kind, str]


def update_in_place(
    *, escalation_id: int, now: datetime, at: datetime | None = None, announced: AbstractSet[Stream] = frozenset()
) -> None:
    """Every Slack-app post of the card shows it as it is after the act, updated in place by a worker
    (chat.update, sent at `at`, or at once); `announced`: the streams the act's own follow-up
    already updates."""
    levels = NotificationDelivery.objects.filter(escalation_id=escalation_id, event=Event.LEVEL)
    rows = {row.pk: row for row in levels}
    plan = rules.on_change(
        rows=[rule_row(r) for r in rows.values()], updated_in_place=UPDATED_IN_PLACE, announced=announced
    )
    # Each update its own slot, counted under the card's lock, which every act holds.
    counter = NotificationDelivery.objects.filter(escalation_id=escalation_id, event=Event.UPDATED).count()
    NotificationDelivery.objects.bulk_create(
        follow_up_row(
            escalation_id, follow, display=rows[follow.after_row_id].display, now=now, due=at or now, repetition=n
        )
        for n, follow in enumerate(plan, start=counter + 1)
    )


def follow_up_row(
    escalation_id: int,
    follow: rules.FollowUp,
    *,
    display: str,
    now: datetime,
    due: datetime,
    round_: int = 0,
    repetition: int = 0,
) -> NotificationDelivery:
    """The row of a follow-up (an acknowledge, a resolve, an update in place), sent at `due`."""
    return NotificationDelivery(
        escalation_id=escalation_id,
        round=round_,
        level=OUTSIDE_LEVELS,
        repetition=repetition,
        channel=str(follow.channel),
        address=follow.address,
        display=display,
        event=str(follow.event),
        next_attempt_at=due,
        after_id=follow.after_row_id,
        created_at=now,
    )
