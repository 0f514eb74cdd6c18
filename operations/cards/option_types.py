"""What a card's options are made of: their kinds, the profile's presets and capabilities, the facts
the options depend on, and the Option itself (pure data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from operations.vocabulary import Reason


class Kind(StrEnum):
    EXTEND = "extend"
    TREAT_AS_PENDING = "treat_as_pending"
    CANCEL_AT_PROVIDER = "cancel_at_provider"
    INSPECT = "inspect"
    CLOSE = "close"
    RETRY_AFTER_ROTATION = "retry_after_rotation"
    ACCEPT_OUTPUT = "accept_output"
    APPROVE_ONE_CHECK = "approve_one_check"
    # business_deadline_passed: poll on within the operation's own bounds; no new authority.
    KEEP_WAITING = "keep_waiting"


class Confirm(StrEnum):
    """How much confirmation an option needs, in proportion to its consequence."""

    NONE = "none"  # changes nothing (inspect)
    TWO_STEP = "two_step"  # reversible: click, then click again to confirm
    EXPLICIT = "explicit"  # irreversible: an explicit confirmation panel with the consequence spelled out


# Reasons whose card offers extensions (docs/DESIGN.md section 7: the rows that list `extend:…`).
EXTENDABLE = frozenset(
    {
        Reason.DEADLINE_EXCEEDED,
        Reason.REQUEST_BUDGET_EXHAUSTED,
        Reason.PROVIDER_FAILURE,
        Reason.RATE_LIMITED,
        Reason.BUSINESS_DEADLINE_PASSED,
    }
)
# Reasons whose card may offer the provider's documented cancel.
CANCELLABLE = EXTENDABLE | {Reason.UNKNOWN_STATE}
# retry_after_rotation and approve_one_check: how long the one request they allow may take when the
# old deadline is already (nearly) spent; without it the approved request could never be sent.
ONE_REQUEST_WINDOW = timedelta(minutes=5)
# Upper bounds on preset values the server will ever honour, whatever a profile row says.
MAX_PRESET_MINUTES = 7 * 24 * 60
MAX_PRESET_CHECKS = 10_000


@dataclass(frozen=True)
class Preset:
    minutes: int
    checks: int


@dataclass(frozen=True)
class Capabilities:
    """What the provider profile documents, as far as the card is concerned."""

    presets: tuple[Preset, ...] = ()
    max_extensions: int = 0
    has_cancel: bool = False
    console_url: str = ""
    default_max_transport_failures: int = 3


@dataclass(frozen=True)
class Facts:
    """The operation and card facts the options depend on, read by the caller."""

    reason: str
    now: datetime
    deadline_at: datetime
    requests_used: int
    max_requests: int
    transport_failures_used: int = 0
    max_transport_failures: int = 0
    business_deadline_at: datetime | None = None
    # Extension-kind authorizations already granted on this operation (extend, treat_as_pending).
    extensions_used: int = 0
    # The provider account is paused until then (a Retry-After): no poll before it.
    paused_until: datetime | None = None
    # What the provider last asked for on this operation (Retry-After, poll hint): no poll before it.
    provider_wait_until: datetime | None = None
    # A person already chose to keep polling past the business deadline.
    business_deadline_waived: bool = False
    # unknown_state: the state the provider reported, as shown (see describe_state).
    provider_state: str | None = None
    # The one cancel request was already sent for this card.
    cancel_sent: bool = False
    # authorization_denied: the credential fingerprint differs from the one stored at the denial.
    credential_changed: bool = False
    # accept_output: username of the first responder who accepted, waiting for a second one.
    accepted_by: str | None = None


@dataclass(frozen=True)
class Option:
    id: str
    kind: Kind
    label: str  # the button text: states the consequence
    effect: str  # cost and effect in one sentence
    confirm: Confirm
    needs_comment: bool = False
    # New bounds when the option lets polling continue (extensions, approvals, retries).
    new_deadline_at: datetime | None = None
    new_max_requests: int | None = None
    new_max_transport_failures: int | None = None
    next_poll_at: datetime | None = None
    extra_requests: int = 0
    # extend / treat_as_pending: the seconds between the window's checks (docs/DESIGN.md section 4).
    check_spacing_s: float | None = None
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """The option as shown, for the decision's card snapshot."""
        return {
            "id": self.id,
            "label": self.label,
            "effect": self.effect,
            "new_deadline": iso(self.new_deadline_at),
            "new_max_requests": self.new_max_requests,
            "next_poll_at": iso(self.next_poll_at),
            "check_spacing_ms": None if self.check_spacing_s is None else round(self.check_spacing_s * 1000),
        }


@dataclass(frozen=True)
class ParsedOption:
    kind: Kind


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")
