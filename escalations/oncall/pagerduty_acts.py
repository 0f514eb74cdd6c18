"""What a verified PagerDuty v3 webhook event does to the card its incident names.

- `incident.acknowledged` by a PagerDuty user matched to one responder (their email, from
  PAGERDUTY_USER_EMAILS): the card is acknowledged as that person, through the same act as the card's
  button (operations.decisions.ownership), recorded with channel "pagerduty" and the PagerDuty user
  id; the card's policy stops as it does for any acknowledgement. No match, several, a viewer, a card
  someone else holds: nothing changes, and the card says why (a notice). An agent that is not a user
  (pollerdash's own acknowledge event coming back, an integration) on a card someone holds is
  pollerdash's own echo: nothing at all.
- `incident.unacknowledged` (PagerDuty's acknowledgement timeout, or a person): the card is given
  back when its holder acknowledged it from PagerDuty; a card acknowledged in pollerdash (the
  dashboard, Slack) stays with its holder and says so.
- `incident.resolved` never decides a card: an open card says "resolved in PagerDuty by X; this card
  still needs a decision" and its policy carries on (a later level naming PagerDuty triggers a new
  incident, since PagerDuty keeps no open incident under the dedup_key any more). pollerdash's own
  resolve, sent when the card was decided, comes back to a closed card and changes nothing.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model

from escalations.oncall.pagerduty_webhooks import (
    ACKNOWLEDGED,
    RESOLVED,
    UNACKNOWLEDGED,
    Account,
    Matched,
    WebhookEvent,
    email_of,
    match_agent,
)
from operations.cards.words import pager_notice_words
from operations.decisions import ownership
from operations.decisions.services import TooManyDecisions
from operations.models import CardActivity, Escalation
from operations.responders import is_responder
from operations.vocabulary import Channel

logger = logging.getLogger(__name__)


def act(*, event: WebhookEvent, escalation_id: int) -> str:
    """Apply one event to its card; what happened, for the log (never the body, never a secret)."""
    escalation = Escalation.objects.select_related("assignee").filter(pk=escalation_id).first()
    if escalation is None or escalation.state != Escalation.State.OPEN:
        return "the card is not open: nothing changed"
    if event.type == ACKNOWLEDGED:
        return _acknowledged(event=event, escalation=escalation)
    if event.type == UNACKNOWLEDGED:
        return _unacknowledged(event=event, escalation=escalation)
    if event.type == RESOLVED:
        return _notice(event, escalation, pager_notice_words(event="resolved", by=event.agent.name))
    return f"{event.type} is not acted on"


def _notice(event: WebhookEvent, escalation: Escalation, text: str) -> str:
    try:
        ownership.card_notice(
            escalation_id=escalation.pk,
            channel=Channel.PAGERDUTY,
            channel_identity=event.agent.identity,
            event=event.type,
            text=text,
        )
    except ownership.CardNotOpen:
        return "the card closed meanwhile: nothing changed"
    return f"noted on the card: {text}"


def _acknowledged(*, event: WebhookEvent, escalation: Escalation) -> str:
    agent = event.agent
    if not agent.is_user:
        if escalation.acknowledged_by_id is not None:
            return "pollerdash's own acknowledgement came back: nothing changed"
        why = "it was not a PagerDuty user pollerdash can match"
        return _notice(event, escalation, pager_notice_words(event="acknowledged", by=agent.name, why=why))
    email = email_of(agent=agent, emails=settings.PAGERDUTY_USER_EMAILS)
    users = list(get_user_model().objects.filter(email__iexact=email)) if email else []
    accounts = [
        Account(username=u.get_username(), email=u.email, is_active=u.is_active, is_responder=is_responder(u))
        for u in users
    ]
    matched = match_agent(agent=agent, email=email, accounts=accounts)
    if not isinstance(matched, Matched):
        return _notice(event, escalation, pager_notice_words(event="acknowledged", by=agent.name, why=matched.why))
    user = next(u for u in users if u.get_username() == matched.username)
    try:
        ownership.card_acknowledge(
            escalation_id=escalation.pk, user=user, channel=Channel.PAGERDUTY, channel_identity=agent.identity
        )
    except ownership.TakeoverNeeded as exc:
        return _notice(event, escalation, pager_notice_words(event="acknowledged", by=agent.name, holder=exc.holder))
    except ownership.CardNotOpen:
        return "the card closed meanwhile: nothing changed"
    except TooManyDecisions:
        why = f"{user.get_username()} acted on cards too often in the last minute"
        return _notice(event, escalation, pager_notice_words(event="acknowledged", by=agent.name, why=why))
    return f"acknowledged as {user.get_username()}"


def _unacknowledged(*, event: WebhookEvent, escalation: Escalation) -> str:
    holder = escalation.acknowledged_by
    if holder is None:
        return "nobody holds the card: nothing changed"
    last = (
        CardActivity.objects.filter(escalation=escalation, kind=CardActivity.Kind.ACKNOWLEDGED, user=holder)
        .order_by("-at", "-pk")
        .first()
    )
    if last is None or last.channel != Channel.PAGERDUTY:
        text = pager_notice_words(event="unacknowledged", by=event.agent.name, holder=holder.get_username())
        return _notice(event, escalation, text)
    try:
        # The holder's acknowledgement came from PagerDuty: PagerDuty taking it back gives the card
        # back, recorded as the holder's act through PagerDuty (with who PagerDuty says did it).
        ownership.card_unacknowledge(
            escalation_id=escalation.pk,
            user=holder,
            channel=Channel.PAGERDUTY,
            channel_identity=event.agent.identity,
        )
    except (ownership.NotHolder, ownership.CardNotOpen):
        return "the card changed hands meanwhile: nothing changed"
    except TooManyDecisions:
        return "the holder acted on cards too often in the last minute: nothing changed"
    return f"given back by {holder.get_username()} through PagerDuty"
