"""The facts every notification channel renders: a decision card's (`CardFacts`, `CardStatus`), or a
message's about no card (`Notice`: a callback that gave up, a business deadline near).

Read once by the sender (escalation, operation, provider, the options the card offers) and handed
to the pure builders (email, Slack, PagerDuty), so every channel says the same thing and none of
them queries the database. `purpose` and `provider_job_id` come from the agent: every builder
quotes them as untrusted data (escalations.agent_text). What may quote the provider is made inert
here, once, for every channel: `detail` (why it stopped: an unknown state is quoted in it) is one
quoted, defanged line of at most PROVIDER_TEXT_MAX characters, and the option labels and a
decision's words (which can name that state) are defanged single lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from escalations.agent_text import inert, quoted
from operations.cards.card import load_card, reason_label
from operations.cards.options import human_duration
from operations.models import CardActivity, Decision, Escalation
from operations.vocabulary import Channel

# Why a card stopped may quote a provider's state of any length: a notification shows this much.
PROVIDER_TEXT_MAX = 300
LABEL_MAX = 120
OUTCOME_MAX = 300


@dataclass(frozen=True)
class CardFacts:
    escalation_id: int
    operation_id: str
    reason: str
    reason_label: str
    detail: str  # quoted, defanged, capped: it may quote the provider
    provider_slug: str
    provider_account: str
    provider_job_id: str  # untrusted
    purpose: str  # untrusted
    requests_used: int
    max_requests: int
    deadline_at: datetime | None
    business_deadline_at: datetime | None
    opened_at: datetime
    card_url: str
    inbox_url: str
    option_labels: tuple[str, ...]
    # The outage the card belongs to: how many open cards its group holds (1 without a group) and
    # the group's page, where they are decided together.
    group_size: int = 1
    group_url: str = ""


@dataclass(frozen=True)
class CardStatus:
    """Where the card stands now, for messages updated in place."""

    state: str  # "open" | "acknowledged" | "decided" | "superseded"
    by: str = ""
    at: datetime | None = None
    outcome: str = ""
    # An acknowledgement: the channel it came through when not the dashboard ("PagerDuty", "Slack",
    # "the API"), and whose card it took over.
    via: str = ""
    taken_from: str = ""
    # An open card's last change of hands, in pollerdash's words ("Given back by bob"), and when.
    change: str = ""
    change_at: datetime | None = None
    # A snooze still running.
    snoozed_by: str = ""
    snoozed_until: datetime | None = None


@dataclass(frozen=True)
class Notice:
    """A message about an operation, not a card (escalations.oncall.notices): pollerdash's words,
    the operation's facts, and what the agent wrote, quoted and defanged, each channel rendering them
    in its own markup (plain text only for the agent's words)."""

    event: str  # the outbox's Event: "callback_failed" | "business_deadline_near"
    title: str  # "Callback not delivered", "Business deadline in 10 min"
    subject: str  # the email subject after "[pollerdash] ": "Callback not delivered: op_..."
    operation_id: str
    link: str  # the operation's page, first in every message
    opening: str  # the first sentence
    summary: str = ""  # one line after the link in a chat message
    paragraphs: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()  # (label, value), pollerdash's own values
    quoted_intro: str = ""  # the line before `quoted`, when it needs one
    quoted: tuple[str, ...] = ()  # what an agent wrote, each line quoted and defanged (escalations.agent_text)


def card_url(escalation: Escalation) -> str:
    return f"{settings.SITE_URL}{reverse('operation_detail', args=[escalation.operation_id])}#card-{escalation.pk}"


def card_facts(*, escalation: Escalation, now: datetime) -> CardFacts:
    """The facts of a card whose operation and provider are loaded."""
    op = escalation.operation
    card = load_card(escalation=escalation, operation=op, now=now)
    return CardFacts(
        escalation_id=escalation.pk,
        operation_id=op.pk,
        reason=escalation.reason,
        reason_label=reason_label(escalation.reason),
        detail=quoted(escalation.detail, limit=PROVIDER_TEXT_MAX),
        provider_slug=op.provider.slug,
        provider_account=op.account,
        provider_job_id=op.provider_job_id,
        purpose=op.purpose,
        requests_used=op.status_requests_used,
        max_requests=op.max_status_requests,
        deadline_at=op.deadline_at,
        business_deadline_at=op.business_deadline_at,
        opened_at=escalation.opened_at,
        card_url=card_url(escalation),
        inbox_url=f"{settings.SITE_URL}{reverse('inbox')}",
        option_labels=tuple(inert(option.label, limit=LABEL_MAX) for option in card.options),
        **_group_facts(escalation),
    )


def _group_facts(escalation: Escalation) -> dict[str, Any]:
    if escalation.group_id is None:
        return {}
    size = Escalation.objects.filter(group_id=escalation.group_id, state=Escalation.State.OPEN).count()
    if size < 2:
        return {}
    return {"group_size": size, "group_url": f"{settings.SITE_URL}{reverse('card_group', args=[escalation.group_id])}"}


# How an act's channel is named after "via" (the dashboard is the default and is not named).
VIA = {Channel.SLACK: "Slack", Channel.PAGERDUTY: "PagerDuty", Channel.API: "the API"}
HANDS = (
    CardActivity.Kind.ACKNOWLEDGED,
    CardActivity.Kind.UNACKNOWLEDGED,
    CardActivity.Kind.REASSIGNED,
    CardActivity.Kind.ACK_EXPIRED,
)


def card_status(*, escalation: Escalation, now: datetime) -> CardStatus:
    """Decided or superseded (with who and what), acknowledged (by whom, through which channel), or
    open (with its last change of hands); and a snooze still running at `now`."""
    if escalation.state == Escalation.State.DECIDED:
        decision = (
            Decision.objects.filter(escalation=escalation, outcome=Decision.Outcome.APPLIED)
            .order_by("-decided_at", "-pk")
            .first()
        )
        return CardStatus(
            "decided",
            by=decision.username if decision else "",
            at=escalation.closed_at,
            outcome=inert(escalation.closed_reason, limit=OUTCOME_MAX),
        )
    if escalation.state == Escalation.State.SUPERSEDED:
        return CardStatus(
            "superseded", at=escalation.closed_at, outcome=inert(escalation.closed_reason, limit=OUTCOME_MAX)
        )
    snooze: dict[str, Any] = {}
    if escalation.snoozed_until is not None and escalation.snoozed_until > now and escalation.snoozed_by is not None:
        snooze = {"snoozed_by": escalation.snoozed_by.get_username(), "snoozed_until": escalation.snoozed_until}
    last = CardActivity.objects.filter(escalation=escalation, kind__in=HANDS).order_by("-at", "-pk").first()
    if escalation.acknowledged_by is not None:
        acked = last if last is not None and last.kind == CardActivity.Kind.ACKNOWLEDGED else None
        return CardStatus(
            "acknowledged",
            by=escalation.acknowledged_by.get_username(),
            at=escalation.acknowledged_at,
            via=VIA.get(Channel(acked.channel), "") if acked else "",
            taken_from=acked.previous_username if acked else "",
            **snooze,
        )
    change = _change(last) if last is not None else ""
    return CardStatus("open", change=change, change_at=last.at if change and last else None, **snooze)


def _change(activity: CardActivity) -> str:
    """An open, unacknowledged card's last change of hands in words ("" for none worth showing)."""
    who = activity.username
    via = VIA.get(Channel(activity.channel), "")
    via = f" via {via}" if via else ""
    if activity.kind == CardActivity.Kind.UNACKNOWLEDGED:
        return f"Given back by {who}{via}"
    if activity.kind == CardActivity.Kind.REASSIGNED:
        return f"Handed to {activity.to_username} by {who}{via}"
    if activity.kind == CardActivity.Kind.ACK_EXPIRED and activity.until is not None:
        return f"Still undecided {human_duration(activity.at - activity.until)} after {who} acknowledged"
    return ""
