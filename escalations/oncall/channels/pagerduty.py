"""The PagerDuty channel (Events API v2): the events pollerdash sends for a card, and what an answer means.

One card is one alert: `trigger` when a level names a PagerDuty target, `acknowledge` when a
responder acknowledges, `resolve` when the card is decided or superseded, all with the same
`dedup_key` (stable for the card) and the same routing key. Reference: PagerDuty developer docs,
"Send an Alert Event" and "Events API v2 Overview" (response codes and retry logic):

- 202 accepted; 400 invalid event: recorded as failed, never retried (the same body would fail
  again); 429 and 5xx, or no answer: retried with backoff. Other 4xx are treated like 400.
- summary <= 1024 characters, dedup_key <= 255, body <= 512 KB; severity is one of critical,
  error, warning, info; about 120 events a minute per routing key.

The routing key is a secret. Events are built and stored WITHOUT it (`routing_key` is added by
`encode` at send time from the environment variable the target names), so no row, log line or
export can ever hold it. The same events serve PagerDuty-compatible receivers (Grafana OnCall's
and GoAlert's integrations: docs/oncall-integrations.md).

The answers are read as every webhook's are (escalations.oncall.channels.base.answer_outcome), with
PagerDuty's `errors` kept as the reason of a refusal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from urllib.parse import urlsplit

from django.conf import settings

from escalations.agent_text import quoted
from escalations.oncall.channels.base import Message, Request, Unsendable, WebhookChannel, admit, cut, secret
from escalations.oncall.facts import CardFacts
from operations.notify.kinds import Kind
from operations.notify.rules import Event

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_MAX = 1024
DEDUP_KEY_MAX = 255
BODY_MAX_BYTES = 512 * 1024
CLIENT = "pollerdash"
# custom_details carry the card's facts; agent text is capped so the event stays small and legible.
UNTRUSTED_TEXT_MAX = 500
DETAIL_MAX = 1000

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_KEY_SAFE = re.compile(r"[^A-Za-z0-9._:/-]")


class Severity(StrEnum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


# Severity from the reason the card opened. "error": the provider or the integration is broken and
# every job on it is probably stuck; "warning": this one job needs a human choice; "info": a
# planned approval. Nothing is "critical" by default: that is the pager's urgent tier, and a team
# that wants it maps its service's rules in PagerDuty (severity is a routing input there).
SEVERITY_BY_REASON: Mapping[str, Severity] = {
    "provider_failure": Severity.ERROR,
    "integration_failure": Severity.ERROR,
    "authorization_denied": Severity.ERROR,
    # A configuration that sends a credential where it may not go: every job of the profile stops.
    "destination_not_allowed": Severity.ERROR,
    "deadline_exceeded": Severity.WARNING,
    "request_budget_exhausted": Severity.WARNING,
    "rate_limited": Severity.WARNING,
    "unknown_state": Severity.WARNING,
    "per_call_approval": Severity.INFO,
}


class Action(StrEnum):
    TRIGGER = "trigger"
    ACKNOWLEDGE = "acknowledge"
    RESOLVE = "resolve"


def dedup_key(*, instance: str, escalation_id: int) -> str:
    """Stable for the card and unique across pollerdash installations sharing a PagerDuty
    service (`instance` is the SITE_URL host unless PAGERDUTY_DEDUP_PREFIX says otherwise)."""
    key = f"pollerdash:{_KEY_SAFE.sub('-', instance)}:card:{escalation_id}"
    return key[:DEDUP_KEY_MAX]


def instance() -> str:
    """This installation's part of every dedup_key: PAGERDUTY_DEDUP_PREFIX, else SITE_URL's host."""
    return settings.PAGERDUTY_DEDUP_PREFIX or urlsplit(settings.SITE_URL).netloc or "pollerdash"


def card_of_dedup_key(key: object, *, instance: str) -> int | None:
    """The card a dedup_key (a PagerDuty incident's `incident_key`) names, when it is one this
    installation made (`dedup_key` for that card gives back exactly the same key); else None: another
    installation's card, or an incident pollerdash did not open."""
    if not isinstance(key, str) or len(key) > DEDUP_KEY_MAX:
        return None
    _, sep, number = key.rpartition(":card:")
    if not sep or not number.isascii() or not number.isdigit() or len(number) > 18:
        return None
    card = int(number)
    return card if dedup_key(instance=instance, escalation_id=card) == key else None


def trigger_event(*, facts: CardFacts, instance: str) -> dict:
    """The trigger for a card, without routing_key (added by `encode` at send time)."""
    # pollerdash's own words only: the summary is what pagers and phones show.
    summary = _line(f"{facts.reason_label}: {facts.provider_slug} operation {facts.operation_id} needs a decision")
    details = {
        "card_url": facts.card_url,
        "reason": facts.reason,
        # Quoted, links disabled, capped (escalations.oncall.facts): it may quote the provider.
        "why_it_stopped": cut(_text(facts.detail), DETAIL_MAX),
        "operation_id": facts.operation_id,
        "provider": facts.provider_slug,
        "provider_account": facts.provider_account,
        # The agent's own words, quoted and defanged as in every message to people.
        "provider_job_id_from_agent": quoted(facts.provider_job_id, limit=UNTRUSTED_TEXT_MAX),
        "purpose_from_agent": quoted(facts.purpose, limit=UNTRUSTED_TEXT_MAX) if facts.purpose else "",
        "requests_used": f"{facts.requests_used} of {facts.max_requests}",
        "deadline": _iso(facts.deadline_at),
        "business_deadline": _iso(facts.business_deadline_at),
        "options_offered": list(facts.option_labels),
        "decide_in": "pollerdash only: resolving in PagerDuty never decides the card",
    }
    return {
        "event_action": str(Action.TRIGGER),
        "dedup_key": dedup_key(instance=instance, escalation_id=facts.escalation_id),
        "payload": {
            "summary": cut(summary, SUMMARY_MAX),
            "source": f"pollerdash/{facts.provider_slug}",
            "severity": str(SEVERITY_BY_REASON.get(facts.reason, Severity.WARNING)),
            "timestamp": _iso(facts.opened_at),
            "component": facts.provider_slug,
            "group": facts.provider_account or facts.provider_slug,
            "class": facts.reason,
            "custom_details": {key: value for key, value in details.items() if value not in ("", None)},
        },
        "links": [{"href": facts.card_url, "text": "Open the decision card in pollerdash"}],
        "client": CLIENT,
        "client_url": facts.inbox_url,
    }


def follow_up_event(*, action: Action, instance: str, escalation_id: int) -> dict:
    """acknowledge or resolve: only routing_key, event_action and dedup_key are read by PagerDuty."""
    if action is Action.TRIGGER:
        raise ValueError("a trigger carries the card's facts: use trigger_event")
    return {"event_action": str(action), "dedup_key": dedup_key(instance=instance, escalation_id=escalation_id)}


def encode(event: Mapping, *, routing_key: str) -> bytes:
    """The request body, routing key included. Refuses a key that cannot be one (empty, spaces,
    control characters) without echoing it; its length is the receiver's business (PagerDuty's
    keys have 32 characters, compatible receivers differ)."""
    if (
        not routing_key
        or routing_key != routing_key.strip()
        or any(ch.isspace() or not ch.isprintable() for ch in routing_key)
    ):
        raise ValueError("the routing key is empty or has spaces or control characters")
    body = json.dumps({"routing_key": routing_key, **event}, separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > BODY_MAX_BYTES:
        raise ValueError(f"the event is {len(body)} bytes; PagerDuty accepts at most {BODY_MAX_BYTES}")
    return body


class PagerDuty(WebhookChannel):
    """trigger for a level; acknowledge and resolve follow it, in order, on the card's one alert."""

    kind = Kind.PAGERDUTY
    follow_ups = {Event.ACKNOWLEDGED: "acknowledge", Event.ENDED: "resolve"}
    one_alert_per_card = True

    def render(self, message: Message) -> Request:
        if message.card is None:
            raise Unsendable("PagerDuty is paged about cards only")
        target = admit(settings.PAGERDUTY_EVENTS_URL, what="PAGERDUTY_EVENTS_URL")
        here = instance()
        if message.event is Event.LEVEL:
            event = trigger_event(facts=message.card, instance=here)
        else:
            action = Action.ACKNOWLEDGE if message.event is Event.ACKNOWLEDGED else Action.RESOLVE
            event = follow_up_event(action=action, instance=here, escalation_id=message.card.escalation_id)
        try:
            body = encode(event, routing_key=secret(message.address))
        except ValueError as exc:
            raise Unsendable(f"{message.address}: {exc}") from None
        return Request(target=target, body=body)


def _line(text: str) -> str:
    return " ".join(_text(text).split())


def _text(text: str) -> str:
    return _CONTROL.sub("", text)


def _iso(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
