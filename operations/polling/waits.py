"""Deciding the wait after a response: when to look again, the account pause a provider asked for,
and the escalation once a budget is spent (docs/DESIGN.md sections 4-5)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from operations.polling.model import Action, Bounds, Decision, Observation, Policy
from operations.polling.outcomes import escalate
from operations.polling.schedule import Wait, plan_wait
from operations.polling.signals import Hint, parse_retry_after, seconds
from operations.vocabulary import Reason, Status


@dataclass(frozen=True)
class Reading:
    """One response being decided: the profile's policy, the operation's bounds, the observation,
    and the RNG that jitters the next wait."""

    policy: Policy
    bounds: Bounds
    obs: Observation
    rng: random.Random


def wait_decision(
    *,
    reading: Reading,
    interpreted: str,
    explanation: str,
    poll_hint: Hint | None = None,
    rate_limited: bool = False,
    charge_transport: bool = False,
    provider_state: str | None = None,
    warnings: tuple[str, ...] = (),
    **extra: Any,
) -> Decision:
    policy, bounds, obs = reading.policy, reading.bounds, reading.obs
    retry_after = _retry_after(obs)
    wait = _plan(reading=reading, retry_after=retry_after, poll_hint=poll_hint, rate_limited=rate_limited)
    common: dict[str, Any] = {
        "provider_state": provider_state,
        "charge_transport": charge_transport,
        "backoff_attempt": wait.backoff_attempt,
        "account_pause_until": _account_pause(policy=policy, obs=obs, retry_after=retry_after),
        "provider_wait_until": _asked_until(policy=policy, obs=obs, asked_s=wait.guidance_s),
    }
    if bounds.requests_used >= bounds.max_requests:
        # No wake-up follows a spent budget: a note that one was capped at the deadline would mislead.
        notes = wait.notes[:-1] if wait.capped else wait.notes
        return escalate(
            Reason.REQUEST_BUDGET_EXHAUSTED,
            interpreted,
            f"{explanation}; {_budget_spent(bounds=bounds)}",
            warnings=warnings + notes,
            **common,
            **extra,
        )
    return Decision(
        action=Action.WAIT,
        status=Status.RUNNING,
        interpreted_state=interpreted,
        explanation=explanation,
        next_poll_at=wait.next_poll_at,
        delay_source=wait.delay_source,
        delay_ms=wait.delay_ms,
        warnings=warnings + wait.notes,
        **common,
        **extra,
    )


def _plan(*, reading: Reading, retry_after: Hint | None, poll_hint: Hint | None, rate_limited: bool) -> Wait:
    policy, bounds = reading.policy, reading.bounds
    base_s, max_s = policy.base_delay_s, policy.max_delay_s
    if rate_limited:
        # A 429 without guidance gets a much longer local delay than ordinary backoff.
        base_s = max(base_s, policy.rate_limited_delay_s)
        max_s = max(max_s, policy.rate_limited_delay_s * 8)
    return plan_wait(
        now=reading.obs.received_at,
        deadline_at=bounds.deadline_at,
        retry_after=retry_after,
        poll_hint=poll_hint,
        base_s=base_s,
        max_s=max_s,
        jitter_floor=policy.jitter_floor,
        backoff_attempt=bounds.backoff_attempt,
        hint_floor_s=policy.hint_floor_s,
        hint_cap_s=policy.hint_cap_s,
        rng=reading.rng,
        paced_spacing_s=bounds.check_spacing_s,
        paced_checks_left=bounds.max_requests - bounds.requests_used,
        multiplier=policy.backoff_multiplier,
    )


def _budget_spent(*, bounds: Bounds) -> str:
    spent = f"all {bounds.max_requests} status requests are spent"
    if bounds.check_spacing_s is None:
        return spent
    # Inside a window the last check falls in its final spacing: the card comes back at the end of
    # the window a person granted, and says so.
    return f"that was the last check of the window, which ends {bounds.deadline_at:%Y-%m-%d %H:%M:%S} UTC; {spent}"


def transport_failure(
    *,
    reading: Reading,
    interpreted: str,
    what: str,
    spent_reason: Reason,
    rate_limited: bool = False,
) -> Decision:
    """A response that tells nothing about the job: charged to the transport budget too."""
    policy, bounds, obs = reading.policy, reading.bounds, reading.obs
    failures = bounds.transport_failures_used + 1
    explanation = f"{what} (transport failure {failures} of {bounds.max_transport_failures})"
    if failures >= bounds.max_transport_failures:
        retry_after = _retry_after(obs)
        return escalate(
            spent_reason,
            interpreted,
            f"{explanation}; the transport budget is spent",
            charge_transport=True,
            backoff_attempt=bounds.backoff_attempt,
            account_pause_until=_account_pause(policy=policy, obs=obs, retry_after=retry_after),
            provider_wait_until=_asked_until(
                policy=policy, obs=obs, asked_s=None if retry_after is None else retry_after.delay_s
            ),
        )
    return wait_decision(
        reading=reading,
        interpreted=interpreted,
        explanation=explanation,
        rate_limited=rate_limited,
        charge_transport=True,
    )


def _retry_after(obs: Observation) -> Hint | None:
    date = obs.header("date")
    return parse_retry_after(
        list(obs.header("retry-after")), now=obs.received_at, date_header=date[0] if len(date) == 1 else None
    )


def _account_pause(*, policy: Policy, obs: Observation, retry_after: Hint | None) -> datetime | None:
    """A 429/503 with Retry-After asks the whole provider account to back off, for as long as it
    said: not capped at this operation's own deadline (other operations outlive it), only at the
    longest any operation may be watched."""
    if obs.http_status not in (429, 503) or retry_after is None or retry_after.delay_s is None:
        return None
    return obs.received_at + seconds(min(max(retry_after.delay_s, policy.hint_floor_s), policy.hint_absurd_s))


def _asked_until(*, policy: Policy, obs: Observation, asked_s: float | None) -> datetime | None:
    """When the provider asked to be asked again, bounded like an account pause (see above)."""
    if asked_s is None:
        return None
    return obs.received_at + seconds(min(max(asked_s, policy.hint_floor_s), policy.hint_absurd_s))
