"""Telling people a card needs a decision: email and a Slack-compatible JSON webhook.

A card's notification is enqueued (django-q2, ORM broker) inside the transaction that opens it
and sent by a worker afterwards, so a slow mail server or webhook never holds a database lock and
a rolled-back escalation never notifies anyone. Reminders repeat every NOTIFY_REMINDER_S while a
card stays undecided; they only remind — nothing is ever decided by timeout.

Messages carry the facts of the card and a deep link to it, never a credential; what the agent
wrote comes after the link as quoted, defanged data (escalations.agent_text). Caps bound what
reaches people: NOTIFY_MAX_PER_CARD per card and NOTIFY_MAX_PER_HOUR in all, beyond which a
notification is counted as skipped, not sent. The webhook URL itself is a secret (it authorises
posting to a channel): it is registered with the log redactor and never logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from escalations.agent_text import one_line, quoted, slack_escaped
from operations import ratelimit
from operations.decisions.options import human_duration
from operations.models import CallbackDelivery, Decision, Escalation
from operations.redaction import register_secret
from operations.responders import responders
from operations.vocabulary import REASON_LABELS, Reason

logger = logging.getLogger(__name__)

OPENED = "opened"
REMINDER = "reminder"
# Messages to named people about a card (escalations.people_messages).
REASSIGNED = "reassigned"
TAKEN_OVER = "taken_over"
AWAITING_SECOND = "awaiting_second"
WEBHOOK_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
REMINDERS_PER_RUN = 100
SUBJECT_MAX = 180
LAST_NOTICE = (
    "This is the last message about this card (NOTIFY_MAX_PER_CARD): it stays in the inbox until someone decides."
)


def configured() -> bool:
    return bool(settings.NOTIFY_EMAILS or settings.NOTIFY_WEBHOOK_URL)


def enqueue(*, escalation_id: int, kind: str) -> None:
    """Queue the notification task; call inside the transaction that opened (or claimed) the card."""
    if not configured():
        return
    from django_q.tasks import async_task

    async_task("escalations.tasks.notify_escalation", escalation_id, kind, task_name=f"notify-{escalation_id}-{kind}")


def on_card_opened(*, escalation: Escalation, **_: object) -> None:
    """operations.events.card_opened: queue the card's first notification in the opening transaction.

    One notification per group: a card that joined an open group (same account and reason, within
    CARD_GROUP_WINDOW_S) sends none of its own; the group's first card did, and the reminders speak
    for the whole group.
    """
    group = escalation.group
    if group is not None and group.first_card_id not in (None, escalation.pk):
        return
    enqueue(escalation_id=escalation.pk, kind=OPENED)


def on_card_reassigned(*, escalation: Escalation, by: object, to: object, **_: object) -> None:
    """operations.events.card_reassigned: tell the responder the card was handed to."""
    _enqueue_personal(escalation=escalation, kind=REASSIGNED, actor=by, recipient_ids=[to.pk])  # type: ignore[attr-defined]


def on_card_acknowledged(*, escalation: Escalation, user: object, previous: object = None, **_: object) -> None:
    """operations.events.card_acknowledged: a take-over tells the person who held the card."""
    if previous is not None:
        _enqueue_personal(escalation=escalation, kind=TAKEN_OVER, actor=user, recipient_ids=[previous.pk])  # type: ignore[attr-defined]


def on_card_awaiting_second(*, escalation: Escalation, first: Decision, **_: object) -> None:
    """operations.events.card_awaiting_second: ask the other responders for the second acceptance."""
    _enqueue_personal(escalation=escalation, kind=AWAITING_SECOND, actor=first.user, recipient_ids=[])


def _enqueue_personal(*, escalation: Escalation, kind: str, actor: object, recipient_ids: list[int]) -> None:
    """Queue a message about a card to named people (and the team's webhook), with the transaction.

    Recipients are resolved by the worker (an address changed meanwhile is the one used); for
    AWAITING_SECOND they are every responder but the one who accepted, and NOTIFY_EMAILS.
    """
    from django_q.tasks import async_task

    async_task(
        "escalations.tasks.notify_people",
        escalation.pk,
        kind,
        getattr(actor, "pk", None),
        recipient_ids,
        task_name=f"notify-{escalation.pk}-{kind}",
    )


def on_callback_undeliverable(*, delivery: CallbackDelivery, reason: str, **_: object) -> None:
    """operations.events.callback_undeliverable: queue a message to on-call with the transaction."""
    if not configured():
        return
    from django_q.tasks import async_task

    async_task(
        "escalations.tasks.notify_callback_failed",
        delivery.operation_id,
        delivery.pk,
        delivery.event_type,
        reason[:300],
        task_name=f"notify-callback-{delivery.pk}",
    )


def deliver_callback_failure(*, operation_id: str, delivery_id: str, event_type: str, reason: str) -> str:
    """Tell on-call that an agent's callback endpoint gave up, by the same channels as cards.

    The reason can quote the agent's callback address: it follows pollerdash's link as quoted,
    defanged data. Counted against NOTIFY_MAX_PER_HOUR like every message to people.
    """
    if not hourly_slot():
        logger.warning(
            "operation %s: callback failure notification skipped, NOTIFY_MAX_PER_HOUR (%s) reached",
            operation_id,
            settings.NOTIFY_MAX_PER_HOUR,
        )
        return f"skipped: NOTIFY_MAX_PER_HOUR ({settings.NOTIFY_MAX_PER_HOUR}) reached"
    link = f"{settings.SITE_URL}{reverse('operation_detail', args=[operation_id])}"
    why = f"Why (may quote the agent's callback address; links disabled): {quoted(reason)}"
    text = (
        f"pollerdash could not deliver the {event_type} callback {delivery_id} of operation "
        f"{operation_id}.\n\n{link}\n\nThe agent can still read the outcome (the operation stays in "
        f"its open list until acknowledged); check the agent's callback endpoint.\n\n{why}"
    )
    message = Message(
        subject=f"[pollerdash] Callback not delivered: {operation_id}",
        text=text,
        chat=f"*Callback not delivered* for <{link}|{operation_id}>\n{slack_escaped(why)}",
        link=link,
    )
    return _send(message=message, kind="callback_failed", what=f"callback {delivery_id}")


def card_link(escalation: Escalation) -> str:
    path = reverse("operation_detail", args=[escalation.operation_id])
    return f"{settings.SITE_URL}{path}#card-{escalation.pk}"


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    chat: str  # Slack mrkdwn, with user data escaped
    link: str


def _head_and_intro(*, kind: str, waited: str, actor: str) -> tuple[str, str]:
    if kind == OPENED:
        return "Decision needed", "pollerdash stopped waiting on a job and a person must decide what happens next."
    if kind == REASSIGNED:
        return (
            f"{actor} handed you a card",
            f"{actor} handed you this card: it is yours now. Acknowledge it on the card so the others know "
            "you are on it (reminders go on until you do), or hand it on.",
        )
    if kind == TAKEN_OVER:
        return (
            f"{actor} took over your card",
            f"{actor} took this card over from you and is on it; you need do nothing more.",
        )
    if kind == AWAITING_SECOND:
        return (
            "Second responder needed",
            f"{actor} accepted the output of this operation; a second, different responder must confirm it "
            "on the card (or choose another option).",
        )
    return f"Reminder: still undecided after {waited}", f"This card has waited {waited} for a decision."


def compose(*, escalation: Escalation, kind: str, now: datetime, last: bool = False, actor: str = "") -> Message:
    """The notification for one card (escalation with operation and provider loaded).

    pollerdash's own words and link come first; what the agent wrote (job id, purpose) follows,
    each on one line, quoted and defanged (escalations.agent_text), so it can neither pose as
    pollerdash nor offer a link of its own. `last`: no more messages follow for this card.
    `actor`: the responder whose act the message is about (hand-overs, take-overs, acceptances).
    """
    op = escalation.operation
    try:
        label = REASON_LABELS[Reason(escalation.reason)]
    except ValueError:
        label = escalation.reason
    link = card_link(escalation)
    waited = human_duration(now - escalation.opened_at)
    head, intro = _head_and_intro(kind=kind, waited=waited, actor=actor)
    subject = one_line(f"[pollerdash] {head}: {label} — {op.provider.slug} ({op.pk})")[:SUBJECT_MAX]
    group_line = ""
    members = open_members(escalation)
    if members > 1:
        group_link = f"{settings.SITE_URL}{reverse('card_group', args=[escalation.group_id])}"
        subject = one_line(
            f"[pollerdash] {head}: {members} operations: {label} on {escalation.group.account}"  # type: ignore[union-attr]
        )[:SUBJECT_MAX]
        group_line = (
            f"This card is one of {members} open cards of the same outage ({label}, same provider account, "
            f"opened within minutes): see and decide them together at {group_link}"
        )
    if op.business_deadline_at is None:
        business = "none"
    elif op.business_deadline_at > now:
        business = f"{_utc(op.business_deadline_at)} (in {human_duration(op.business_deadline_at - now)})"
    else:
        business = f"{_utc(op.business_deadline_at)} (passed {human_duration(now - op.business_deadline_at)} ago)"
    job_id = f"Provider job id (from the agent): {quoted(op.provider_job_id)}"
    purpose = f"Purpose (from the agent): {quoted(op.purpose) if op.purpose else '—'}"
    closing = LAST_NOTICE if last else "The card offers bounded options only; nothing is decided by timeout."
    lines = [
        intro,
        "",
        f"Decide on the card: {link}",
        *([group_line] if group_line else []),
        "",
        f"Reason:            {label}",
        f"Why it stopped:    {one_line(escalation.detail)}",
        f"Operation:         {op.pk}",
        f"Provider:          {op.provider.slug}",
        f"Requests used:     {op.status_requests_used} of {op.max_status_requests}",
        f"Business deadline: {business}",
        f"Open since:        {_utc(escalation.opened_at)}",
        "",
        "Supplied when the job was registered, not written by pollerdash (links disabled):",
        job_id,
        purpose,
        "",
        closing,
    ]
    chat = (
        f"*{slack_escaped(head)}* — {slack_escaped(label)}: <{link}|{slack_escaped(op.pk)}>"
        f" · {slack_escaped(op.provider.slug)} · {op.status_requests_used}/{op.max_status_requests} requests"
        f" · business deadline {slack_escaped(business)}"
        f"\n{slack_escaped(purpose)} · {slack_escaped(job_id)}"
    )
    if last:
        chat += f"\n{slack_escaped(LAST_NOTICE)}"
    return Message(subject=subject, text="\n".join(lines), chat=chat, link=link)


def open_members(escalation: Escalation) -> int:
    """How many open cards the card's group has (1 for a card without a group)."""
    if escalation.group_id is None:
        return 1
    return Escalation.objects.filter(group_id=escalation.group_id, state=Escalation.State.OPEN).count()


def deliver(*, escalation_id: int, kind: str) -> str:
    """Send one card's notification by every configured channel. Returns a short outcome.

    Within the caps only: NOTIFY_MAX_PER_CARD messages per card and NOTIFY_MAX_PER_HOUR in all;
    beyond them the notification is counted on the card as skipped and nothing is sent.
    """
    escalation = Escalation.objects.select_related("operation__provider", "group").filter(pk=escalation_id).first()
    if escalation is None or escalation.state != Escalation.State.OPEN:
        return "skipped: card no longer open"
    if kind == REMINDER and escalation.acknowledged_at is not None:
        # Queued before someone acknowledged the card: they are on it, nobody is reminded.
        return "skipped: acknowledged"
    per_card = settings.NOTIFY_MAX_PER_CARD
    if per_card > 0 and escalation.notifications_sent >= per_card:
        return _skipped(escalation_id, f"NOTIFY_MAX_PER_CARD ({per_card}) reached")
    if not hourly_slot():
        return _skipped(escalation_id, f"NOTIFY_MAX_PER_HOUR ({settings.NOTIFY_MAX_PER_HOUR}) reached")
    last = per_card > 0 and escalation.notifications_sent + 1 >= per_card
    message = compose(escalation=escalation, kind=kind, now=timezone.now(), last=last)
    outcome = _send(message=message, kind=kind, what=f"escalation {escalation_id}")
    update = {"notifications_sent": F("notifications_sent") + 1}
    if kind == OPENED:
        update["last_notified_at"] = timezone.now()
    Escalation.objects.filter(pk=escalation_id).update(**update)
    return outcome


def deliver_to_people(*, escalation_id: int, kind: str, actor_id: int | None, recipient_ids: list[int]) -> str:
    """A message about a card to named people: by email to each that has an address, and to the
    team's webhook. Counted against NOTIFY_MAX_PER_HOUR; not against a card's NOTIFY_MAX_PER_CARD,
    since a person handed a card must hear of it whatever the reminders used up."""
    escalation = Escalation.objects.select_related("operation__provider", "group").filter(pk=escalation_id).first()
    if escalation is None or escalation.state != Escalation.State.OPEN:
        return "skipped: card no longer open"
    users = get_user_model().objects
    actor = users.filter(pk=actor_id).first() if actor_id is not None else None
    actor_name = actor.get_username() if actor is not None else "someone"
    if kind == AWAITING_SECOND:
        others = responders().exclude(pk=actor_id).exclude(email="").values_list("email", flat=True)
        emails = list(dict.fromkeys([*others, *settings.NOTIFY_EMAILS]))
        if actor is not None and actor.email:
            emails = [email for email in emails if email != actor.email]
    else:
        named = users.filter(pk__in=recipient_ids, is_active=True).exclude(email="")
        emails = list(named.values_list("email", flat=True))
    if not emails and not settings.NOTIFY_WEBHOOK_URL:
        return "skipped: nobody to tell (no email address, no webhook)"
    if not hourly_slot():
        return _skipped(escalation_id, f"NOTIFY_MAX_PER_HOUR ({settings.NOTIFY_MAX_PER_HOUR}) reached")
    message = compose(escalation=escalation, kind=kind, now=timezone.now(), actor=actor_name)
    if recipient_ids:
        names = ", ".join(users.filter(pk__in=recipient_ids).values_list("username", flat=True))
        message = Message(
            subject=message.subject,
            text=message.text,
            chat=f"{message.chat}\nFor: {slack_escaped(names)}",
            link=message.link,
        )
    return _send(message=message, kind=kind, what=f"escalation {escalation_id}", emails=emails)


def _send(*, message: Message, kind: str, what: str, emails: list[str] | None = None) -> str:
    """One message by every configured channel; a failed channel does not stop the other.
    `emails`: the addresses for this message (default NOTIFY_EMAILS)."""
    sent = []
    emails = list(settings.NOTIFY_EMAILS) if emails is None else emails
    if emails:
        try:
            send_mail(message.subject, message.text, settings.DEFAULT_FROM_EMAIL, emails)
            sent.append("email")
        except Exception as exc:  # noqa: BLE001 - one failed channel must not stop the other
            logger.warning("%s: notification email failed (%s)", what, type(exc).__name__)
    if settings.NOTIFY_WEBHOOK_URL and post_webhook(url=settings.NOTIFY_WEBHOOK_URL, message=message, kind=kind):
        sent.append("webhook")
    return "sent: " + (", ".join(sent) or "nothing (every channel failed)")


def hourly_slot() -> bool:
    """Take one of the NOTIFY_MAX_PER_HOUR messages to people (cards and failed callbacks alike)."""
    limit = settings.NOTIFY_MAX_PER_HOUR
    if limit <= 0:
        return True
    return ratelimit.take(key="notifications", limit=limit, window_s=3600, now=timezone.now()) is None


def _skipped(escalation_id: int, why: str) -> str:
    Escalation.objects.filter(pk=escalation_id).update(notifications_skipped=F("notifications_skipped") + 1)
    logger.warning("escalation %s: notification skipped, %s", escalation_id, why)
    return f"skipped: {why}"


def post_webhook(*, url: str, message: Message, kind: str) -> bool:
    """POST `{"text": ...}` (Slack-compatible) plus a structured copy; True on a 2xx answer."""
    register_secret(url)
    payload = {"text": message.chat, "pollerdash": {"event": f"escalation.{kind}", "url": message.link}}
    try:
        with httpx.Client(timeout=WEBHOOK_TIMEOUT, follow_redirects=False, trust_env=False) as client:
            response = client.post(url, json=payload)
    except httpx.HTTPError as exc:
        logger.warning("notification webhook failed (%s)", type(exc).__name__)
        return False
    if not 200 <= response.status_code < 300:
        logger.warning("notification webhook answered HTTP %s", response.status_code)
        return False
    return True


def enqueue_due_reminders(*, now: datetime, limit: int = REMINDERS_PER_RUN) -> int:
    """Claim open cards whose last notification is older than NOTIFY_REMINDER_S; queue a reminder each.

    The claim is a compare-and-set on `last_notified_at`, so two schedulers never remind twice.
    """
    if not configured() or settings.NOTIFY_REMINDER_S <= 0:
        return 0
    cutoff = now - timedelta(seconds=settings.NOTIFY_REMINDER_S)
    # An acknowledged card has someone on it: no reminders for it (operations.lifecycle.ownership).
    due = Escalation.objects.filter(state=Escalation.State.OPEN, acknowledged_at__isnull=True)
    if settings.NOTIFY_MAX_PER_CARD > 0:
        # A card that had its last message gets no more reminders.
        due = due.filter(notifications_sent__lt=settings.NOTIFY_MAX_PER_CARD)
    due = (
        due.filter(Q(last_notified_at__lte=cutoff) | Q(last_notified_at__isnull=True, opened_at__lte=cutoff))
        .order_by("opened_at", "pk")
        .values_list("pk", "last_notified_at", "group_id")[:limit]
    )
    queued = 0
    reminded_groups: set[int] = set()
    for pk, last, group_id in due:
        if group_id is not None and group_id in reminded_groups:
            continue
        with transaction.atomic():
            claimed = Escalation.objects.filter(pk=pk, state=Escalation.State.OPEN, last_notified_at=last).update(
                last_notified_at=now
            )
            if claimed:
                if group_id is not None:
                    # One reminder speaks for the group: its other unacknowledged cards count as
                    # reminded too, so they fall due together next time instead of one by one.
                    Escalation.objects.filter(
                        group_id=group_id, state=Escalation.State.OPEN, acknowledged_at__isnull=True
                    ).exclude(pk=pk).update(last_notified_at=now)
                    reminded_groups.add(group_id)
                enqueue(escalation_id=pk, kind=REMINDER)
                queued += 1
    return queued


def _utc(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")
