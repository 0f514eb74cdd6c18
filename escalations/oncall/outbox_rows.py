"""The outbox rows of a card, written: one row per recipient of a step (`insert_rows`), whom a step
reaches (`people_of`, read now), and the messages outside the levels, recorded on the card like the
rest:

- `tell` (reassigned, awaiting a second responder, taken over): an email outside the levels;
- `reply_to_click` (a Slack click's answer): sent by a worker through the click's response_url.

The policy run that decides the levels is escalations.oncall.runs; workers send the rows
(escalations.oncall.send).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User

from escalations.roles import can_decide
from operations.models import Escalation, NotificationDelivery
from operations.notify.kinds import Kind
from operations.notify.policy import Target
from operations.notify.recipients import People, Person, Recipient, expand
from operations.notify.steps import Notify

# Follow-ups and messages outside the levels are not tied to a level.
OUTSIDE_LEVELS = -1
Event = NotificationDelivery.Event
State = NotificationDelivery.State


def insert_rows(
    escalation_id: int,
    recipients: Sequence[Recipient],
    *,
    now: datetime,
    event: str = Event.LEVEL,
    note: str = "",
    caused_by: User | None = None,
) -> list[NotificationDelivery]:
    rows = [
        NotificationDelivery(
            escalation_id=escalation_id,
            round=r.notify.round,
            level=r.notify.level,
            repetition=r.notify.repetition,
            channel=str(r.channel),
            address=r.address,
            display=r.display[:150],
            event=event,
            state=State.SKIPPED if r.skip_reason else State.PENDING,
            next_attempt_at=None if r.skip_reason else now,
            created_at=now,
            finished_at=now if r.skip_reason else None,
            detail=r.skip_reason,
            note=note[:500],
            caused_by_id=getattr(caused_by, "pk", None),
        )
        for r in recipients
    ]
    # Not ignore_conflicts: a slot written twice is a bug that must surface, not be hidden.
    return NotificationDelivery.objects.bulk_create(rows)


def people_of(notifications: Iterable[Notify]) -> People:
    """The people a step may reach, read now: someone added to a group since the card opened is paged."""
    notifications = list(notifications)
    usernames = {n.target.ref for n in notifications if n.target.kind is Kind.USER}
    group_names = {n.target.ref for n in notifications if n.target.kind is Kind.GROUP}
    members: dict[str, list[str]] = {}
    for group in Group.objects.filter(name__in=group_names).prefetch_related("user_set"):
        members[group.name] = [u.get_username() for u in group.user_set.all()]
        usernames |= set(members[group.name])
    users = get_user_model().objects.filter(username__in=usernames).prefetch_related("groups")
    return People(
        by_username={
            u.get_username(): Person(
                username=u.get_username(), email=u.email, is_active=u.is_active, is_responder=can_decide(u)
            )
            for u in users
        },
        group_members=members,
    )


def tell(
    *,
    escalation: Escalation,
    event: str,
    note: str,
    now: datetime,
    users: Sequence[User] = (),
    addresses: Sequence[str] = (),
    by: User | None = None,
) -> list[NotificationDelivery]:
    """Email people about the card outside its levels (handed to them, taken over from them, an
    acceptance to confirm): recorded like a level's messages, skipped with the reason when someone
    cannot be reached. `note`: the message's head and first sentence, in pollerdash's words; `by`:
    whose act it is (the messages count against their hourly budget)."""
    people = People(
        by_username={
            u.get_username(): Person(
                username=u.get_username(),
                email=u.email,
                is_active=u.is_active,
                is_responder=can_decide(u),
            )
            for u in users
        },
        group_members={},
    )
    counter = NotificationDelivery.objects.filter(escalation_id=escalation.pk, event=event).count() + 1
    targets = [Target(Kind.USER, name) for name in people.by_username]
    targets += [Target(Kind.EMAIL, address) for address in addresses]
    notes = [Notify(round=0, level=OUTSIDE_LEVELS, repetition=counter, target=target) for target in targets]
    return insert_rows(escalation.pk, expand(notes, people=people), now=now, event=event, note=note, caused_by=by)


def reply_to_click(*, escalation: Escalation, response_url: str, note: str, now: datetime) -> NotificationDelivery:
    """The answer to a click in Slack, sent by a worker through the click's response_url: "replace"
    shows the card's state in place of the message, any other text is an ephemeral reply."""
    counter = NotificationDelivery.objects.filter(escalation_id=escalation.pk, channel=Kind.SLACK_REPLY).count() + 1
    return NotificationDelivery.objects.create(
        escalation_id=escalation.pk,
        round=0,
        level=OUTSIDE_LEVELS,
        repetition=counter,
        channel=str(Kind.SLACK_REPLY),
        address="response_url",
        display="Slack reply",
        event=Event.SLACK_REPLY,
        next_attempt_at=now,
        created_at=now,
        response_url=response_url,
        note=note[:500],
    )
