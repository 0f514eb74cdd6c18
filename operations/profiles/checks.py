"""The per-key checks of a provider profile: each returns its problems (empty when the value is acceptable).

No I/O: every check is a pure function of the value, so `validate_profile` collects every problem of
a file in one pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from django.conf import settings

from operations import job_ids
from operations.credential_names import credential_env_problem
from operations.models import ProviderProfile
from operations.pacing import MAX_RATE_PER_S, MIN_RATE_PER_S
from operations.polling.schedule import MAX_BACKOFF_MULTIPLIER, MIN_BACKOFF_MULTIPLIER
from operations.provider_origins import placeholder_problem
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
        "backoff_multiplier",
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
        "business_deadline_warning_s",
        "escalation_policy",
    )
}
FIELD_TO_KEY = {field: key for key, field in KEY_TO_FIELD.items()}
_POLICY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
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


# --- per-key checks: each returns its problems (empty when the value is acceptable) -----------------


def kind_of(value: object) -> str:
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
        return [f"must be a string, not {kind_of(value)}"]
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
        return [f"must be a list of strings, not {kind_of(value)}"]
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
        return [f"must be a number, not {kind_of(value)}"]
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
        return [f"must be a whole number, not {kind_of(value)}"]
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
        return ["{job_id} must be in the path, not in the host"]
    if parts.username is not None or parts.password is not None:
        return ["must not carry credentials; name them with credential_env"]
    problem = placeholder_problem(value)
    return [problem] if problem else []


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
        return [f"must be a table of count name = dotted field path, not {kind_of(value)}"]
    problems: list[str] = []
    for name, path in value.items():
        if name not in COUNT_NAMES:
            problems.append(f"unknown count {name!r} (allowed: {', '.join(sorted(COUNT_NAMES))})")
            continue
        problems.extend(f"{name}: {message}" for message in _dotted(path))
    return problems


def _extension_options(value: object) -> list[str]:
    if not isinstance(value, list):
        return [f"must be a list of {{ minutes = N, checks = M }} tables, not {kind_of(value)}"]
    problems: list[str] = []
    seen: set[tuple[int, int]] = set()
    for index, option in enumerate(value, start=1):
        if not isinstance(option, dict):
            problems.append(f"entry {index} must be a table {{ minutes = N, checks = M }}, not {kind_of(option)}")
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


# The early warning of a business deadline: a week ahead is the longest that still means "near".
MAX_BUSINESS_WARNING_S = 7 * 24 * 3600


def _business_deadline_warning(value: object) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"must be a whole number of seconds, not {kind_of(value)}"]
    if not 1 <= value <= MAX_BUSINESS_WARNING_S:
        return [
            f"must be from 1 s to 7 days ({MAX_BUSINESS_WARNING_S} s) before the business deadline, not {value}; "
            "leave it out for no warning"
        ]
    return []


def key_checks() -> dict[str, Callable[[object], list[str]]]:
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
        # 1 polls at base_delay_s every time; above 4 the cap is reached within a few waits anyway.
        "backoff_multiplier": lambda v: _number(
            v, minimum=MIN_BACKOFF_MULTIPLIER, inclusive=True, maximum=MAX_BACKOFF_MULTIPLIER
        ),
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
        "business_deadline_warning_s": _business_deadline_warning,
        # A policy's name; that the policy exists is checked by the loader and the admin form
        # (operations.notify.store.missing_policies), which read the database.
        "escalation_policy": lambda v: _text(
            v, max_length=100, pattern=_POLICY_NAME, shape="is not a policy name (a-z, 0-9, _ and -)"
        ),
    }
