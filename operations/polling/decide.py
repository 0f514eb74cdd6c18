"""Turn one observed provider response into one decision (docs/DESIGN.md section 5).

`decide` is pure: the operation's facts, the observation, and an RNG in; a Decision out. The
service in operations/controller.py does the I/O around it in the order of section 4.
"""

from __future__ import annotations

import json
import math
import random
import re
from datetime import datetime
from typing import Any

from operations.polling import fields
from operations.polling.model import Action, Bounds, Decision, Observation, Policy
from operations.polling.schedule import Wait, plan_wait
from operations.polling.signals import (
    Hint,
    parse_retry_after,
    seconds,
)
from operations.polling.states import MISSING, StateClass, describe_state, extract
from operations.vocabulary import Reason, Status

BODY_TOO_LARGE = "body_too_large"
INVALID_CREDENTIAL = "invalid_credential"
DESTINATION_NOT_ALLOWED = "destination_not_allowed"


class _Body:
    """Parsed JSON of a 2xx body, or why it could not be parsed.

    Beyond the grammar, a body must be something every later step can hold: nesting no deeper
    than MAX_DEPTH (json's parser recurses, and so do the steps after it), finite numbers, and
    text without NUL or lone surrogates (PostgreSQL's jsonb refuses NUL and infinities, UTF-8
    cannot encode a lone surrogate). Anything else is an invalid body like a truncated one.
    """

    @classmethod
    def too_large(cls, detail: str) -> _Body:
        body = cls(None)
        body.problem = detail or "body over the size cap"
        return body

    def __init__(self, raw: bytes | None) -> None:
        self.value: object = None
        self.problem: str | None = None
        if not raw:
            self.problem = "empty body"
            return
        try:
            # Strict decoding: json.loads would let a lone surrogate's raw bytes through.
            text = raw.decode(json.detect_encoding(raw))
            value = json.loads(
                text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants, parse_float=_finite
            )
            if _needs_walk(raw, text):
                _check_tree(value)
            self.value = value
        except RecursionError:
            # The parser's own words ("maximum recursion depth exceeded while decoding...") would
            # be cut mid-word on the card; say what the engineer needs to know.
            self.problem = f"body is not valid JSON (nested deeper than {MAX_DEPTH} levels)"
        except (ValueError, UnicodeDecodeError) as exc:
            self.problem = f"body is not valid JSON ({str(exc)[:80]})"


# Deeper than any real status body; deep enough that nothing after the parse comes near
# Python's recursion limit.
MAX_DEPTH = 64
# A \u escape that may decode to NUL or to half of a surrogate pair.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate keys")
    return dict(pairs)


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _needs_walk(raw: bytes, text: str) -> bool:
    """Whether the parsed value could be too deep or hold NUL or a lone surrogate: cheap tests on
    the text (brackets inside strings count too; they only cost a walk), so an ordinary body is
    not walked at all."""
    return raw.count(b"[") + raw.count(b"{") > MAX_DEPTH or _SUSPECT_ESCAPE.search(text) is not None


def _check_tree(value: object) -> None:
    """Refuse nesting past MAX_DEPTH and text with NUL or a lone surrogate, keys included."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key in node:
                _check_text(key)
            stack.extend((child, depth + 1) for child in node.values())
        else:
            stack.extend((child, depth + 1) for child in node)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ValueError("text holds a NUL character")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate") from None


def decide(*, policy: Policy, bounds: Bounds, observation: Observation, rng: random.Random) -> Decision:
    """The decision for one response, following docs/DESIGN.md section 5 row by row."""
    obs = observation
    if obs.transport_error == INVALID_CREDENTIAL:
        # Nothing was sent, and sending again would not help until someone fixes the credential:
        # the same card as a refused one, so it offers a retry once the credential changed.
        return _escalate(
            Reason.AUTHORIZATION_DENIED, INVALID_CREDENTIAL, obs.transport_detail or "the credential cannot be sent"
        )
    if obs.transport_error == DESTINATION_NOT_ALLOWED:
        # The last check before a credential leaves refused it (the poll checks first, so only a
        # destination made around that check gets here): nothing was sent.
        return _escalate(
            Reason.DESTINATION_NOT_ALLOWED, DESTINATION_NOT_ALLOWED, obs.transport_detail or DESTINATION_NOT_ALLOWED
        )
    if obs.transport_error is not None and obs.transport_error != BODY_TOO_LARGE:
        return _transport_failure(
            policy,
            bounds,
            obs,
            rng,
            interpreted="transport_error",
            what=f"{obs.transport_error}{': ' + obs.transport_detail if obs.transport_detail else ''}",
            spent_reason=Reason.PROVIDER_FAILURE,
        )
    code = obs.http_status or 0
    if 200 <= code < 300:
        body = _Body(obs.body) if obs.transport_error is None else _Body.too_large(obs.transport_detail)
        if body.problem is not None:
            return _transport_failure(
                policy,
                bounds,
                obs,
                rng,
                interpreted="invalid_body",
                what=body.problem,
                spent_reason=Reason.INTEGRATION_FAILURE,
            )
        return _interpret_body(policy, bounds, obs, body.value, rng)
    if 300 <= code < 400:
        location = (obs.header("location") or ("",))[0][:200]
        return _escalate(
            Reason.INTEGRATION_FAILURE,
            "redirect",
            f"provider answered {code} redirect{' to ' + location if location else ''}; redirects are never followed",
        )
    if code in (401, 403):
        return _escalate(
            Reason.AUTHORIZATION_DENIED,
            "denied",
            f"provider refused the credential with {code}; retrying the same credential would not help",
        )
    if code == 404:
        age_s = (obs.received_at - bounds.registered_at).total_seconds()
        if age_s < policy.not_found_grace_s:
            return _transport_failure(
                policy,
                bounds,
                obs,
                rng,
                interpreted="not_found",
                what=f"404 {age_s:.0f} s after registration (within the {policy.not_found_grace_s:g} s grace window)",
                spent_reason=Reason.INTEGRATION_FAILURE,
            )
        return _escalate(
            Reason.INTEGRATION_FAILURE,
            "not_found",
            f"provider does not know the job: 404 {age_s:.0f} s after registration, past the "
            f"{policy.not_found_grace_s:g} s grace window",
        )
    if code == 429:
        return _transport_failure(
            policy,
            bounds,
            obs,
            rng,
            interpreted="rate_limited",
            what="429 Too Many Requests",
            spent_reason=Reason.RATE_LIMITED,
            rate_limited=True,
        )
    if code >= 500:
        return _transport_failure(
            policy,
            bounds,
            obs,
            rng,
            interpreted="server_error",
            what=f"provider answered {code}",
            spent_reason=Reason.PROVIDER_FAILURE,
        )
    return _escalate(
        Reason.INTEGRATION_FAILURE,
        "client_error",
        f"provider rejected the status request with {code}",
    )


def unreadable(*, policy: Policy, bounds: Bounds, observation: Observation, rng: random.Random, what: str) -> Decision:
    """The decision for an answer that could not be interpreted at all: an invalid body, like one
    the parser refuses. `observation` carries only what is safe to read (no headers, no body)."""
    return _transport_failure(
        policy,
        bounds,
        observation,
        rng,
        interpreted="invalid_body",
        what=what,
        spent_reason=Reason.INTEGRATION_FAILURE,
    )


def _escalate(reason: Reason, interpreted: str, explanation: str, **extra: Any) -> Decision:
    return Decision(
        action=Action.ESCALATE,
        status=Status.NEEDS_ATTENTION,
        interpreted_state=interpreted,
        reason=reason,
        explanation=explanation,
        **extra,
    )


def _retry_after(obs: Observation) -> Hint | None:
    date = obs.header("date")
    return parse_retry_after(
        list(obs.header("retry-after")), now=obs.received_at, date_header=date[0] if len(date) == 1 else None
    )


def _wait_decision(
    policy: Policy,
    bounds: Bounds,
    obs: Observation,
    rng: random.Random,
    *,
    interpreted: str,
    explanation: str,
    poll_hint: Hint | None = None,
    rate_limited: bool = False,
    charge_transport: bool = False,
    provider_state: str | None = None,
    warnings: tuple[str, ...] = (),
    **extra: Any,
) -> Decision:
    retry_after = _retry_after(obs)
    base_s, max_s = policy.base_delay_s, policy.max_delay_s
    if rate_limited:
        # A 429 without guidance gets a much longer local delay than ordinary backoff.
        base_s = max(base_s, policy.rate_limited_delay_s)
        max_s = max(max_s, policy.rate_limited_delay_s * 8)
    wait: Wait = plan_wait(
        now=obs.received_at,
        deadline_at=bounds.deadline_at,
        retry_after=retry_after,
        poll_hint=poll_hint,
        base_s=base_s,
        max_s=max_s,
        jitter_floor=policy.jitter_floor,
        backoff_attempt=bounds.backoff_attempt,
        hint_floor_s=policy.hint_floor_s,
        hint_cap_s=policy.hint_cap_s,
        rng=rng,
        paced_spacing_s=bounds.check_spacing_s,
        paced_checks_left=bounds.max_requests - bounds.requests_used,
        multiplier=policy.backoff_multiplier,
    )
    pause_until = _account_pause(policy, obs, retry_after)
    all_warnings = warnings + wait.notes
    if bounds.requests_used >= bounds.max_requests:
        # No wake-up follows a spent budget: a note that one was capped at the deadline would mislead.
        all_warnings = warnings + (wait.notes[:-1] if wait.capped else wait.notes)
        spent = f"all {bounds.max_requests} status requests are spent"
        if bounds.check_spacing_s is not None:
            # Inside a window the last check falls in its final spacing: the card comes back at the
            # end of the window a person granted, and says so.
            spent = (
                f"that was the last check of the window, which ends {bounds.deadline_at:%Y-%m-%d %H:%M:%S} UTC; {spent}"
            )
        return _escalate(
            Reason.REQUEST_BUDGET_EXHAUSTED,
            interpreted,
            f"{explanation}; {spent}",
            provider_state=provider_state,
            charge_transport=charge_transport,
            backoff_attempt=wait.backoff_attempt,
            account_pause_until=pause_until,
            provider_wait_until=_asked_until(policy, obs, wait.guidance_s),
            warnings=all_warnings,
            **extra,
        )
    return Decision(
        action=Action.WAIT,
        status=Status.RUNNING,
        interpreted_state=interpreted,
        explanation=explanation,
        provider_state=provider_state,
        next_poll_at=wait.next_poll_at,
        delay_source=wait.delay_source,
        delay_ms=wait.delay_ms,
        charge_transport=charge_transport,
        backoff_attempt=wait.backoff_attempt,
        account_pause_until=pause_until,
        provider_wait_until=_asked_until(policy, obs, wait.guidance_s),
        warnings=all_warnings,
        **extra,
    )


def _account_pause(policy: Policy, obs: Observation, retry_after: Hint | None) -> datetime | None:
    """A 429/503 with Retry-After asks the whole provider account to back off, for as long as it
    said: not capped at this operation's own deadline (other operations outlive it), only at the
    longest any operation may be watched."""
    if obs.http_status not in (429, 503) or retry_after is None or retry_after.delay_s is None:
        return None
    return obs.received_at + seconds(min(max(retry_after.delay_s, policy.hint_floor_s), policy.hint_absurd_s))


def _asked_until(policy: Policy, obs: Observation, asked_s: float | None) -> datetime | None:
    """When the provider asked to be asked again, bounded like an account pause (see above)."""
    if asked_s is None:
        return None
    return obs.received_at + seconds(min(max(asked_s, policy.hint_floor_s), policy.hint_absurd_s))


def _transport_failure(
    policy: Policy,
    bounds: Bounds,
    obs: Observation,
    rng: random.Random,
    *,
    interpreted: str,
    what: str,
    spent_reason: Reason,
    rate_limited: bool = False,
) -> Decision:
    """A response that tells nothing about the job: charged to the transport budget too."""
    failures = bounds.transport_failures_used + 1
    explanation = f"{what} (transport failure {failures} of {bounds.max_transport_failures})"
    if failures >= bounds.max_transport_failures:
        retry_after = _retry_after(obs)
        return _escalate(
            spent_reason,
            interpreted,
            f"{explanation}; the transport budget is spent",
            charge_transport=True,
            backoff_attempt=bounds.backoff_attempt,
            account_pause_until=_account_pause(policy, obs, retry_after),
            provider_wait_until=_asked_until(policy, obs, None if retry_after is None else retry_after.delay_s),
        )
    return _wait_decision(
        policy,
        bounds,
        obs,
        rng,
        interpreted=interpreted,
        explanation=explanation,
        rate_limited=rate_limited,
        charge_transport=True,
    )


# Terminal provider states without a result: (status, interpreted state, meaning, error code).
_ENDINGS = {
    StateClass.FAILURE: (Status.FAILED, "failure", "the job failed", "provider_failed"),
    StateClass.CANCELLED: (Status.CANCELLED, "cancelled", "the job was cancelled", "provider_cancelled"),
    StateClass.EXPIRED: (Status.EXPIRED, "expired", "the job expired at the provider", "provider_expired"),
}


def _interpret_body(policy: Policy, bounds: Bounds, obs: Observation, body: object, rng: random.Random) -> Decision:
    raw_state = extract(body, policy.state_field)
    shown_state = describe_state(raw_state)
    state_class = policy.table.classify(None if raw_state is MISSING else raw_state, extra_pending=bounds.extra_pending)
    progress, counts, warnings = fields.progress(policy, body)
    common: dict[str, Any] = {"provider_state": shown_state, "progress_percent": progress, "progress_counts": counts}

    if state_class is StateClass.PENDING:
        expiry_problem = fields.past_own_expiry(policy, body, obs.received_at)
        if expiry_problem is not None:
            return _escalate(Reason.INTEGRATION_FAILURE, "contradiction", expiry_problem, warnings=warnings, **common)
        hint, hint_warnings = fields.poll_hint(policy, body, obs.received_at)
        return _wait_decision(
            policy,
            bounds,
            obs,
            rng,
            interpreted="pending",
            explanation=f"provider state {shown_state!r} is pending",
            poll_hint=hint,
            warnings=warnings + hint_warnings,
            **common,
        )
    if state_class is StateClass.SUCCESS:
        values, missing = fields.required_fields(policy, body)
        if missing:
            return _escalate(
                Reason.INTEGRATION_FAILURE,
                "contradiction",
                f"provider state {shown_state!r} means success but {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing or empty",
                warnings=warnings,
                **common,
            )
        result = {"values": values, "counts": counts}
        if counts and counts.get("failed"):
            # DESIGN section 5: any failed item makes it partial, even when none succeeded; the
            # counts in the result say how many.
            return _complete(
                Status.PARTIALLY_SUCCEEDED,
                "success",
                f"provider state {shown_state!r} with {counts['failed']} failed items",
                result=result,
                warnings=warnings,
                **common,
            )
        return _complete(
            Status.SUCCEEDED,
            "success",
            f"provider state {shown_state!r} is success",
            result=result,
            warnings=warnings,
            **common,
        )
    if state_class in _ENDINGS:
        status, interpreted, meaning, code = _ENDINGS[state_class]
        return _complete(
            status,
            interpreted,
            f"provider state {shown_state!r}: {meaning}",
            error=fields.provider_error(policy, body, code=code, state=shown_state),
            warnings=warnings,
            **common,
        )
    return _escalate(
        Reason.UNKNOWN_STATE,
        "unknown",
        f"provider state {shown_state} is not in the {policy.profile_slug} state table"
        if not isinstance(raw_state, str)
        else f"provider state {raw_state!r} is not in the {policy.profile_slug} state table",
        warnings=warnings,
        **common,
    )


def _complete(status: Status, interpreted: str, explanation: str, **extra: Any) -> Decision:
    return Decision(
        action=Action.COMPLETE,
        status=status,
        interpreted_state=interpreted,
        explanation=explanation,
        **extra,
    )
