"""The per-key checks of a provider profile: each returns its problems (empty when the value is acceptable).

No I/O: every check is a pure function of the value, so `validate_profile` collects every problem of
a file in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.conf import settings

from operations.limits.pacing import MAX_RATE_PER_S, MIN_RATE_PER_S
from operations.models import ProviderProfile
from operations.polling.schedule import MAX_BACKOFF_MULTIPLIER, MIN_BACKOFF_MULTIPLIER
from operations.profiles import urls
from operations.profiles.values import choice, dotted_list, dotted_path, integer, kind_of, number, states, text
from operations.providers.credential_names import credential_env_problem

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


# --- per-key checks: each returns its problems (empty when the value is acceptable) -----------------
# The generic ones are operations/profiles/values.py; URLs and the job id pattern, urls.py.


# An upper bound no real integration needs: beyond it a value is a typo, and backoff arithmetic
# on it would overflow.
MAX_DELAY_S = 7 * 24 * 3600


def _counts_fields(value: object) -> list[str]:
    if not isinstance(value, dict):
        return [f"must be a table of count name = dotted field path, not {kind_of(value)}"]
    problems: list[str] = []
    for name, path in value.items():
        if name not in COUNT_NAMES:
            problems.append(f"unknown count {name!r} (allowed: {', '.join(sorted(COUNT_NAMES))})")
            continue
        problems.extend(f"{name}: {message}" for message in dotted_path(path))
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
                    f"entry {index}: {key} {m}" for m in integer(option[key], minimum=low, maximum=high)
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
    return text(value, max_length=40, pattern=_TOKEN, shape='is not an auth scheme token like "Bearer"')


def _credential_env(value: object) -> list[str]:
    problems = text(
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
        "slug": lambda v: text(v, max_length=64, pattern=_SLUG, shape="is not a slug (letters, digits, - and _)"),
        "name": lambda v: text(v, max_length=200),
        "account": lambda v: text(
            v, max_length=64, pattern=_ACCOUNT, shape="is not an account name (letters, digits, - _ . :)"
        ),
        "status_url": urls.url,
        "job_id_pattern": urls.job_id_pattern,
        "state_field": dotted_path,
        **dict.fromkeys(STATE_KEYS, states),
        "required_result_fields": dotted_list,
        "expiry_field": dotted_path,
        "progress_field": dotted_path,
        "counts_fields": _counts_fields,
        "poll_hint_seconds_field": dotted_path,
        "poll_hint_time_field": dotted_path,
        "request_id_header": lambda v: text(v, max_length=100, pattern=_TOKEN, shape="is not an HTTP header name"),
        "credential_env": _credential_env,
        "auth_scheme": _auth_scheme,
        "base_delay_s": lambda v: number(v, minimum=0, inclusive=False, maximum=MAX_DELAY_S),
        "max_delay_s": lambda v: number(v, minimum=0, inclusive=False, maximum=MAX_DELAY_S),
        # 1 polls at base_delay_s every time; above 4 the cap is reached within a few waits anyway.
        "backoff_multiplier": lambda v: number(
            v, minimum=MIN_BACKOFF_MULTIPLIER, inclusive=True, maximum=MAX_BACKOFF_MULTIPLIER
        ),
        "jitter_floor": lambda v: number(v, minimum=0, inclusive=False, maximum=1),
        # A default outside the registration limits would make every default registration fail.
        "default_deadline_s": lambda v: integer(
            v, minimum=max(1, settings.OPERATION_MIN_DEADLINE_S), maximum=settings.OPERATION_MAX_DEADLINE_S
        ),
        "default_max_status_requests": lambda v: integer(v, minimum=1, maximum=settings.OPERATION_MAX_STATUS_REQUESTS),
        "default_max_transport_failures": lambda v: integer(
            v, minimum=1, maximum=settings.OPERATION_MAX_STATUS_REQUESTS
        ),
        "not_found_grace_s": lambda v: number(v, minimum=0, inclusive=True, maximum=MAX_DELAY_S),
        "rate_limit_per_s": lambda v: number(v, minimum=MIN_RATE_PER_S, inclusive=True, maximum=MAX_RATE_PER_S),
        "cancel_method": lambda v: choice(v, allowed=CANCEL_METHODS),
        "cancel_url": urls.url,
        "console_url": urls.url,
        "approval_mode": lambda v: choice(v, allowed=ProviderProfile.ApprovalMode.values),
        "extension_options": _extension_options,
        "max_extensions": lambda v: integer(v, minimum=0, maximum=INT32_MAX),
        "business_deadline_warning_s": _business_deadline_warning,
        # A policy's name; that the policy exists is checked by the loader and the admin form
        # (operations.notify.store.missing_policies), which read the database.
        "escalation_policy": lambda v: text(
            v, max_length=100, pattern=_POLICY_NAME, shape="is not a policy name (a-z, 0-9, _ and -)"
        ),
    }
