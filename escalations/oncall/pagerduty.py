"""PagerDuty Events API v2: the events pollerdash sends for a card, and what an answer means.

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

`classify` also reads the answers of Slack's webhooks and response URLs (2xx accepted; 429 and 5xx
retried; other 4xx refused for good, with the receiver's words).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

from escalations.agent_text import quoted
from escalations.oncall.facts import CardFacts

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_MAX = 1024
DEDUP_KEY_MAX = 255
BODY_MAX_BYTES = 512 * 1024
CLIENT = "pollerdash"
# custom_details carry the card's facts; agent text is capped so the event stays small and legible.
UNTRUSTED_TEXT_MAX = 500
DETAIL_MAX = 1000
ERROR_EXCERPT_MAX = 300

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


def trigger_event(*, facts: CardFacts, instance: str) -> dict:
    """The trigger for a card, without routing_key (added by `encode` at send time)."""
    # pollerdash's own words only: the summary is what pagers and phones show.
    summary = _line(f"{facts.reason_label}: {facts.provider_slug} operation {facts.operation_id} needs a decision")
    details = {
        "card_url": facts.card_url,
        "reason": facts.reason,
        # Quoted, links disabled, capped (escalations.oncall.facts): it may quote the provider.
        "why_it_stopped": _cap(_text(facts.detail), DETAIL_MAX),
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
        "decide_in": "pollerdash only: acknowledging or resolving in PagerDuty does not decide the card",
    }
    return {
        "event_action": str(Action.TRIGGER),
        "dedup_key": dedup_key(instance=instance, escalation_id=facts.escalation_id),
        "payload": {
            "summary": _cap(summary, SUMMARY_MAX),
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


# --- answers ----------------------------------------------------------------------------------------


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # recorded as failed, not retried
    RETRY = "retry"


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    http_status: int | None
    detail: str  # short, safe to store and show: never the request body or the routing key
    retry_after_s: float | None = None


def classify(
    *, status: int | None, headers: Mapping[str, str], body: bytes, transport_error: str = "", now: datetime
) -> Outcome:
    """What an answer (or its absence) means. `transport_error` is the exception's type name
    (timeouts, refused connections); those are retried like a 5xx."""
    if status is None:
        return Outcome(Verdict.RETRY, None, f"no answer ({transport_error or 'connection failed'})")
    retry_after = _retry_after(headers, now=now)
    if status == 202:
        return Outcome(Verdict.ACCEPTED, status, "accepted")
    if status == 429:
        return Outcome(Verdict.RETRY, status, "rate limited by the receiver", retry_after)
    if 500 <= status <= 599:
        return Outcome(Verdict.RETRY, status, f"receiver error HTTP {status}", retry_after)
    if 200 <= status <= 299:
        # A compatible receiver that answers 200/204 accepted the event all the same.
        return Outcome(Verdict.ACCEPTED, status, f"accepted (HTTP {status})")
    return Outcome(Verdict.REJECTED, status, _rejection(status, body))


def _rejection(status: int, body: bytes) -> str:
    """PagerDuty's 400 says why in `errors`, Slack in a short text; keep a printable excerpt of it."""
    reasons: list[str] = []
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, Mapping):
        errors = parsed.get("errors")
        if isinstance(errors, list):
            reasons = [str(e) for e in errors if isinstance(e, str | int | float)]
        elif isinstance(parsed.get("message"), str):
            reasons = [parsed["message"]]
    elif parsed is None and body and len(body) <= 200:
        # Slack answers a refused webhook post with one word: no_service, channel_is_archived...
        reasons = [body.decode("utf-8", "replace")]
    text = f"refused (HTTP {status})" + (f": {'; '.join(reasons)}" if reasons else "")
    return _cap(_text(text), ERROR_EXCERPT_MAX)


def _retry_after(headers: Mapping[str, str], *, now: datetime) -> float | None:
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit() and len(value) <= 9:
        return float(value)
    try:
        at = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        return None
    return max(0.0, (at - now).total_seconds())


def _line(text: str) -> str:
    return " ".join(_text(text).split())


def _text(text: str) -> str:
    return _CONTROL.sub("", text)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _iso(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
