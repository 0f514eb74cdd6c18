"""One notification row as its channel reads it (escalations.oncall.channels.base.Message), built once
by the sender: the facts are read here, so every channel says the same thing and none of them
queries the database.

- A level's head is "Decision needed" for a new card's first page, "Still undecided after 12 min"
  later ("Still undecided 30 min after bob acknowledged" when an acknowledgement timed out); a
  message outside the levels (a hand-over, a take-over, an acceptance to confirm) carries
  its own head and first sentence in the row's note.
- A follow-up that updates a message in place gets the reference its stream's last sent message
  was given (a Slack post's "channel/ts").
- A message about no card gets its operation's facts (escalations.oncall.notices).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from escalations.oncall import notices
from escalations.oncall.channels.base import Message
from escalations.oncall.facts import CardStatus, card_facts, card_status
from operations.cards.options import human_duration
from operations.models import NotificationDelivery
from operations.notify.rules import TO_PEOPLE, Event, State

# Messages outside the levels whose note is their head, then their first sentence.
TOLD = frozenset({Event.REASSIGNED, Event.TAKEN_OVER, Event.AWAITING_SECOND})
# Where the card stands is read for the messages that show it.
SHOWS_STATUS = frozenset({Event.ACKNOWLEDGED, Event.ENDED, Event.UPDATED, Event.SLACK_REPLY})
# Follow-ups that update a message in place.
IN_PLACE = frozenset({Event.ACKNOWLEDGED, Event.ENDED, Event.UPDATED})


def message_of(row: NotificationDelivery, *, now: datetime) -> Message:
    event = Event(row.event)
    first = (row.round, row.level, row.repetition) == (0, 0, 0)
    if row.escalation is None:
        notice = notices.notice_of(row, now=now)
        return Message(
            event=event,
            address=row.address,
            head=notice.title,
            intro="",
            first=False,
            last=False,
            now=now,
            notice=notice,
        )
    escalation = row.escalation
    facts = card_facts(escalation=escalation, now=now)
    head, intro = "", ""
    if event in TOLD and row.note:
        head, _, intro = row.note.partition("\n")
    elif event is Event.LEVEL and row.note:
        head = row.note  # a level with its own head: an acknowledgement that timed out
    elif first:
        head = "Decision needed"
    else:
        head = f"Still undecided after {human_duration(now - facts.opened_at)}"
    return Message(
        event=event,
        address=row.address,
        head=head,
        intro=intro,
        first=first,
        last=event is Event.LEVEL and _last(row),
        now=now,
        card=facts,
        status=card_status(escalation=escalation, now=now) if event in SHOWS_STATUS else CardStatus("open"),
        updates=_updates(row, escalation_id=escalation.pk) if event in IN_PLACE else "",
        response_url=row.response_url,
        note=row.note,
    )


def sent_to_people(escalation_id: int) -> int:
    """Messages to people sent about a card (NOTIFY_MAX_PER_CARD counts them)."""
    return NotificationDelivery.objects.filter(
        escalation_id=escalation_id, state=State.SENT, event__in=sorted(TO_PEOPLE)
    ).count()


def _last(row: NotificationDelivery) -> bool:
    """This level's message is the last one to people about the card (NOTIFY_MAX_PER_CARD)."""
    per_card = settings.NOTIFY_MAX_PER_CARD
    return per_card > 0 and row.escalation_id is not None and sent_to_people(row.escalation_id) + 1 >= per_card


def _updates(row: NotificationDelivery, *, escalation_id: int) -> str:
    """The reference of the stream's last message sent that can be updated in place, or ""."""
    post = (
        NotificationDelivery.objects.filter(
            escalation_id=escalation_id,
            channel=row.channel,
            address=row.address,
            event=Event.LEVEL,
            state=State.SENT,
        )
        .exclude(provider_ref="")
        .order_by("-pk")
        .first()
    )
    return post.provider_ref if post is not None else ""
