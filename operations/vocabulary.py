"""The fixed words of docs/DESIGN.md: statuses, escalation reasons, delay sources, cancel states.

Plain string enums with no Django import, so pure decision code and the standalone client can
share them; model fields use `choices_of(...)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

# Never part of a text field: C0/C1 controls other than tab, newline and carriage return, and the
# bidirectional embeddings, overrides and isolates that make text read differently from what it
# holds ("Trojan Source"); ordinary right-to-left text needs none of them.
_HIDDEN = r"\x7f-\x9f\u202a-\u202e\u2066-\u2069"
CONTROL_CHARACTERS = re.compile(rf"[\x00-\x08\x0b\x0c\x0e-\x1f{_HIDDEN}]")
# ...and in a one-line value (names, states, job ids), no tab or line break either.
ONE_LINE_CONTROL_CHARACTERS = re.compile(rf"[\x00-\x1f{_HIDDEN}]")


class Status(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    NEEDS_ATTENTION = "needs_attention"
    SUCCEEDED = "succeeded"
    PARTIALLY_SUCCEEDED = "partially_succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    CLOSED = "closed"


TERMINAL_STATUSES = frozenset(
    {
        Status.SUCCEEDED,
        Status.PARTIALLY_SUCCEEDED,
        Status.FAILED,
        Status.CANCELLED,
        Status.EXPIRED,
        Status.CLOSED,
    }
)
POLLABLE_STATUSES = frozenset({Status.PENDING, Status.RUNNING})
NOT_DONE_STATUSES = frozenset({Status.PENDING, Status.RUNNING, Status.NEEDS_ATTENTION})


class Reason(StrEnum):
    """Why pollerdash stopped and handed an operation to a human (docs/DESIGN.md section 7)."""

    DEADLINE_EXCEEDED = "deadline_exceeded"
    REQUEST_BUDGET_EXHAUSTED = "request_budget_exhausted"
    RATE_LIMITED = "rate_limited"
    UNKNOWN_STATE = "unknown_state"
    AUTHORIZATION_DENIED = "authorization_denied"
    PROVIDER_FAILURE = "provider_failure"
    INTEGRATION_FAILURE = "integration_failure"
    PER_CALL_APPROVAL = "per_call_approval"
    # The business deadline (when the result stops being useful) passed before the job finished and
    # before the technical deadline: a person decides whether the result is still wanted.
    BUSINESS_DEADLINE_PASSED = "business_deadline_passed"
    # pollerdash refused to send the request: the profile's URL is not where its credential may go
    # (PROVIDER_CREDENTIAL_ORIGINS), or, without a credential, not a public address. Nothing was sent
    # and nothing charged; an operator or an admin fixes the configuration.
    DESTINATION_NOT_ALLOWED = "destination_not_allowed"


REASON_LABELS = {
    Reason.DEADLINE_EXCEEDED: "Deadline exceeded",
    Reason.REQUEST_BUDGET_EXHAUSTED: "Request budget spent",
    Reason.RATE_LIMITED: "Rate limited",
    Reason.UNKNOWN_STATE: "Unknown provider state",
    Reason.AUTHORIZATION_DENIED: "Credential denied",
    Reason.PROVIDER_FAILURE: "Provider failing",
    Reason.INTEGRATION_FAILURE: "Integration failure",
    Reason.PER_CALL_APPROVAL: "Approval needed",
    Reason.BUSINESS_DEADLINE_PASSED: "Business deadline passed",
    Reason.DESTINATION_NOT_ALLOWED: "Destination not allowed",
}


class DelaySource(StrEnum):
    PROVIDER_RETRY_AFTER = "provider_retry_after"
    PROVIDER_POLL_HINT = "provider_poll_hint"
    LOCAL_BACKOFF = "local_backoff"
    MANUAL_EXTENSION = "manual_extension"


class CancelState(StrEnum):
    """How far a cancel at the provider got (Operation.cancel_state, the card's cancel answer)."""

    REQUESTED = "requested"  # decided (agent cancel or a card), not sent yet
    FORWARDING = "forwarding"  # a worker claimed it and is sending it
    CONFIRMED = "confirmed"  # 2xx with a state from the profile's cancelled set
    FORWARDED = "forwarded"  # 2xx, but the job is not (yet) cancelled there
    NOT_SUPPORTED = "not_supported"  # the provider answered 405 or 501
    FAILED_TO_FORWARD = "failed_to_forward"  # no answer, or an error status
    NOT_DOCUMENTED = "not_documented"  # the profile documents no cancel request
    NOT_FORWARDED = "not_forwarded"  # another live operation watches the job: nothing sent
    NOT_ALLOWED = "not_allowed"  # the cancel URL is no destination the profile may send to: nothing sent


class Channel(StrEnum):
    """Where a person's act on a card came from (Decision.channel, CardActivity.channel, the `human.*`
    audit entries, the response figures per channel). The identity a channel verified comes with it
    (`channel_identity`: "slack:<team>/<user>", "pagerduty:<user id>"; empty on the web and the API,
    where the account itself is the identity)."""

    WEB = "web"  # the dashboard, signed in
    SLACK = "slack"  # a signed Slack interaction, the clicker matched by their confirmed email
    PAGERDUTY = "pagerduty"  # a signed PagerDuty v3 webhook, the agent matched by email
    API = "api"  # the agent API or MCP, for a person acting through an agent


CHANNEL_IDENTITY_MAX = 200


def checked_channel(*, channel: object, identity: object) -> tuple[Channel, str]:
    """The channel and identity an act records; ValueError for a channel outside the vocabulary
    (a caller's mistake, never a person's input). The identity is one printable line, cut to
    CHANNEL_IDENTITY_MAX."""
    try:
        known = Channel(str(channel))
    except ValueError:
        raise ValueError(f"unknown channel {channel!r}: one of {', '.join(c.value for c in Channel)}") from None
    text = ONE_LINE_CONTROL_CHARACTERS.sub("", identity if isinstance(identity, str) else "").strip()
    return known, text[:CHANNEL_IDENTITY_MAX]


def choices_of(members: Iterable[StrEnum]) -> list[tuple[str, str]]:
    """A model field's choices: an enum's members (or some of them, in order), each its own label."""
    return [(member.value, member.value) for member in members]
