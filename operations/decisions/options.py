"""The bounded options of a decision card (docs/DESIGN.md section 7), as pure functions.

Given why pollerdash stopped, the facts of the operation and what its provider profile documents,
`bounded_options` returns exactly the options a responder may choose, each with its cost and its
effect in words ("+4 requests: 4 checks, about every 11 min, until 19:20 UTC — 15 min before the business
deadline").
There is no "continue?" and no free-form duration: every extension is one of the profile's
presets, and the server accepts only an option id that this function offers at decision time.

No I/O and no clock: the caller passes `now` and the facts it read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from operations.polling.gate import business_deadline_binds
from operations.polling.window import Window, open_window
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

_PRESET_ID = re.compile(r"^(extend|treat_as_pending):([1-9][0-9]{0,5})m:([1-9][0-9]{0,5})$")
# describe_state() renders non-string states as "<null>", "<missing>", "<int: 3>": those cannot be
# added to a state table, so "treat as pending" is not offered for them.
_NON_STRING_STATE = re.compile(r"^<(missing|null|[a-z]+: .*)>$", re.DOTALL)


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
            "new_deadline": _iso(self.new_deadline_at),
            "new_max_requests": self.new_max_requests,
            "next_poll_at": _iso(self.next_poll_at),
            "check_spacing_ms": None if self.check_spacing_s is None else round(self.check_spacing_s * 1000),
        }


@dataclass(frozen=True)
class ParsedOption:
    kind: Kind


def parse_option_id(value: object) -> ParsedOption | None:
    """The kind (and preset) named by a posted option id, or None when it is no option at all."""
    if not isinstance(value, str) or len(value) > 100:
        return None
    match = _PRESET_ID.match(value)
    if match:
        return ParsedOption(Kind(match.group(1)))
    if value in {k.value for k in Kind} and value not in (Kind.EXTEND, Kind.TREAT_AS_PENDING):
        return ParsedOption(Kind(value))
    return None


def presets_from(extension_options: object) -> tuple[Preset, ...]:
    """The profile's extension presets; malformed entries are skipped, never guessed at."""
    presets: list[Preset] = []
    if not isinstance(extension_options, list):
        return ()
    for entry in extension_options:
        if not isinstance(entry, dict):
            continue
        minutes, checks = entry.get("minutes"), entry.get("checks")
        if (
            isinstance(minutes, int)
            and isinstance(checks, int)
            and not isinstance(minutes, bool)
            and not isinstance(checks, bool)
            and 0 < minutes <= MAX_PRESET_MINUTES
            and 0 < checks <= MAX_PRESET_CHECKS
        ):
            preset = Preset(minutes, checks)
            if preset not in presets:
                presets.append(preset)
    return tuple(presets)


def capabilities_of(profile: object) -> Capabilities:
    """Capabilities from a ProviderProfile (any object with its attributes)."""
    return Capabilities(
        presets=presets_from(getattr(profile, "extension_options", [])),
        max_extensions=int(getattr(profile, "max_extensions", 0) or 0),
        has_cancel=bool(getattr(profile, "cancel_method", "") and getattr(profile, "cancel_url", "")),
        console_url=str(getattr(profile, "console_url", "") or ""),
        default_max_transport_failures=int(getattr(profile, "default_max_transport_failures", 3) or 0),
    )


def string_state(provider_state: str | None) -> str | None:
    """The provider state if it is a plain string that a state table could hold."""
    if not provider_state or _NON_STRING_STATE.match(provider_state):
        return None
    return provider_state


def bounded_options(*, facts: Facts, caps: Capabilities) -> list[Option]:
    """Exactly the options of docs/DESIGN.md section 7 for this reason, operation and profile."""
    try:
        reason = Reason(facts.reason)
    except ValueError:
        # An unknown reason (a newer writer?) gets the safe minimum: look, or stop watching.
        return [_inspect(caps), _close()]
    options: list[Option] = []
    extensions_left = caps.max_extensions - facts.extensions_used > 0
    if reason is Reason.BUSINESS_DEADLINE_PASSED and _can_keep_waiting(facts):
        options.append(_keep_waiting(facts))
    if reason in EXTENDABLE and extensions_left:
        options += [_extend(facts, caps, preset) for preset in caps.presets]
    if reason is Reason.UNKNOWN_STATE:
        state = string_state(facts.provider_state)
        if state is not None and extensions_left:
            options += [_treat_as_pending(facts, caps, preset, state) for preset in caps.presets]
        options.append(_inspect(caps))
        if caps.has_cancel and not facts.cancel_sent:
            options.append(_cancel())
        options.append(_close())
        return options
    if reason in CANCELLABLE and caps.has_cancel and not facts.cancel_sent:
        options.append(_cancel())
    if reason is Reason.PER_CALL_APPROVAL:
        return [_approve_one_check(facts), _close()]
    if reason is Reason.AUTHORIZATION_DENIED and facts.credential_changed:
        options.append(_retry_after_rotation(facts))
    options.append(_inspect(caps))
    if reason is Reason.INTEGRATION_FAILURE:
        options.append(_accept_output(facts))
    options.append(_close())
    return options


def unavailable_notes(*, facts: Facts, caps: Capabilities) -> list[str]:
    """Why an option a responder might look for is not on the card (shown under the options)."""
    notes: list[str] = []
    try:
        reason = Reason(facts.reason)
    except ValueError:
        return notes
    if reason in EXTENDABLE or reason is Reason.UNKNOWN_STATE:
        if caps.max_extensions and facts.extensions_used >= caps.max_extensions:
            notes.append(
                f"No extension: all {caps.max_extensions} extensions this profile allows are used (max_extensions)."
            )
        elif not caps.presets:
            notes.append("No extension: the profile defines no extension presets.")
        if reason is Reason.BUSINESS_DEADLINE_PASSED and not _can_keep_waiting(facts):
            notes.append(
                "No “keep waiting”: the operation's own bounds are spent too (its technical deadline passed or "
                "its requests are used up); an extension moves them."
            )
        if reason is Reason.UNKNOWN_STATE and string_state(facts.provider_state) is None:
            notes.append("“Treat as pending” needs a text state; the provider sent none.")
        if caps.has_cancel and facts.cancel_sent:
            notes.append("The cancel request was already sent once; it is not sent again.")
        elif not caps.has_cancel:
            notes.append("No cancel: the provider profile documents no cancel request.")
    if reason is Reason.AUTHORIZATION_DENIED:
        if facts.credential_changed:
            notes.append("The credential changed since the denial: one retry with the new credential is offered.")
        else:
            notes.append(
                "No retry: the credential is unchanged since it was refused. Rotate it first; "
                "an identical retry is never offered."
            )
    return notes


# --- one builder per option kind ----------------------------------------------------------------------


def _first_check(facts: Facts) -> datetime:
    """Now, unless the provider asked to wait longer (a Retry-After, a poll hint, an account pause)."""
    asks = [moment for moment in (facts.paused_until, facts.provider_wait_until) if moment is not None]
    return max([facts.now, *asks])


def _bounds_after(facts: Facts, caps: Capabilities, preset: Preset) -> tuple[Window, int, int]:
    """(the window, new request budget, new transport budget) for an extension.

    An extension grants exactly its checks from now (budget = requests used + checks) and its
    minutes past the later of the old deadline and the first check (now, or the end of a provider
    pause): the window runs from the first check to the new deadline.
    """
    first_poll = _first_check(facts)
    new_deadline = max(facts.deadline_at, first_poll) + timedelta(minutes=preset.minutes)
    window = open_window(now=facts.now, not_before=first_poll, ends_at=new_deadline, checks=preset.checks)
    new_max = facts.requests_used + preset.checks
    # Without some transport allowance a single 5xx or 429 would hand the job straight back.
    allowance = min(preset.checks, caps.default_max_transport_failures or preset.checks)
    new_transport = max(facts.max_transport_failures, facts.transport_failures_used + allowance)
    return window, new_max, new_transport


def _extend(facts: Facts, caps: Capabilities, preset: Preset) -> Option:
    return _more_time(
        facts, caps, preset, kind=Kind.EXTEND, label=f"Extend {_minutes(preset.minutes)} / {preset.checks} checks"
    )


def _treat_as_pending(facts: Facts, caps: Capabilities, preset: Preset, state: str) -> Option:
    label = f"Treat “{_short(state)}” as pending: {_minutes(preset.minutes)} / {preset.checks} checks"
    return _more_time(facts, caps, preset, kind=Kind.TREAT_AS_PENDING, label=label, scope="this operation only; ")


def _more_time(facts: Facts, caps: Capabilities, preset: Preset, *, kind: Kind, label: str, scope: str = "") -> Option:
    """An option that grants a preset's minutes and checks (extend, treat_as_pending), paced across its window."""
    window, new_max, new_transport = _bounds_after(facts, caps, preset)
    return Option(
        id=f"{kind.value}:{preset.minutes}m:{preset.checks}",
        kind=kind,
        label=label,
        effect=scope + _effect(facts, window),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=window.ends_at,
        new_max_requests=new_max,
        new_max_transport_failures=new_transport,
        next_poll_at=window.first_at,
        extra_requests=preset.checks,
        check_spacing_s=window.spacing_s,
        notes=(f"extension {facts.extensions_used + 1} of max {caps.max_extensions}",),
    )


def _can_keep_waiting(facts: Facts) -> bool:
    return facts.now < facts.deadline_at and facts.requests_used < facts.max_requests


def _keep_waiting(facts: Facts) -> Option:
    """business_deadline_passed: poll on until the technical deadline, within the bounds already granted."""
    left = facts.max_requests - facts.requests_used
    first = _first_check(facts)
    when = "now" if first <= facts.now else f"at {_clock(first, facts.now)} (the provider asked to wait)"
    return Option(
        id=Kind.KEEP_WAITING.value,
        kind=Kind.KEEP_WAITING,
        label="Keep waiting until the technical deadline",
        effect=(
            f"no new requests or time: polling resumes {when} within the operation's own bounds "
            f"({left} request{'' if left == 1 else 's'} left, deadline {_clock(facts.deadline_at, facts.now)}); "
            "you are not asked about the business deadline again"
        ),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=facts.deadline_at,
        new_max_requests=facts.max_requests,
        new_max_transport_failures=facts.max_transport_failures,
        next_poll_at=first,
    )


def _cancel() -> Option:
    return Option(
        id=Kind.CANCEL_AT_PROVIDER.value,
        kind=Kind.CANCEL_AT_PROVIDER,
        label="Cancel the job at the provider",
        effect=(
            "sends the provider's documented cancel request once; the operation ends cancelled only if "
            "the provider confirms, otherwise this card stays open with the provider's answer"
        ),
        confirm=Confirm.EXPLICIT,
    )


def _inspect(caps: Capabilities) -> Option:
    where = "opens the provider console" if caps.console_url else "the profile has no console link"
    return Option(
        id=Kind.INSPECT.value,
        kind=Kind.INSPECT,
        label="Inspect at the provider" if caps.console_url else "Record that I inspected",
        effect=f"{where}; records that you looked; changes nothing else",
        confirm=Confirm.NONE,
    )


def _close() -> Option:
    return Option(
        id=Kind.CLOSE.value,
        kind=Kind.CLOSE,
        label="Close — stop watching",
        effect=(
            "ends the operation as closed now; no further requests; the agent sees status closed "
            "with your reason. Cannot be undone"
        ),
        confirm=Confirm.EXPLICIT,
    )


def _one_request_bounds(facts: Facts) -> tuple[int, datetime, int]:
    """(budget, deadline, extra requests) that leave room for one more request, whatever is spent."""
    new_max = max(facts.max_requests, facts.requests_used + 1)
    return new_max, max(facts.deadline_at, facts.now + ONE_REQUEST_WINDOW), new_max - facts.max_requests


def _retry_after_rotation(facts: Facts) -> Option:
    new_max, new_deadline, extra = _one_request_bounds(facts)
    cost = f"+{extra} request, " if extra else ""
    return Option(
        id=Kind.RETRY_AFTER_ROTATION.value,
        kind=Kind.RETRY_AFTER_ROTATION,
        label="Retry with the new credential",
        effect=(
            f"the credential changed since the denial; {cost}polling resumes now within "
            f"{new_max - facts.requests_used} requests, deadline {_clock(new_deadline, facts.now)}"
        ),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=new_deadline,
        new_max_requests=new_max,
        new_max_transport_failures=facts.max_transport_failures,
        next_poll_at=facts.now,
        extra_requests=extra,
    )


def _accept_output(facts: Facts) -> Option:
    if facts.accepted_by:
        label = f"Confirm acceptance (second responder after {facts.accepted_by})"
        effect = (
            f"{facts.accepted_by} accepted the provider's output as it is; your confirmation, with a "
            "comment, ends the operation succeeded. Cannot be undone"
        )
    else:
        label = "Accept the output as it is"
        effect = (
            "marks the operation succeeded with the provider's output despite the contradiction; "
            "needs your comment and then a second, different responder. Cannot be undone"
        )
    return Option(
        id=Kind.ACCEPT_OUTPUT.value,
        kind=Kind.ACCEPT_OUTPUT,
        label=label,
        effect=effect,
        confirm=Confirm.EXPLICIT,
        needs_comment=True,
    )


def _approve_one_check(facts: Facts) -> Option:
    new_max, new_deadline, extra = _one_request_bounds(facts)
    effect = f"allows exactly 1 status request now ({new_max - facts.requests_used} of {new_max} left before it)"
    if extra:
        effect += f"; +{extra} request, the budget was spent"
    if new_deadline != facts.deadline_at:
        effect += f"; the deadline moves to {_clock(new_deadline, facts.now)} so the request can be sent"
    return Option(
        id=Kind.APPROVE_ONE_CHECK.value,
        kind=Kind.APPROVE_ONE_CHECK,
        label="Approve one status check",
        effect=effect,
        confirm=Confirm.TWO_STEP,
        new_deadline_at=new_deadline,
        new_max_requests=new_max,
        new_max_transport_failures=facts.max_transport_failures,
        next_poll_at=facts.now,
        extra_requests=extra,
    )


# --- wording ----------------------------------------------------------------------------------------


def _effect(facts: Facts, window: Window) -> str:
    """ "+4 requests: 4 checks, about every 11 min, until 19:20 UTC — 15 min before the business deadline"."""
    parts = []
    if window.first_at > facts.now:
        parts.append(f"first check not before {_clock(window.first_at, facts.now)} (the provider asked to wait)")
    checks = window.checks
    pace = f"{checks} checks, about every {human_duration(timedelta(seconds=window.spacing_s))}"
    if checks == 1:
        pace = "1 check"
    text = f"+{checks} request{'' if checks == 1 else 's'}: {pace}, until {_clock(window.ends_at, facts.now)}"
    past = _past_business(facts, window.ends_at)
    if past is not None:
        if past > timedelta(0):
            text += f" — {human_duration(past)} after the business deadline"
        elif past < timedelta(0):
            text += f" — {human_duration(-past)} before the business deadline"
        else:
            text += " — exactly at the business deadline"
    parts.append(text)
    business = facts.business_deadline_at
    if (
        business is not None
        and facts.now < business < window.ends_at
        and business_deadline_binds(
            business_deadline_at=business, deadline_at=window.ends_at, waived=facts.business_deadline_waived
        )
    ):
        parts.append(f"polling stops at the business deadline {_clock(business, facts.now)} for a person to decide")
    return "; ".join(parts)


def _past_business(facts: Facts, new_deadline: datetime) -> timedelta | None:
    if facts.business_deadline_at is None:
        return None
    return new_deadline - facts.business_deadline_at


def _clock(value: datetime, now: datetime) -> str:
    """ "11:15 UTC" today, "Dec 2 11:15 UTC" on another day."""
    value_utc = value.astimezone(now.tzinfo) if now.tzinfo else value
    if value_utc.date() == now.date():
        return f"{value_utc:%H:%M} UTC"
    return f"{value_utc:%b} {value_utc.day} {value_utc:%H:%M} UTC"


def _minutes(minutes: int) -> str:
    if minutes % (24 * 60) == 0:
        days = minutes // (24 * 60)
        return f"{days} day" + ("s" if days != 1 else "")
    if minutes % 60 == 0:
        return f"{minutes // 60} h"
    return f"{minutes} min"


def human_duration(delta: timedelta) -> str:
    """A short duration in words: "45 s", "20 min", "1 h 5 min", "2 days 3 h"."""
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60) if seconds < 3600 else seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} day" + ("s" if days != 1 else "") + (f" {hours} h" if hours else "")


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")
