"""Provider profiles (DESIGN.md section 2): validation, TOML loading, and the one write service.

`validate_profile` is the single definition of a valid profile. `loadprofiles` and the admin form
both call it, so a profile can never be saved half-valid from either side. Validation does no I/O
and collects every problem instead of stopping at the first, so an operator fixes a file in one go.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from itertools import combinations
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from operations import job_ids
from operations.audit import entries as audit
from operations.credential_names import credential_env_problem
from operations.models import ProviderAccount, ProviderProfile
from operations.pacing import MAX_RATE_PER_S, MIN_RATE_PER_S
from operations.vocabulary import ONE_LINE_CONTROL_CHARACTERS

# TOML key -> model field. Only the five state sets are named differently in the file.
STATE_KEYS = ("pending", "success", "failure", "cancelled", "expired")
KEY_TO_FIELD: dict[str, str] = {
    key: (f"{key}_states" if key in STATE_KEYS else key)
    for key in (
        "slug",
        "name",
        "account",
        "status_url",
        "job_id_pattern",
        "state_field",
        *STATE_KEYS,
        "required_result_fields",
        "expiry_field",
        "progress_field",
        "counts_fields",
        "poll_hint_seconds_field",
        "poll_hint_time_field",
        "request_id_header",
        "credential_env",
        "auth_scheme",
        "base_delay_s",
        "max_delay_s",
        "jitter_floor",
        "default_deadline_s",
        "default_max_status_requests",
        "default_max_transport_failures",
        "not_found_grace_s",
        "rate_limit_per_s",
        "cancel_method",
        "cancel_url",
        "console_url",
        "approval_mode",
        "extension_options",
        "max_extensions",
    )
}
FIELD_TO_KEY = {field: key for key, field in KEY_TO_FIELD.items()}
REQUIRED_KEYS = ("slug", "name", "status_url", "job_id_pattern", "state_field", "pending", "success")
COUNT_NAMES = frozenset({"total", "succeeded", "failed"})
CANCEL_METHODS = ("DELETE", "POST", "PUT")
EXTENSION_MINUTES = (1, 1440)
EXTENSION_CHECKS = (1, 1000)
# PositiveIntegerField is a 32-bit column on PostgreSQL: a larger value would fail mid-transaction.
INT32_MAX = 2**31 - 1

_SLUG = re.compile(r"[A-Za-z0-9_-]+")
# Accounts are shared names that several profiles may use ("acme-prod"), so they may also hold . and :
_ACCOUNT = re.compile(r"[A-Za-z0-9_.:-]+")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,99}")
# RFC 9110 token: what may stand as a header name or an auth scheme.
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
# Non-empty segments without whitespace, joined by dots ("result.output_url", "items.0.id").
_DOTTED = re.compile(r"[^\s.]+(?:\.[^\s.]+)*")
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True)
class Problem:
    """One reason a profile is invalid, naming the TOML key it concerns."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


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

    def model_values(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ProfilesInvalid(Exception):
    """A profiles file was rejected whole; `problems` lists every reason, each naming its provider."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ApplyResult:
    slug: str
    outcome: Outcome
    changed_fields: tuple[str, ...] = ()


# --- per-key checks: each returns its problems (empty when the value is acceptable) -----------------


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


# An upper bound no real integration needs: beyond it a value is a typo, and backoff arithmetic
# on it would overflow.
MAX_DELAY_S = 7 * 24 * 3600


def _text(value: object, *, max_length: int, pattern: re.Pattern[str] | None = None, shape: str = "") -> list[str]:
    if not isinstance(value, str):
        return [f"must be a string, not {_kind(value)}"]
    if not value.strip():
        return ["must not be empty"]
    if ONE_LINE_CONTROL_CHARACTERS.search(value):
        # PostgreSQL refuses NUL in text outright; the other controls only hide what a value says.
        return ["must not contain control characters"]
    if len(value) > max_length:
        return [f"must be at most {max_length} characters"]
    if pattern is not None and not pattern.fullmatch(value):
        return [f"{value!r} {shape}"]
    return []


def _dotted(value: object, *, max_length: int = 200) -> list[str]:
    return _text(
        value,
        max_length=max_length,
        pattern=_DOTTED,
        shape="is not a dotted field path like result.output_url (no spaces, no empty parts)",
    )


def _string_list(value: object, *, dotted: bool) -> list[str]:
    if not isinstance(value, list):
        return [f"must be a list of strings, not {_kind(value)}"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(value, start=1):
        if not isinstance(item, str) or not item.strip():
            problems.append(f"item {index} must be a non-empty string")
            continue
        if ONE_LINE_CONTROL_CHARACTERS.search(item):
            problems.append(f"item {index} must not contain control characters")
            continue
        if item in seen:
            problems.append(f"{item!r} is listed twice")
        seen.add(item)
        if dotted:
            problems.extend(f"item {index}: {message}" for message in _dotted(item))
    return problems


def _states(value: object) -> list[str]:
    return _string_list(value, dotted=False)


def _dotted_list(value: object) -> list[str]:
    return _string_list(value, dotted=True)


def _number(value: object, *, minimum: float, inclusive: bool, maximum: float | None = None) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"must be a number, not {_kind(value)}"]
    if not math.isfinite(value):
        return ["must be a finite number"]
    too_low = value < minimum if inclusive else value <= minimum
    if too_low or (maximum is not None and value > maximum):
        lower = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        upper = f" and <= {maximum:g}" if maximum is not None else ""
        return [f"must be {lower}{upper}, not {value!r}"]
    return []


def _integer(value: object, *, minimum: int, maximum: int) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"must be a whole number, not {_kind(value)}"]
    if not minimum <= value <= maximum:
        return [f"must be an integer from {minimum} to {maximum}, not {value}"]
    return []


def _choice(value: object, *, allowed: Sequence[str]) -> list[str]:
    if not isinstance(value, str) or value not in allowed:
        return [f"must be one of {', '.join(allowed)}, not {value!r}"]
    return []


def _url(value: object) -> list[str]:
    problems = _text(value, max_length=500)
    if problems:
        return problems
    assert isinstance(value, str)
    if _URL_FORBIDDEN.search(value):
        return ["must not contain spaces or control characters"]
    if value.count("{job_id}") != 1:
        return ["must contain {job_id} exactly once"]
    if "{" in value.replace("{job_id}", "") or "}" in value.replace("{job_id}", ""):
        return ["must have no placeholder other than {job_id}"]
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return ["is not a valid URL"]
    if parts.scheme not in {"http", "https"} or not host:
        return ["must be an http:// or https:// URL with a host"]
    if "{job_id}" in parts.netloc:
        # The job id comes from the agent: it may pick a path segment, never the host.
        return ["{job_id} must be in the path or query, not in the host"]
    if parts.username is not None or parts.password is not None:
        return ["must not carry credentials; name them with credential_env"]
    return []


def _top_level_alternation(pattern: str) -> bool:
    """True when `|` splits the whole pattern, so `^a|b$` anchors only one branch at each end."""
    depth = 0
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            # A "]" first in a class (after an optional "^") is a literal member, not the end.
            if pattern[index + 1 : index + 2] == "^":
                index += 1
            if pattern[index + 1 : index + 2] == "]":
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
        index += 1
    return False


def _ends_unescaped(pattern: str, token: str) -> bool:
    if not pattern.endswith(token):
        return False
    head = pattern[: len(pattern) - len(token)]
    # An odd run of backslashes before the token escapes it ("\\$" is a literal dollar sign).
    return (len(head) - len(head.rstrip("\\"))) % 2 == 0


def _job_id_pattern(value: object) -> list[str]:
    problems = _text(value, max_length=500)
    if problems:
        return problems
    assert isinstance(value, str)
    try:
        re.compile(value)
    except re.error as exc:
        return [f"does not compile: {exc}"]
    try:
        job_ids.compile_pattern(value)
    except job_ids.PatternError as exc:
        return [
            f"does not compile in RE2 syntax, which job ids are matched with (linear time; no lookaround "
            f"or backreferences): {exc}"
        ]
    anchored = (
        value.startswith(("^", r"\A"))
        and (_ends_unescaped(value, "$") or _ends_unescaped(value, r"\Z"))
        and not _top_level_alternation(value)
    )
    if not anchored:
        return [
            "must be anchored as ^...$ around the whole pattern (wrap alternatives as ^(?:a|b)$): "
            "a partial match would let a job id like a/../b through"
        ]
    return []


def _counts_fields(value: object) -> list[str]:
    if not isinstance(value, dict):
        return [f"must be a table of count name = dotted field path, not {_kind(value)}"]
    problems: list[str] = []
    for name, path in value.items():
        if name not in COUNT_NAMES:
            problems.append(f"unknown count {name!r} (allowed: {', '.join(sorted(COUNT_NAMES))})")
            continue
        problems.extend(f"{name}: {message}" for message in _dotted(path))
    return problems


def _extension_options(value: object) -> list[str]:
    if not isinstance(value, list):
        return [f"must be a list of {{ minutes = N, checks = M }} tables, not {_kind(value)}"]
    problems: list[str] = []
    seen: set[tuple[int, int]] = set()
    for index, option in enumerate(value, start=1):
        if not isinstance(option, dict):
            problems.append(f"entry {index} must be a table {{ minutes = N, checks = M }}, not {_kind(option)}")
            continue
        entry_problems = [f"entry {index}: unknown key {key!r}" for key in sorted(set(option) - {"minutes", "checks"})]
        for key, (low, high) in (("minutes", EXTENSION_MINUTES), ("checks", EXTENSION_CHECKS)):
            if key not in option:
                entry_problems.append(f"entry {index}: {key} is required")
            else:
                entry_problems.extend(
                    f"entry {index}: {key} {m}" for m in _integer(option[key], minimum=low, maximum=high)
                )
        if not entry_problems:
            pair = (option["minutes"], option["checks"])
            if pair in seen:
                entry_problems.append(f"entry {index} repeats minutes = {pair[0]}, checks = {pair[1]}")
            seen.add(pair)
        problems.extend(entry_problems)
    return problems


def _auth_scheme(value: object) -> list[str]:
    # An empty scheme is meaningful: the credential is sent as the bare Authorization value.
    if value == "":
        return []
    return _text(value, max_length=40, pattern=_TOKEN, shape='is not an auth scheme token like "Bearer"')


def _credential_env(value: object) -> list[str]:
    problems = _text(
        value,
        max_length=100,
        pattern=_ENV_NAME,
        shape="does not have the credential variable name format ^[A-Z][A-Z0-9_]{0,99}$ (e.g. PROVIDER_ACME_TOKEN)",
    )
    if problems:
        return problems
    assert isinstance(value, str)
    problem = credential_env_problem(name=value)
    return [] if problem is None else [problem]


def _key_checks() -> dict[str, Callable[[object], list[str]]]:
    """Each key's check. Lengths mirror the model's columns, which PostgreSQL enforces.

    Built per call because some limits are settings, which tests may override.
    """
    return {
        "slug": lambda v: _text(v, max_length=64, pattern=_SLUG, shape="is not a slug (letters, digits, - and _)"),
        "name": lambda v: _text(v, max_length=200),
        "account": lambda v: _text(
            v, max_length=64, pattern=_ACCOUNT, shape="is not an account name (letters, digits, - _ . :)"
        ),
        "status_url": _url,
        "job_id_pattern": _job_id_pattern,
        "state_field": _dotted,
        **dict.fromkeys(STATE_KEYS, _states),
        "required_result_fields": _dotted_list,
        "expiry_field": _dotted,
        "progress_field": _dotted,
        "counts_fields": _counts_fields,
        "poll_hint_seconds_field": _dotted,
        "poll_hint_time_field": _dotted,
        "request_id_header": lambda v: _text(v, max_length=100, pattern=_TOKEN, shape="is not an HTTP header name"),
        "credential_env": _credential_env,
        "auth_scheme": _auth_scheme,
        "base_delay_s": lambda v: _number(v, minimum=0, inclusive=False, maximum=MAX_DELAY_S),
        "max_delay_s": lambda v: _number(v, minimum=0, inclusive=False, maximum=MAX_DELAY_S),
        "jitter_floor": lambda v: _number(v, minimum=0, inclusive=False, maximum=1),
        # A default outside the registration limits would make every default registration fail.
        "default_deadline_s": lambda v: _integer(
            v, minimum=max(1, settings.OPERATION_MIN_DEADLINE_S), maximum=settings.OPERATION_MAX_DEADLINE_S
        ),
        "default_max_status_requests": lambda v: _integer(v, minimum=1, maximum=settings.OPERATION_MAX_STATUS_REQUESTS),
        "default_max_transport_failures": lambda v: _integer(
            v, minimum=1, maximum=settings.OPERATION_MAX_STATUS_REQUESTS
        ),
        "not_found_grace_s": lambda v: _number(v, minimum=0, inclusive=True, maximum=MAX_DELAY_S),
        "rate_limit_per_s": lambda v: _number(v, minimum=MIN_RATE_PER_S, inclusive=True, maximum=MAX_RATE_PER_S),
        "cancel_method": lambda v: _choice(v, allowed=CANCEL_METHODS),
        "cancel_url": _url,
        "console_url": _url,
        "approval_mode": lambda v: _choice(v, allowed=ProviderProfile.ApprovalMode.values),
        "extension_options": _extension_options,
        "max_extensions": lambda v: _integer(v, minimum=0, maximum=INT32_MAX),
    }


# --- whole profile ------------------------------------------------------------------------------


def validate_profile(*, raw: Mapping[str, object]) -> ProfileSpec | list[Problem]:
    """Check one profile as written in TOML (file key names); a complete spec, or every problem."""
    problems: list[Problem] = []
    for key in sorted(set(raw) - set(KEY_TO_FIELD), key=str):
        close = difflib.get_close_matches(str(key), KEY_TO_FIELD, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(Problem(str(key), f"unknown key{hint}"))

    valid: dict[str, object] = {}
    for key, check in _key_checks().items():
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
        key: {s for s in raw[key] if isinstance(s, str) and s.strip()}
        for key in STATE_KEYS
        if isinstance(raw.get(key), list)
    }
    for first, second in combinations(STATE_KEYS, 2):
        for state in sorted(states.get(first, set()) & states.get(second, set())):
            problems.append(Problem(second, f"state {state!r} is in both {first} and {second}"))

    present = set(raw)
    delays = ("base_delay_s", "max_delay_s")
    if any(key in present for key in delays) and all(key in valid or key not in present for key in delays):
        base = valid.get("base_delay_s", _default("base_delay_s"))
        ceiling = valid.get("max_delay_s", _default("max_delay_s"))
        if base > ceiling:  # type: ignore[operator]
            problems.append(Problem("max_delay_s", f"must be >= base_delay_s ({base:g}), not {ceiling:g}"))

    for key, other in (("cancel_url", "cancel_method"), ("cancel_method", "cancel_url")):
        if key in present and other not in present:
            problems.append(Problem(other, f"is required with {key}: set both or neither"))
    return problems


def _default(field_name: str) -> object:
    return ProviderProfile._meta.get_field(field_name).get_default()


def _spec(valid: Mapping[str, object]) -> ProfileSpec:
    values: dict[str, object] = {}
    for key, field_name in KEY_TO_FIELD.items():
        if key in valid:
            value = valid[key]
        elif key == "account":
            value = valid["slug"]
        else:
            value = _default(field_name)
        model_field = ProviderProfile._meta.get_field(field_name)
        # Store floats as floats so a re-load compares equal to what the database returns.
        if model_field.get_internal_type() == "FloatField":
            value = float(value)  # type: ignore[arg-type]
        elif isinstance(value, str):
            value = str(value)  # plain str, not the model's TextChoices member used as a default
        elif isinstance(value, list):
            value = [dict(item) if isinstance(item, dict) else item for item in value]
        elif isinstance(value, dict):
            value = dict(value)
        values[field_name] = value
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


# --- files ----------------------------------------------------------------------------------------


def _label(index: int, entry: object) -> str:
    slug = entry.get("slug") if isinstance(entry, dict) else None
    if isinstance(slug, str) and slug and len(slug) <= 64:
        return f"provider #{index} ({slug})"
    return f"provider #{index}"


def parse_profiles(*, document: Mapping[str, object]) -> list[ProfileSpec]:
    """Validate every [[provider]] of a parsed TOML document; raise ProfilesInvalid listing all problems."""
    problems = [
        f"unknown top-level key {key!r} (a profiles file holds only [[provider]] tables)"
        for key in document
        if key != "provider"
    ]
    entries = document.get("provider")
    if entries is None or entries == []:
        problems.append("no [[provider]] tables")
        entries = []
    elif not isinstance(entries, list):
        problems.append(f"provider must be an array of tables ([[provider]]), not {_kind(entries)}")
        entries = []

    specs: list[ProfileSpec] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries, start=1):
        label = _label(index, entry)
        if not isinstance(entry, dict):
            problems.append(f"{label}: must be a table, not {_kind(entry)}")
            continue
        result = validate_profile(raw=entry)
        if isinstance(result, list):
            problems.extend(f"{label}: {problem}" for problem in result)
            continue
        if result.slug in first_index:
            problems.append(f"{label}: slug: duplicate of provider #{first_index[result.slug]}")
            continue
        first_index[result.slug] = index
        specs.append(result)
    if problems:
        raise ProfilesInvalid(problems)
    return specs


def load_profiles_file(*, path: Path) -> list[ProfileSpec]:
    """Read and validate a TOML profiles file; raise ProfilesInvalid listing every problem."""
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ProfilesInvalid([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfilesInvalid([f"{path}: not valid TOML: {exc}"]) from exc
    return parse_profiles(document=document)


# --- the write service ----------------------------------------------------------------------------


def profiles_apply(*, specs: Sequence[ProfileSpec], actor: Mapping[str, str]) -> list[ApplyResult]:
    """Create or update profiles by slug in one transaction, and make sure each one's account exists.

    Only changed fields are written, so re-applying the same file reports every profile unchanged
    and leaves `updated_at` alone. Each created or changed profile writes a `profile.changed`
    audit entry naming `actor` (e.g. operator:loadprofiles) and what changed.
    """
    slugs = [spec.slug for spec in specs]
    if len(set(slugs)) != len(slugs):
        raise ValueError("profiles_apply: each slug may appear once")
    results: list[ApplyResult] = []
    with transaction.atomic():
        existing = {p.slug: p for p in ProviderProfile.objects.select_for_update().filter(slug__in=slugs)}
        for spec in specs:
            values = spec.model_values()
            ProviderAccount.objects.get_or_create(name=spec.account)
            profile = existing.get(spec.slug)
            if profile is None:
                ProviderProfile.objects.create(**values)
                _audit_change(actor=actor, change="created", slug=spec.slug, before=None, after=values)
                results.append(ApplyResult(slug=spec.slug, outcome=Outcome.CREATED))
                continue
            before = _values_of(profile)
            changed = tuple(name for name, value in values.items() if before[name] != value)
            if not changed:
                results.append(ApplyResult(slug=spec.slug, outcome=Outcome.UNCHANGED))
                continue
            for name in changed:
                setattr(profile, name, values[name])
            profile.save(update_fields=[*changed, "updated_at"])
            _audit_change(actor=actor, change="updated", slug=spec.slug, before=before, after=values)
            results.append(ApplyResult(slug=spec.slug, outcome=Outcome.UPDATED, changed_fields=changed))
    return results


def profile_save(*, profile: ProviderProfile, actor: Mapping[str, str]) -> tuple[str, ...]:
    """Save a profile edited in the admin (already validated by its form); returns the changed fields."""
    with transaction.atomic():
        stored = ProviderProfile.objects.select_for_update().filter(pk=profile.pk).first() if profile.pk else None
        before = None if stored is None else _values_of(stored)
        after = _values_of(profile)
        changed = tuple(after) if before is None else tuple(name for name in after if before[name] != after[name])
        profile.save()
        # As loadprofiles does: the account's pacing row exists before any operation needs it.
        ProviderAccount.objects.get_or_create(name=profile.account)
        if changed:
            _audit_change(
                actor=actor,
                change="created" if before is None else "updated",
                slug=profile.slug,
                before=before,
                after=after,
            )
    return changed


def profile_delete(*, profile: ProviderProfile, actor: Mapping[str, str]) -> None:
    """Delete a profile no operation uses (the database refuses otherwise) and record who did."""
    slug, before = profile.slug, _values_of(profile)
    with transaction.atomic():
        profile.delete()
        _audit_change(actor=actor, change="deleted", slug=slug, before=before, after=None)


# What a profile.changed entry records by value: what decides where the workers send a credential
# and how answers are read. Every other changed field is named only (the entry holds no floats).
# The credential itself is never read here: credential_env is the variable's name.
AUDITED_VALUES = (
    "slug",
    "account",
    "status_url",
    "cancel_method",
    "cancel_url",
    "console_url",
    "credential_env",
    "auth_scheme",
    "request_id_header",
    "state_field",
    *(f"{key}_states" for key in STATE_KEYS),
    "approval_mode",
)


def _values_of(profile: ProviderProfile) -> dict[str, object]:
    return {name: getattr(profile, name) for name in FIELD_TO_KEY}


def _audit_change(
    *,
    actor: Mapping[str, str],
    change: str,
    slug: str,
    before: Mapping[str, object] | None,
    after: Mapping[str, object] | None,
) -> None:
    names = list(FIELD_TO_KEY)
    if before is not None and after is not None:
        names = [name for name in names if before[name] != after[name]]

    def recorded(values: Mapping[str, object] | None) -> dict[str, object] | None:
        if values is None:
            return None
        return {name: values[name] for name in AUDITED_VALUES if name in names}

    audit.append(
        entry_type="profile.changed",
        actor=actor,
        operation_id=None,
        data={"slug": slug, "change": change, "fields": names, "before": recorded(before), "after": recorded(after)},
    )
