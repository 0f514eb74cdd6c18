"""A valid profile (`ProfileSpec`) and the one definition of validity (`validate_profile`).

`loadprofiles` and the admin form both call it, so a profile can never be saved half-valid from
either side. Validation does no I/O and collects every problem instead of stopping at the first.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from itertools import combinations
from typing import Any, cast

from django.db.models import Field

from operations.models import ProviderProfile

# TOML key -> model field. Only the five state sets are named differently in the file.
from operations.profiles.checks import FIELD_TO_KEY, KEY_TO_FIELD, REQUIRED_KEYS, STATE_KEYS, key_checks
from operations.providers.targets import binding_problem, destination_problem
from operations.validation import Problem


@dataclass(frozen=True)
class ProfileSpec:
    """A validated profile, complete with defaults; attribute names are the model's field names."""

    slug: str
    name: str
    account: str
    status_url: str
    job_id_pattern: str
    state_field: str
    pending_states: list[str]
    success_states: list[str]
    failure_states: list[str]
    cancelled_states: list[str]
    expired_states: list[str]
    required_result_fields: list[str]
    expiry_field: str
    progress_field: str
    counts_fields: dict[str, str]
    poll_hint_seconds_field: str
    poll_hint_time_field: str
    request_id_header: str
    credential_env: str
    auth_scheme: str
    base_delay_s: float
    max_delay_s: float
    backoff_multiplier: float
    jitter_floor: float
    default_deadline_s: int
    default_max_status_requests: int
    default_max_transport_failures: int
    not_found_grace_s: float
    rate_limit_per_s: float
    cancel_method: str
    cancel_url: str
    console_url: str
    approval_mode: str
    extension_options: list[dict[str, int]]
    max_extensions: int
    business_deadline_warning_s: int | None
    escalation_policy: str

    def model_values(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --- whole profile ------------------------------------------------------------------------------


def validate_profile(*, raw: Mapping[str, object]) -> ProfileSpec | list[Problem]:
    """Check one profile as written in TOML (file key names); a complete spec, or every problem."""
    problems: list[Problem] = []
    for key in sorted(set(raw) - set(KEY_TO_FIELD), key=str):
        close = difflib.get_close_matches(str(key), KEY_TO_FIELD, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(Problem(str(key), f"unknown key{hint}"))

    valid: dict[str, object] = {}
    for key, check in key_checks().items():
        if key not in raw:
            if key in REQUIRED_KEYS:
                problems.append(Problem(key, "is required"))
            continue
        key_problems = check(raw[key])
        problems.extend(Problem(key, message) for message in key_problems)
        if not key_problems:
            valid[key] = raw[key]

    problems.extend(_cross_checks(raw=raw, valid=valid))
    if problems:
        return problems
    return _spec(valid)


def _cross_checks(*, raw: Mapping[str, object], valid: Mapping[str, object]) -> list[Problem]:
    """Rules between keys. Value rules (delays) run only on values that passed their own checks."""
    problems = [Problem(key, "must list at least one state") for key in ("pending", "success") if valid.get(key) == []]
    # Overlaps are reported even for a set with its own problems (say a duplicate), so one pass
    # over the file shows them all.
    states = {
        key: {s for s in listed if isinstance(s, str) and s.strip()}
        for key in STATE_KEYS
        if isinstance(listed := raw.get(key), list)
    }
    for first, second in combinations(STATE_KEYS, 2):
        for state in sorted(states.get(first, set()) & states.get(second, set())):
            problems.append(Problem(second, f"state {state!r} is in both {first} and {second}"))

    present = set(raw)
    delays = ("base_delay_s", "max_delay_s")
    if any(key in present for key in delays) and all(key in valid or key not in present for key in delays):
        base = valid.get("base_delay_s", _default("base_delay_s"))
        ceiling = valid.get("max_delay_s", _default("max_delay_s"))
        # Both passed their checks (or are the model's defaults): numbers.
        if base > ceiling:  # type: ignore[operator]
            problems.append(Problem("max_delay_s", f"must be >= base_delay_s ({base:g}), not {ceiling:g}"))

    for key, other in (("cancel_url", "cancel_method"), ("cancel_method", "cancel_url")):
        if key in present and other not in present:
            problems.append(Problem(other, f"is required with {key}: set both or neither"))
    return problems + _destination_checks(raw=raw, valid=valid)


def _destination_checks(*, raw: Mapping[str, object], valid: Mapping[str, object]) -> list[Problem]:
    """Where the workers would send (operations.providers.targets): the credential only to the origins
    PROVIDER_CREDENTIAL_ORIGINS binds it to; without a credential, only public https addresses
    (or PROVIDER_ALLOWED_ORIGINS). The same rule the workers apply before every request."""
    if "credential_env" in raw and "credential_env" not in valid:
        return []  # its own problem is listed; where it may go depends on which variable it is
    credential_env = str(valid.get("credential_env", ""))
    unbound = binding_problem(credential_env=credential_env)
    if unbound is not None:
        return [Problem("credential_env", unbound)]
    problems = []
    for key in ("status_url", "cancel_url"):
        if key in valid:
            problem = destination_problem(credential_env=credential_env, url=str(valid[key]))
            if problem is not None:
                problems.append(Problem(key, problem))
    return problems


def _model_field(field_name: str) -> Field[Any, Any]:
    # Every profile key maps to one of the profile's own columns, never a relation.
    return cast("Field[Any, Any]", ProviderProfile._meta.get_field(field_name))


def _default(field_name: str) -> object:
    return _model_field(field_name).get_default()


def _spec(valid: Mapping[str, object]) -> ProfileSpec:
    values: dict[str, object] = {}
    for key, field_name in KEY_TO_FIELD.items():
        if key in valid:
            value = valid[key]
        elif key == "account":
            value = valid["slug"]
        else:
            value = _default(field_name)
        model_field = _model_field(field_name)
        # Store floats as floats so a re-load compares equal to what the database returns.
        if model_field.get_internal_type() == "FloatField":
            # A FloatField's value passed its check (or is the model default): a number.
            value = float(value)  # type: ignore[arg-type]
        elif isinstance(value, str):
            value = str(value)  # plain str, not the model's TextChoices member used as a default
        elif isinstance(value, list):
            value = [dict(item) if isinstance(item, dict) else item for item in value]
        elif isinstance(value, dict):
            value = dict(value)
        values[field_name] = value
    # Every value passed its key's check, so it has its field's type.
    return ProfileSpec(**values)  # type: ignore[arg-type]


def raw_from_model_values(*, values: Mapping[str, object]) -> dict[str, object]:
    """Model field values as a form edits them -> a profile in file key names, for validate_profile.

    A form cannot leave a key out, so an empty value stands for "absent" wherever the model's
    default is itself empty; `auth_scheme` keeps "" because its default is "Bearer".
    """
    raw: dict[str, object] = {}
    for field_name, value in values.items():
        if value is None or (value == "" and _default(field_name) == ""):
            continue
        raw[FIELD_TO_KEY[field_name]] = value
    return raw
