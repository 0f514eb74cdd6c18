"""Reading the optional fields of a provider's body (required result fields, the job's own expiry, poll
hints, progress, the error) as the profile names them. Pure functions of (policy, body, now)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from operations.polling.model import Policy
from operations.polling.signals import Hint, parse_poll_hint_seconds, parse_poll_hint_time, parse_rfc3339
from operations.polling.states import MISSING, extract


def required_fields(policy: Policy, body: object) -> tuple[dict[str, object], list[str]]:
    values: dict[str, object] = {}
    missing: list[str] = []
    for path in policy.required_result_fields:
        value = extract(body, path)
        if value is MISSING or value is None or value == "" or value == [] or value == {}:
            missing.append(path)
        else:
            values[path] = value
    return values, missing


def past_own_expiry(policy: Policy, body: object, now: datetime) -> str | None:
    if not policy.expiry_field:
        return None
    raw = extract(body, policy.expiry_field)
    if raw is MISSING or raw is None or not isinstance(raw, str):
        return None
    expires_at = parse_rfc3339(raw)
    if expires_at is None or expires_at > now:
        return None
    return f"provider still reports the job pending, but its own expiry {raw} has passed"


def poll_hint(policy: Policy, body: object, now: datetime) -> tuple[Hint | None, tuple[str, ...]]:
    """The body's own hint: seconds first, then a time; an invalid one is noted and ignored."""
    notes: list[str] = []
    candidates: list[Hint | None] = []
    if policy.poll_hint_seconds_field:
        raw = extract(body, policy.poll_hint_seconds_field)
        if raw is not MISSING:
            candidates.append(parse_poll_hint_seconds(raw, absurd_s=policy.hint_absurd_s))
    if policy.poll_hint_time_field:
        raw = extract(body, policy.poll_hint_time_field)
        if raw is not MISSING:
            candidates.append(parse_poll_hint_time(raw, now=now, absurd_s=policy.hint_absurd_s))
    for hint in candidates:
        if hint is None:
            continue
        if hint.delay_s is not None:
            return hint, tuple(notes)
        if hint.note:
            notes.append(hint.note)
    return None, tuple(notes)


def progress(policy: Policy, body: object) -> tuple[int | None, dict[str, int] | None, tuple[str, ...]]:
    warnings: list[str] = []
    percent: int | None = None
    if policy.progress_field:
        raw = extract(body, policy.progress_field)
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw == raw:  # NaN != NaN
            percent = int(min(100, max(0, raw)))
        elif raw is not MISSING and raw is not None:
            warnings.append(f"ignored progress value {str(raw)[:40]!r}")
    counts: dict[str, int] | None = None
    if policy.counts_fields:
        found: dict[str, int] = {}
        for name, path in policy.counts_fields.items():
            raw = extract(body, path)
            if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
                found[name] = raw
        counts = found or None
    return percent, counts, tuple(warnings)


def provider_error(policy: Policy, body: object, *, code: str, state: str) -> dict[str, Any]:
    """The provider's own error, preserved verbatim as JSON when it fits the cap."""
    provider_error = body.get("error", body) if isinstance(body, dict) else body
    encoded = json.dumps(provider_error, ensure_ascii=False)
    if len(encoded.encode()) > policy.error_cap_bytes:
        provider_error = {
            "truncated": True,
            "excerpt": encoded.encode()[: policy.error_cap_bytes].decode(errors="ignore"),
        }
    message = None
    if isinstance(provider_error, dict):
        message = provider_error.get("message") if isinstance(provider_error.get("message"), str) else None
    return {
        "code": code,
        "message": message or f"The provider reported state {state!r}.",
        "provider_error": provider_error,
    }
