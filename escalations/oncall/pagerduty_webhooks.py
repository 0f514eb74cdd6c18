"""PagerDuty v3 webhooks: is the request PagerDuty's, which event, about which card, by whom.

Pure: the view (escalations.views.pagerduty) reads the request and the accounts, and
escalations.oncall.pagerduty_acts acts on what these functions decide.

Signature (PagerDuty developer docs, "Verifying Signatures"): `X-PagerDuty-Signature` holds one or
more `v1=<hex>` separated by commas, each the HMAC-SHA256 of the raw body with one of the
subscription's secrets (two during a rotation); the request is PagerDuty's when at least one of them
is the HMAC with one of the secrets pollerdash holds (PAGERDUTY_WEBHOOK_SECRETS, also several during
a rotation), compared in constant time. The body is never parsed before that.

Unlike Slack's, the signature carries no timestamp: a captured request stays valid for as long as
its secret. Replays are refused by the event's id (escalations.oncall.pagerduty_replays), and an
event older than REPLAY_KEEP (its own signed `occurred_at`) is refused outright, so the table of
seen ids needs to keep only that long.

Identity. The v3 payload names who acted as `event.agent`, a reference (`id`, `type`,
`summary` — the name —, `html_url`, `self`) without an email. The email comes from
PAGERDUTY_USER_EMAILS (PagerDuty user id → email, written by the operator), and that email is
matched to exactly one active pollerdash account, like Slack's confirmed email. An agent that is
not a user (`service_reference`, an integration: pollerdash's own Events API acknowledge and
resolve come back this way) is nobody to act as.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

BODY_MAX = 64 * 1024
SIGNATURES_MAX = 10
REPLAY_KEEP = timedelta(days=2)
# Ahead of this machine's clock by more than this, an event is refused (its id would be kept too long).
CLOCK_SKEW = timedelta(minutes=10)
EVENT_ID_MAX = 100
ACKNOWLEDGED, UNACKNOWLEDGED, RESOLVED = "incident.acknowledged", "incident.unacknowledged", "incident.resolved"
ACTED_ON = frozenset({ACKNOWLEDGED, UNACKNOWLEDGED, RESOLVED})
# How refusals are counted on /system/ (SlackRefusal rows, this prefix before the reason).
REFUSAL_PREFIX = "pagerduty:"


class Refusal(StrEnum):
    MISSING_SIGNATURE = "missing_signature"
    BAD_SIGNATURE = "bad_signature"
    TOO_LARGE = "too_large"


def signature(*, secret: str, body: bytes) -> str:
    """One `v1=` signature as PagerDuty sends it."""
    return "v1=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(*, secrets: Sequence[str], body: bytes, header: str | None) -> Refusal | None:
    """None when one of the header's v1 signatures is the body's HMAC with one of `secrets`."""
    if len(body) > BODY_MAX:
        return Refusal.TOO_LARGE
    if not header or not header.strip():
        return Refusal.MISSING_SIGNATURE
    given = [part.strip() for part in header.split(",")[:SIGNATURES_MAX]]
    expected = [signature(secret=secret, body=body) for secret in secrets if secret]
    # Every pair compared, in constant time each: how many matched, not where, decides.
    matched = False
    for candidate in given:
        for wanted in expected:
            matched |= hmac.compare_digest(candidate.encode("utf-8", "replace"), wanted.encode())
    return None if matched else Refusal.BAD_SIGNATURE


@dataclass(frozen=True)
class Agent:
    """Who acted in PagerDuty: a user reference (type `user_reference`) or something else."""

    id: str
    type: str
    summary: str

    @property
    def is_user(self) -> bool:
        return self.type == "user_reference" and bool(self.id)

    @property
    def identity(self) -> str:
        """What an act records as the identity PagerDuty verified: "pagerduty:PLH1HKV"."""
        return f"pagerduty:{self.id}" if self.id else "pagerduty"

    @property
    def name(self) -> str:
        return self.summary or self.id or "PagerDuty"


@dataclass(frozen=True)
class WebhookEvent:
    id: str
    type: str
    occurred_at: datetime
    agent: Agent
    incident_key: str
    incident_url: str


def _text(value: object, limit: int) -> str:
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""


def parse_event(*, body: bytes) -> WebhookEvent | str:
    """The event of a verified body, or why pollerdash cannot read it (answered 200: PagerDuty
    would only send it again). Never raises on odd input."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "the body is not JSON"
    event = payload.get("event") if isinstance(payload, dict) else None
    if not isinstance(event, dict):
        return "the body has no event"
    event_id = event.get("id")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= EVENT_ID_MAX or not event_id.isprintable():
        return "the event has no usable id"
    try:
        occurred_at = datetime.fromisoformat(str(event.get("occurred_at")).replace("Z", "+00:00"))
    except ValueError:
        return "the event has no usable occurred_at"
    if occurred_at.tzinfo is None:
        return "the event's occurred_at has no time zone"
    agent = given if isinstance(given := event.get("agent"), dict) else {}
    data = given if isinstance(given := event.get("data"), dict) else {}
    key = data.get("incident_key")
    return WebhookEvent(
        id=event_id,
        type=_text(event.get("event_type"), 100),
        occurred_at=occurred_at.astimezone(UTC),
        agent=Agent(
            id=_text(agent.get("id"), 40), type=_text(agent.get("type"), 60), summary=_text(agent.get("summary"), 100)
        ),
        incident_key=key if isinstance(key, str) else "",
        incident_url=_text(data.get("html_url"), 500),
    )


def too_old_or_early(*, event: WebhookEvent, now: datetime) -> bool:
    """An event older than REPLAY_KEEP (its id may be forgotten already) or from the future."""
    return event.occurred_at < now - REPLAY_KEEP or event.occurred_at > now + CLOCK_SKEW


# --- who acted -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    username: str
    email: str
    is_active: bool
    is_responder: bool


@dataclass(frozen=True)
class Matched:
    username: str


@dataclass(frozen=True)
class NotMatched:
    """Written on the card as a notice; nothing changes."""

    why: str


def email_of(*, agent: Agent, emails: Mapping[str, str]) -> str:
    return emails.get(agent.id, "") if agent.is_user else ""


def match_agent(*, agent: Agent, email: str, accounts: Sequence[Account]) -> Matched | NotMatched:
    """Exactly one active account with the email PAGERDUTY_USER_EMAILS gives the PagerDuty user,
    with the responder role; anything else is refused, never guessed (`accounts`: those with that
    email, any case)."""
    who = f"{agent.name} ({agent.id})"
    if not email:
        return NotMatched(f"PagerDuty user {who} is not in PAGERDUTY_USER_EMAILS, so pollerdash cannot tell who it is")
    same = [a for a in accounts if a.email.strip().lower() == email and a.is_active]
    if not same:
        return NotMatched(f"no active pollerdash account uses the email of PagerDuty user {who}")
    if len(same) > 1:
        return NotMatched(f"several pollerdash accounts use the email of PagerDuty user {who}")
    if not same[0].is_responder:
        return NotMatched(f"{same[0].username} (PagerDuty user {who}) can read cards but not acknowledge them")
    return Matched(same[0].username)
