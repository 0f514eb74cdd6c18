"""What a channel is: it renders a message for an event from the facts, sends it through the one
outbound HTTP module (or the mail backend), and says what the receiver's answer means.

- `Message`: one notification row as every channel reads it, built once by the sender
  (escalations.oncall.messages): pollerdash's head and first sentence, the card's facts (or the
  facts of a message about no card), where the card stands now, and for a follow-up the reference
  of the message it updates in place.
- `Channel`: `deliver(message) -> Outcome`, plus what the rules need to know of it: the follow-ups
  it sends after a level (PagerDuty's acknowledge and resolve, a Slack post updated in place) and
  whether its receiver folds a card's repeated pages into one alert.
- `WebhookChannel`: a channel that POSTs JSON: `render` the request, sent by `outbound.send`
  (purpose `oncall`), its answer read by `answer_outcome`: 2xx sent; 429 (with Retry-After) and
  5xx and no answer retried; any other 4xx failed for good, with the receiver's own words.
- `admit`: on-call's address rule (https, unless the host:port is in NOTIFY_ALLOWED_HOSTS);
  `secret`: a target's ONCALL_ variable, read at send time and scrubbed from every log line.
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from escalations.oncall.facts import CardFacts, CardStatus, Notice
from operations.infrastructure import outbound
from operations.infrastructure.redaction import register_secret
from operations.notify.kinds import Kind
from operations.notify.policy import ENV_PREFIX
from operations.notify.rules import Event
from operations.notify.store import LEGACY_WEBHOOK_ENV

ERROR_EXCERPT_MAX = 300
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class Verdict(StrEnum):
    SENT = "sent"
    RETRY = "retry"
    FAILED = "failed"  # refused for good: recorded as failed, never retried


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    http_status: int | None
    detail: str  # short, safe to store and show: never a body, a URL or a secret
    retry_after_s: float | None = None
    # What updating this message in place later needs (a Slack-app post: "channel/ts").
    provider_ref: str = ""


class Unsendable(outbound.Refused):
    """The row cannot be sent as configured (a missing variable, a refused URL): failed, not retried."""


@dataclass(frozen=True)
class Message:
    """One row to send, as its channel renders it."""

    event: Event
    # An email address, a channel id, or the NAME of the variable holding a webhook URL or a key.
    address: str
    head: str  # pollerdash's words: "Decision needed", "Still undecided after 12 min", "alice handed you a card"
    intro: str  # the first sentence of a message outside the levels, in pollerdash's words ("" otherwise)
    first: bool  # a new card's (or group's) first page
    last: bool  # no more messages to people follow for this card (NOTIFY_MAX_PER_CARD)
    now: datetime
    card: CardFacts | None = None  # None: a message about no card
    notice: Notice | None = None  # a message about no card (a callback that gave up, a business deadline)
    status: CardStatus = field(default_factory=lambda: CardStatus("open"))  # where the card stands now
    updates: str = ""  # a follow-up: the provider_ref of the message it updates in place
    response_url: str = ""  # the answer to a click in Slack: where it goes
    note: str = ""  # the row's own words (the answer to a click: "replace" or its text)


class Channel(ABC):
    """One kind of receiver (operations.notify.kinds.Kind), registered in escalations.oncall.channels.registry."""

    kind: ClassVar[Kind]
    # Events sent after a level on the same stream, with how the card lists each; empty: none.
    follow_ups: ClassVar[Mapping[Event, str]] = {}
    # The receiver folds a card's repeated pages into one alert (PagerDuty's dedup_key), so they
    # cannot flood it: its pages are never held back by an hourly cap.
    one_alert_per_card: ClassVar[bool] = False

    @abstractmethod
    def deliver(self, message: Message) -> Outcome:
        """Send the message once; Unsendable when it cannot be sent as configured."""


@dataclass(frozen=True)
class Request:
    target: outbound.Target
    body: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


class WebhookChannel(Channel):
    """A channel that POSTs JSON and reads the answer the common way (override `outcome` otherwise)."""

    @abstractmethod
    def render(self, message: Message) -> Request:
        """The request for the message; Unsendable when it cannot be sent as configured."""

    def deliver(self, message: Message) -> Outcome:
        request = self.render(message)
        answer = outbound.send(target=request.target, method="POST", content=request.body, headers=request.headers)
        return self.outcome(answer, message=message)

    def outcome(self, answer: outbound.Answer, *, message: Message) -> Outcome:
        return answer_outcome(answer, now=message.now)


def json_request(target: outbound.Target, payload: object) -> Request:
    return Request(target=target, body=json.dumps(payload).encode())


# --- answers --------------------------------------------------------------------------------------------


def answer_outcome(answer: outbound.Answer, *, now: datetime) -> Outcome:
    """What an answer (or its absence) means: 2xx sent; 429 and 5xx retried (Retry-After honoured);
    any other status refused for good; no answer (a timeout, a refused connection) retried."""
    status = answer.http_status
    if answer.transport_error is not None or status is None:
        return Outcome(Verdict.RETRY, None, f"no answer ({answer.error_type or 'connection failed'})")
    retry_after = retry_after_s(answer.header("retry-after"), now=now)
    if status == 202:
        return Outcome(Verdict.SENT, status, "accepted")
    if 200 <= status <= 299:
        return Outcome(Verdict.SENT, status, f"accepted (HTTP {status})")
    if status == 429:
        return Outcome(Verdict.RETRY, status, "rate limited by the receiver", retry_after)
    if 500 <= status <= 599:
        return Outcome(Verdict.RETRY, status, f"receiver error HTTP {status}", retry_after)
    return Outcome(Verdict.FAILED, status, rejection(status, answer.body or b""))


def rejection(status: int, body: bytes) -> str:
    """A refusal in the receiver's own words, when it gives them: PagerDuty's `errors`, a `message`,
    an `error` (a string, or {"code", "message"}), or Slack's one word in plain text."""
    reasons: list[str] = []
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, Mapping):
        errors, error = parsed.get("errors"), parsed.get("error")
        if isinstance(errors, list):
            reasons = [str(e) for e in errors if isinstance(e, str | int | float)]
        elif isinstance(parsed.get("message"), str):
            reasons = [parsed["message"]]
        elif isinstance(error, Mapping):
            reasons = [str(error[key]) for key in ("code", "message") if isinstance(error.get(key), str)]
        elif isinstance(error, str):
            reasons = [error]
    elif parsed is None and body and len(body) <= 200:
        # Slack answers a refused webhook post with one word: no_service, channel_is_archived...
        reasons = [body.decode("utf-8", "replace")]
    text = f"refused (HTTP {status})" + (f": {'; '.join(reasons)}" if reasons else "")
    return cut(_CONTROL.sub("", text), ERROR_EXCERPT_MAX)


def retry_after_s(value: str | None, *, now: datetime) -> float | None:
    """Retry-After in seconds (a number, or an HTTP date), or None."""
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


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- where, and with what secret --------------------------------------------------------------------------


def admit(url: str, *, what: str, purpose: outbound.Purpose = outbound.Purpose.ONCALL) -> outbound.Target:
    """On-call's address rule: https, unless its host:port is in NOTIFY_ALLOWED_HOSTS (a receiver on
    this machine or network). The URL may itself be a secret (a webhook): never quoted, `what` names it."""
    problem = url_problem(url, what=what)
    if problem:
        raise Unsendable(problem)
    return outbound.Target(purpose=purpose, url=url)


def url_problem(url: str, *, what: str) -> str | None:
    """Why on-call will not POST to `url`, in words that do not quote it; None: it may."""
    try:
        parts = urlsplit(url)
        listed = host_port(url)  # reads the port: ValueError when it is not one
    except ValueError:
        return f"{what} is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{what} is not an http(s) URL"
    if parts.username or parts.password:
        return f"{what} carries a user name or password"
    if listed in settings.NOTIFY_ALLOWED_HOSTS:
        return None
    if parts.scheme != "https":
        return f"{what} must be https (or its host:port listed in NOTIFY_ALLOWED_HOSTS)"
    return None


def host_port(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def secret(name: str) -> str:
    """The value of a target's variable (NAME, or the file NAME_FILE names), read now and scrubbed from
    every log line and stored text from then on. Only ONCALL_* variables, and the legacy
    NOTIFY_WEBHOOK_URL setting. A webhook URL's secret is also a part of it (a Slack hook's token, a
    Teams workflow's `sig`), which a receiver may quote back alone: those parts are scrubbed too."""
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
    for part in _url_parts(value):
        register_secret(part)
    return value


# Shorter parts of a URL are words ("services", "invoke", an API version), not secrets.
SECRET_PART_MIN = 16


def _url_parts(value: str) -> list[str]:
    """The path segments and query values of a URL long enough to be a token; [] for anything else."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return []
    if parts.scheme not in ("http", "https"):
        return []
    pieces = [*parts.path.split("/"), *(v for values in parse_qs(parts.query).values() for v in values)]
    return [piece for piece in pieces if len(piece) >= SECRET_PART_MIN]
