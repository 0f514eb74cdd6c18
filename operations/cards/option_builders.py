"""One builder per option kind: each returns the Option with its new bounds, label and effect (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from operations.cards.option_types import ONE_REQUEST_WINDOW, Capabilities, Confirm, Facts, Kind, Option, Preset
from operations.cards.option_wording import clock_text, effect_text, minutes_text, shortened
from operations.polling.window import Window, open_window


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


def extend(facts: Facts, caps: Capabilities, preset: Preset) -> Option:
    return _more_time(
        facts, caps, preset, kind=Kind.EXTEND, label=f"Extend {minutes_text(preset.minutes)} / {preset.checks} checks"
    )


def treat_as_pending(facts: Facts, caps: Capabilities, preset: Preset, state: str) -> Option:
    label = f"Treat “{shortened(state)}” as pending: {minutes_text(preset.minutes)} / {preset.checks} checks"
    return _more_time(facts, caps, preset, kind=Kind.TREAT_AS_PENDING, label=label, scope="this operation only; ")


def _more_time(facts: Facts, caps: Capabilities, preset: Preset, *, kind: Kind, label: str, scope: str = "") -> Option:
    """An option that grants a preset's minutes and checks (extend, treat_as_pending), paced across its window."""
    window, new_max, new_transport = _bounds_after(facts, caps, preset)
    return Option(
        id=f"{kind.value}:{preset.minutes}m:{preset.checks}",
        kind=kind,
        label=label,
        effect=scope + effect_text(facts, window),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=window.ends_at,
        new_max_requests=new_max,
        new_max_transport_failures=new_transport,
        next_poll_at=window.first_at,
        extra_requests=preset.checks,
        check_spacing_s=window.spacing_s,
        notes=(f"extension {facts.extensions_used + 1} of max {caps.max_extensions}",),
    )


def can_keep_waiting(facts: Facts) -> bool:
    return facts.now < facts.deadline_at and facts.requests_used < facts.max_requests


def keep_waiting(facts: Facts) -> Option:
    """business_deadline_passed: poll on until the technical deadline, within the bounds already granted."""
    left = facts.max_requests - facts.requests_used
    first = _first_check(facts)
    when = "now" if first <= facts.now else f"at {clock_text(first, facts.now)} (the provider asked to wait)"
    return Option(
        id=Kind.KEEP_WAITING.value,
        kind=Kind.KEEP_WAITING,
        label="Keep waiting until the technical deadline",
        effect=(
            f"no new requests or time: polling resumes {when} within the operation's own bounds "
            f"({left} request{'' if left == 1 else 's'} left, deadline {clock_text(facts.deadline_at, facts.now)}); "
            "you are not asked about the business deadline again"
        ),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=facts.deadline_at,
        new_max_requests=facts.max_requests,
        new_max_transport_failures=facts.max_transport_failures,
        next_poll_at=first,
    )


def cancel() -> Option:
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


def inspect(caps: Capabilities) -> Option:
    where = "opens the provider console" if caps.console_url else "the profile has no console link"
    return Option(
        id=Kind.INSPECT.value,
        kind=Kind.INSPECT,
        label="Inspect at the provider" if caps.console_url else "Record that I inspected",
        effect=f"{where}; records that you looked; changes nothing else",
        confirm=Confirm.NONE,
    )


def close() -> Option:
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


def retry_after_rotation(facts: Facts) -> Option:
    new_max, new_deadline, extra = _one_request_bounds(facts)
    cost = f"+{extra} request, " if extra else ""
    return Option(
        id=Kind.RETRY_AFTER_ROTATION.value,
        kind=Kind.RETRY_AFTER_ROTATION,
        label="Retry with the new credential",
        effect=(
            f"the credential changed since the denial; {cost}polling resumes now within "
            f"{new_max - facts.requests_used} requests, deadline {clock_text(new_deadline, facts.now)}"
        ),
        confirm=Confirm.TWO_STEP,
        new_deadline_at=new_deadline,
        new_max_requests=new_max,
        new_max_transport_failures=facts.max_transport_failures,
        next_poll_at=facts.now,
        extra_requests=extra,
    )


def accept_output(facts: Facts) -> Option:
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


def approve_one_check(facts: Facts) -> Option:
    new_max, new_deadline, extra = _one_request_bounds(facts)
    effect = f"allows exactly 1 status request now ({new_max - facts.requests_used} of {new_max} left before it)"
    if extra:
        effect += f"; +{extra} request, the budget was spent"
    if new_deadline != facts.deadline_at:
        effect += f"; the deadline moves to {clock_text(new_deadline, facts.now)} so the request can be sent"
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
