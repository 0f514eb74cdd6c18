"""Sending one notification row (the worker's task): render it for its channel, send it once, record it.

Channels: email (text + HTML), a Slack incoming webhook (Block Kit), a Slack channel through the
Slack app (posted, then updated in place by follow-ups), PagerDuty Events API v2 (trigger,
acknowledge, resolve), and the answer to a click in Slack (its response_url).

Every row ends sent, failed or skipped, with its reason: a receiver's 400 (or another 4xx) is
failed and not retried; 429, 5xx and no answer are retried on the schedule of
operations.notify.rules; a message to people beyond NOTIFY_MAX_PER_CARD or an hourly cap
(escalations.oncall.caps) is skipped, not sent (follow-ups that close what was sent are never held
back, nor are a new card's first page and PagerDuty triggers by the hourly caps).

Secrets (webhook URLs, routing keys, the bot token) are read from the environment variables the
targets name, at send time, registered with the log scrubber before use, and never stored: a
row's `detail` is the outcome in words, scrubbed again before it is written.
"""

from __future__ import annotations

import json
import logging
import os
import smtplib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db.models import F
from django.utils import timezone

from escalations.oncall import caps, email, outbox, pagerduty, slack_blocks, transport
from escalations.oncall.facts import CardFacts, CardStatus, card_facts, card_status
from operations.decisions.options import human_duration
from operations.models import Escalation, NotificationDelivery, PolicyRun
from operations.notify.policy import ENV_PREFIX
from operations.notify.recipients import Channel
from operations.notify.store import LEGACY_WEBHOOK_ENV
from operations.redaction import redact, register_secret

logger = logging.getLogger(__name__)

Event = NotificationDelivery.Event
State = NotificationDelivery.State
Verdict = pagerduty.Verdict
# Messages that reach people (and count against the caps), as opposed to follow-ups of a stream.
TO_PEOPLE = frozenset({Event.LEVEL, Event.REASSIGNED, Event.TAKEN_OVER, Event.AWAITING_SECOND})
SLACK_RESPONSE_HOSTS = frozenset({"hooks.slack.com"})
FOLLOWED_UP = frozenset({Channel.PAGERDUTY, Channel.SLACK_CHANNEL})


class Unsendable(Exception):
    """The row cannot be sent as configured (a missing variable, a refused URL): failed, not retried."""


@dataclass(frozen=True)
class Sent:
    outcome: pagerduty.Outcome
    provider_ref: str = ""


def deliver(*, delivery_id: int, attempt: int) -> str:
    """Send attempt `attempt` (0-based) of one row, at most once. Returns what happened."""
    now = timezone.now()
    if not outbox.charge(delivery_id=delivery_id, attempt=attempt, now=now):
        return "stale"
    row = NotificationDelivery.objects.select_related("escalation__operation__provider", "caused_by").get(
        pk=delivery_id
    )
    escalation = row.escalation
    if row.event in TO_PEOPLE:
        held = _held_back(row, escalation=escalation, now=now)
        if held:
            _count(escalation.pk, skipped=True)
            outbox.finish(delivery=row, state=State.SKIPPED, detail=held, now=now)
            logger.info("notification %s (card %s) skipped: %s", row.pk, escalation.pk, held)
            return "skipped"
    try:
        sent = _send(row, escalation=escalation, now=now)
    except Unsendable as exc:
        outbox.finish(delivery=row, state=State.FAILED, detail=redact(str(exc)), now=now)
        logger.warning("notification %s (card %s, %s) failed: %s", row.pk, escalation.pk, row.display, exc)
        return "failed"
    outcome = sent.outcome
    detail = redact(outcome.detail)
    if outcome.verdict is Verdict.ACCEPTED:
        outbox.finish(
            delivery=row,
            state=State.SENT,
            detail=detail,
            now=now,
            http_status=outcome.http_status,
            provider_ref=sent.provider_ref,
        )
        if row.event in TO_PEOPLE:
            _count(escalation.pk, skipped=False)
        logger.debug("notification %s (card %s, %s %s): sent", row.pk, escalation.pk, row.event, row.display)
        return "sent"
    if outcome.verdict is Verdict.REJECTED:
        outbox.finish(delivery=row, state=State.FAILED, detail=detail, now=now, http_status=outcome.http_status)
        logger.warning("notification %s (card %s, %s) failed: %s", row.pk, escalation.pk, row.display, detail)
        return "failed"
    result = outbox.retry_later(
        delivery=row, detail=detail, now=now, http_status=outcome.http_status, retry_after_s=outcome.retry_after_s
    )
    logger.info("notification %s (card %s, %s): %s (%s)", row.pk, escalation.pk, row.display, result, detail)
    return result


def _held_back(row: NotificationDelivery, *, escalation: Escalation, now: datetime) -> str:
    """Why a message to people is not sent after all (closed, acknowledged, a cap), or ""."""
    if escalation.state != Escalation.State.OPEN:
        return "the card was closed before it was sent"
    if row.event == Event.LEVEL and row.channel not in FOLLOWED_UP:
        # A retry still due when someone acknowledged: nobody needs it any more. A PagerDuty
        # trigger or a Slack-app post goes out all the same, since its acknowledge follows it.
        status = PolicyRun.objects.filter(pk=escalation.pk).values_list("status", flat=True).first()
        if status == PolicyRun.Status.ACKNOWLEDGED:
            return "acknowledged before it was sent"
    per_card = settings.NOTIFY_MAX_PER_CARD
    if per_card > 0 and _sent_to_people(escalation.pk) >= per_card:
        return f"NOTIFY_MAX_PER_CARD ({per_card}) reached"
    return caps.hold(row, now=now)


def _sent_to_people(escalation_id: int) -> int:
    return NotificationDelivery.objects.filter(
        escalation_id=escalation_id, state=State.SENT, event__in=sorted(TO_PEOPLE)
    ).count()


def _count(escalation_id: int, *, skipped: bool) -> None:
    field = "notifications_skipped" if skipped else "notifications_sent"
    Escalation.objects.filter(pk=escalation_id).update(**{field: F(field) + 1})


def _send(row: NotificationDelivery, *, escalation: Escalation, now: datetime) -> Sent:
    facts = card_facts(escalation=escalation, now=now)
    channel = Channel(row.channel)
    if channel is Channel.EMAIL:
        return Sent(_email(row, facts=facts, now=now))
    if channel is Channel.PAGERDUTY:
        return Sent(_pagerduty(row, facts=facts, now=now))
    if channel is Channel.SLACK_WEBHOOK:
        return Sent(_slack_webhook(row, facts=facts, now=now))
    if channel is Channel.SLACK_CHANNEL:
        return _slack_channel(row, facts=facts, escalation=escalation, now=now)
    return Sent(_slack_reply(row, facts=facts, escalation=escalation, now=now))


# --- email ---------------------------------------------------------------------------------------------


def _email(row: NotificationDelivery, *, facts: CardFacts, now: datetime) -> pagerduty.Outcome:
    per_card = settings.NOTIFY_MAX_PER_CARD
    message = email.card_email(
        facts=facts,
        first=(row.round, row.level, row.repetition) == (0, 0, 0),
        now=now,
        last=row.event == Event.LEVEL and per_card > 0 and _sent_to_people(row.escalation_id) + 1 >= per_card,
        head=_note(row)[0],
        intro=_note(row)[1],
    )
    mail = EmailMultiAlternatives(message.subject, message.text, settings.DEFAULT_FROM_EMAIL, [row.address])
    mail.attach_alternative(message.html, "text/html")
    try:
        mail.send()
    except smtplib.SMTPRecipientsRefused:
        return pagerduty.Outcome(Verdict.REJECTED, None, "the mail server refused the address")
    except smtplib.SMTPResponseException as exc:
        words = f"the mail server answered {exc.smtp_code}"
        verdict = Verdict.REJECTED if exc.smtp_code >= 500 else Verdict.RETRY
        return pagerduty.Outcome(verdict, None, words)
    except (OSError, smtplib.SMTPException) as exc:
        return pagerduty.Outcome(Verdict.RETRY, None, f"mail not sent ({type(exc).__name__})")
    return pagerduty.Outcome(Verdict.ACCEPTED, None, "sent")


# --- PagerDuty -------------------------------------------------------------------------------------------


def _pagerduty(row: NotificationDelivery, *, facts: CardFacts, now: datetime) -> pagerduty.Outcome:
    url = settings.PAGERDUTY_EVENTS_URL
    problem = transport.url_problem(url, what="PAGERDUTY_EVENTS_URL")
    if problem:
        raise Unsendable(problem)
    instance = settings.PAGERDUTY_DEDUP_PREFIX or urlsplit(settings.SITE_URL).netloc or "pollerdash"
    if row.event == Event.LEVEL:
        event = pagerduty.trigger_event(facts=facts, instance=instance)
    else:
        action = pagerduty.Action.ACKNOWLEDGE if row.event == Event.ACKNOWLEDGED else pagerduty.Action.RESOLVE
        event = pagerduty.follow_up_event(action=action, instance=instance, escalation_id=facts.escalation_id)
    try:
        body = pagerduty.encode(event, routing_key=secret(row.address))
    except ValueError as exc:
        raise Unsendable(f"{row.address}: {exc}") from None
    answer = transport.post(url, body=body, headers={"Content-Type": "application/json"})
    return _classified(answer, now=now)


def _classified(answer: transport.Answer, *, now: datetime) -> pagerduty.Outcome:
    return pagerduty.classify(
        status=answer.status,
        headers=answer.headers,
        body=answer.body,
        transport_error=answer.transport_error,
        now=now,
    )


# --- Slack ------------------------------------------------------------------------------------------------


def _note(row: NotificationDelivery) -> tuple[str, str]:
    """A message outside the levels: its head (the subject's start) and its first sentence."""
    head, _, intro = row.note.partition("\n")
    return head, intro


def _head(row: NotificationDelivery, *, facts: CardFacts, now: datetime) -> str:
    if row.note:
        return _note(row)[0]
    if (row.round, row.level, row.repetition) == (0, 0, 0):
        return "Decision needed"
    return f"Still undecided after {human_duration(now - facts.opened_at)}"


def _slack_webhook(row: NotificationDelivery, *, facts: CardFacts, now: datetime) -> pagerduty.Outcome:
    url = secret(row.address)
    problem = transport.url_problem(url, what=f"the Slack webhook in {row.address}")
    if problem:
        raise Unsendable(problem)
    message = slack_blocks.card_message(
        facts=facts,
        status=CardStatus("open"),
        interactive=bool(settings.SLACK_SIGNING_SECRET),
        head=_head(row, facts=facts, now=now),
    )
    if row.address == LEGACY_WEBHOOK_ENV:
        # Receivers of the webhook before Block Kit may read this structured copy.
        kind = "opened" if (row.round, row.level, row.repetition) == (0, 0, 0) else "reminder"
        message["pollerdash"] = {"event": f"escalation.{kind}", "url": facts.card_url}
    answer = transport.post(url, body=json.dumps(message).encode(), headers={"Content-Type": "application/json"})
    return _classified(answer, now=now)


def _slack_channel(row: NotificationDelivery, *, facts: CardFacts, escalation: Escalation, now: datetime) -> Sent:
    """chat.postMessage for a level; chat.update of the latest post of the stream for a follow-up."""
    token = settings.SLACK_BOT_TOKEN
    if not token:
        raise Unsendable("slack_channel needs SLACK_BOT_TOKEN, which is not set")
    register_secret(token)
    if row.event == Event.LEVEL:
        message = slack_blocks.card_message(
            facts=facts,
            status=CardStatus("open"),
            interactive=bool(settings.SLACK_SIGNING_SECRET),
            head=_head(row, facts=facts, now=now),
        )
        method, payload = "chat.postMessage", {"channel": row.address, **message}
    else:
        post = (
            NotificationDelivery.objects.filter(
                escalation_id=row.escalation_id,
                channel=row.channel,
                address=row.address,
                event=Event.LEVEL,
                state=State.SENT,
            )
            .exclude(provider_ref="")
            .order_by("-pk")
            .first()
        )
        if post is None:
            return Sent(pagerduty.Outcome(Verdict.REJECTED, None, "no message of this card to update"))
        channel, _, ts = post.provider_ref.partition("/")
        message = slack_blocks.card_message(facts=facts, status=card_status(escalation=escalation), interactive=False)
        method, payload = "chat.update", {"channel": channel, "ts": ts, **message}
    url = f"{settings.SLACK_API_URL}/{method}"
    problem = transport.url_problem(url, what="SLACK_API_URL")
    if problem:
        raise Unsendable(problem)
    answer = transport.post(
        url,
        body=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json; charset=utf-8", "Authorization": f"Bearer {token}"},
    )
    if answer.status != 200:
        return Sent(_classified(answer, now=now))
    try:
        reply = json.loads(answer.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        reply = None
    if not isinstance(reply, dict):
        return Sent(pagerduty.Outcome(Verdict.RETRY, 200, f"{method} answered something that is not JSON"))
    if not reply.get("ok"):
        error = str(reply.get("error") or "unknown error")[:100]
        verdict = (
            Verdict.RETRY if error in ("ratelimited", "internal_error", "service_unavailable") else Verdict.REJECTED
        )
        return Sent(pagerduty.Outcome(verdict, 200, f"{method} refused: {error}"))
    ref = f"{reply.get('channel') or payload['channel']}/{reply.get('ts') or payload.get('ts', '')}"
    return Sent(pagerduty.Outcome(Verdict.ACCEPTED, 200, f"{method}: ok"), provider_ref=ref)


def _slack_reply(
    row: NotificationDelivery, *, facts: CardFacts, escalation: Escalation, now: datetime
) -> pagerduty.Outcome:
    if not row.response_url:
        raise Unsendable("the click's response_url is gone")
    problem = response_url_problem(row.response_url)
    if problem:
        raise Unsendable(problem)
    if row.note == "replace":
        body = slack_blocks.replacement(facts=facts, status=card_status(escalation=escalation))
    else:
        body = slack_blocks.ephemeral(row.note)
    answer = transport.post(
        row.response_url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    return _classified(answer, now=now)


def response_url_problem(url: str) -> str | None:
    """A click's response_url is Slack's (https://hooks.slack.com/...) or a listed local receiver."""
    problem = transport.url_problem(url, what="the response_url")
    if problem:
        return problem
    parts = urlsplit(url)
    listed = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    if parts.hostname in SLACK_RESPONSE_HOSTS or listed in settings.NOTIFY_ALLOWED_HOSTS:
        return None
    return "the response_url is not on hooks.slack.com"


# --- secrets -----------------------------------------------------------------------------------------------


def secret(name: str) -> str:
    """The value of a target's variable (NAME, or the file NAME_FILE names), read now and scrubbed from
    every log line from then on. Only ONCALL_* variables, and the legacy NOTIFY_WEBHOOK_URL setting."""
    if name == LEGACY_WEBHOOK_ENV:
        value = settings.NOTIFY_WEBHOOK_URL
    elif not name.startswith(ENV_PREFIX) or name.endswith("_FILE"):
        raise Unsendable(f"{name} is not an {ENV_PREFIX} variable")
    else:
        path = os.environ.get(f"{name}_FILE")
        try:
            value = Path(path).read_text().strip() if path else os.environ.get(name, "")
        except (OSError, UnicodeDecodeError):
            value = ""
    if not value:
        raise Unsendable(f"{name} is not set")
    register_secret(value)
    return value
