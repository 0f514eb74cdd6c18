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

from operations.cards import option_builders as build
from operations.cards.option_types import (
    CANCELLABLE,
    EXTENDABLE,
    MAX_PRESET_CHECKS,
    MAX_PRESET_MINUTES,
    ONE_REQUEST_WINDOW,
    Capabilities,
    Confirm,
    Facts,
    Kind,
    Option,
    ParsedOption,
    Preset,
)
from operations.cards.option_wording import human_duration
from operations.vocabulary import Reason

# The names callers import from here: the option model and the one duration wording.
__all__ = [
    "ONE_REQUEST_WINDOW",
    "Capabilities",
    "Confirm",
    "Facts",
    "Kind",
    "Option",
    "ParsedOption",
    "Preset",
    "bounded_options",
    "capabilities_of",
    "human_duration",
    "parse_option_id",
    "presets_from",
    "string_state",
    "unavailable_notes",
]

_PRESET_ID = re.compile(r"^(extend|treat_as_pending):([1-9][0-9]{0,5})m:([1-9][0-9]{0,5})$")
# describe_state() renders non-string states as "<null>", "<missing>", "<int: 3>": those cannot be
# added to a state table, so "treat as pending" is not offered for them.
_NON_STRING_STATE = re.compile(r"^<(missing|null|[a-z]+: .*)>$", re.DOTALL)


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
        return [build.inspect(caps), build.close()]
    options: list[Option] = []
    extensions_left = caps.max_extensions - facts.extensions_used > 0
    if reason is Reason.BUSINESS_DEADLINE_PASSED and build.can_keep_waiting(facts):
        options.append(build.keep_waiting(facts))
    if reason in EXTENDABLE and extensions_left:
        options += [build.extend(facts, caps, preset) for preset in caps.presets]
    if reason is Reason.UNKNOWN_STATE:
        state = string_state(facts.provider_state)
        if state is not None and extensions_left:
            options += [build.treat_as_pending(facts, caps, preset, state) for preset in caps.presets]
        options.append(build.inspect(caps))
        if caps.has_cancel and not facts.cancel_sent:
            options.append(build.cancel())
        options.append(build.close())
        return options
    if reason in CANCELLABLE and caps.has_cancel and not facts.cancel_sent:
        options.append(build.cancel())
    if reason is Reason.PER_CALL_APPROVAL:
        return [build.approve_one_check(facts), build.close()]
    if reason is Reason.AUTHORIZATION_DENIED and facts.credential_changed:
        options.append(build.retry_after_rotation(facts))
    options.append(build.inspect(caps))
    if reason is Reason.INTEGRATION_FAILURE:
        options.append(build.accept_output(facts))
    options.append(build.close())
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
        if reason is Reason.BUSINESS_DEADLINE_PASSED and not build.can_keep_waiting(facts):
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
    if reason is Reason.DESTINATION_NOT_ALLOWED:
        notes.append(
            "No retry or extension: pollerdash refused to send this request, and would refuse it again until "
            "the operator binds the credential to this address (PROVIDER_CREDENTIAL_ORIGINS) or an admin "
            "corrects the profile; then the job can be registered again."
        )
    if reason is Reason.AUTHORIZATION_DENIED:
        if facts.credential_changed:
            notes.append("The credential changed since the denial: one retry with the new credential is offered.")
        else:
            notes.append(
                "No retry: the credential is unchanged since it was refused. Rotate it first; "
                "an identical retry is never offered."
            )
    return notes
