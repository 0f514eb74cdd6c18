"""What `decide` reads and returns: the profile's policy, the operation's bounds, one observed response,
and the decision. Plain frozen dataclasses, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from operations.polling.states import StateTable
from operations.vocabulary import DelaySource, Reason, Status


@dataclass(frozen=True)
class Policy:
    """The parts of a provider profile that decisions read (copied, so decide() touches no model)."""

    profile_slug: str
    state_field: str
    table: StateTable
    required_result_fields: tuple[str, ...] = ()
    expiry_field: str = ""
    progress_field: str = ""
    counts_fields: Mapping[str, str] = field(default_factory=dict)
    poll_hint_seconds_field: str = ""
    poll_hint_time_field: str = ""
    base_delay_s: float = 5.0
    max_delay_s: float = 120.0
    backoff_multiplier: float = 2.0
    jitter_floor: float = 0.5
    not_found_grace_s: float = 60.0
    rate_limited_delay_s: float = 30.0
    hint_floor_s: float = 1.0
    hint_cap_s: float = 900.0
    hint_absurd_s: float = 7 * 24 * 3600.0
    error_cap_bytes: int = 8192


@dataclass(frozen=True)
class Bounds:
    """The operation's facts at decision time. `requests_used` already counts this request."""

    registered_at: datetime
    deadline_at: datetime
    requests_used: int
    max_requests: int
    transport_failures_used: int
    max_transport_failures: int
    backoff_attempt: int = 0
    extra_pending: frozenset[str] = frozenset()
    # Inside a window a human granted: the window's pacing between checks (operations/polling/window.py).
    check_spacing_s: float | None = None


@dataclass(frozen=True)
class Observation:
    """What came back from one status request. Header names are lower-case."""

    received_at: datetime
    http_status: int | None = None
    headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    body: bytes | None = None
    # A word of operations.providers.http.TRANSPORT_ERRORS (timeout, connect_error, body_too_large,
    # invalid_credential, ...); None when a response came.
    transport_error: str | None = None
    transport_detail: str = ""

    def header(self, name: str) -> tuple[str, ...]:
        return tuple(self.headers.get(name, ()))


class Action(StrEnum):
    WAIT = "wait"
    COMPLETE = "complete"
    ESCALATE = "escalate"


@dataclass(frozen=True)
class Decision:
    action: Action
    status: Status
    interpreted_state: str
    explanation: str
    provider_state: str | None = None
    reason: Reason | None = None
    next_poll_at: datetime | None = None
    delay_source: DelaySource | None = None
    delay_ms: int | None = None
    charge_transport: bool = False
    backoff_attempt: int = 0
    account_pause_until: datetime | None = None
    # What the provider asked for (Retry-After, poll hint), not capped at the deadline: a human's
    # extension does not send its first check before it.
    provider_wait_until: datetime | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    progress_percent: int | None = None
    progress_counts: dict[str, int] | None = None
    warnings: tuple[str, ...] = ()

    def redacted(self, *, redact: Callable[[Any], Any]) -> Decision:
        """This decision with `redact` applied to every value that came from the provider."""
        return replace(
            self,
            explanation=redact(self.explanation),
            provider_state=redact(self.provider_state),
            result=redact(self.result),
            error=redact(self.error),
            warnings=redact(self.warnings),
        )

    @property
    def code(self) -> str:
        """The decision word recorded on the StatusCheck and in the audit entry."""
        if self.action is Action.WAIT:
            return "wait"
        if self.action is Action.ESCALATE:
            return "escalate"
        return str(self.status)
