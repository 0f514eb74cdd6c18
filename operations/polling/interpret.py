"""What a readable 2xx body says about the job: still pending, done, ended without a result, or a
state the profile does not know (docs/DESIGN.md section 5)."""

from __future__ import annotations

from typing import Any

from operations.polling import fields
from operations.polling.model import Decision, Policy
from operations.polling.outcomes import complete, escalate
from operations.polling.states import MISSING, StateClass, describe_state, extract
from operations.polling.waits import Reading, wait_decision
from operations.vocabulary import Reason, Status

# Terminal provider states without a result: (status, interpreted state, meaning, error code).
_ENDINGS = {
    StateClass.FAILURE: (Status.FAILED, "failure", "the job failed", "provider_failed"),
    StateClass.CANCELLED: (Status.CANCELLED, "cancelled", "the job was cancelled", "provider_cancelled"),
    StateClass.EXPIRED: (Status.EXPIRED, "expired", "the job expired at the provider", "provider_expired"),
}


def interpret_body(*, reading: Reading, body: object) -> Decision:
    policy = reading.policy
    raw_state = extract(body, policy.state_field)
    shown_state = describe_state(raw_state)
    state = None if raw_state is MISSING else raw_state
    state_class = policy.table.classify(state, extra_pending=reading.bounds.extra_pending)
    progress, counts, warnings = fields.progress(policy, body)
    common: dict[str, Any] = {"provider_state": shown_state, "progress_percent": progress, "progress_counts": counts}

    if state_class is StateClass.PENDING:
        return _pending(reading=reading, body=body, shown_state=shown_state, warnings=warnings, common=common)
    if state_class is StateClass.SUCCESS:
        return _success(
            policy=policy, body=body, shown_state=shown_state, counts=counts, warnings=warnings, common=common
        )
    if state_class in _ENDINGS:
        status, interpreted, meaning, code = _ENDINGS[state_class]
        return complete(
            status,
            interpreted,
            f"provider state {shown_state!r}: {meaning}",
            error=fields.provider_error(policy, body, code=code, state=shown_state),
            warnings=warnings,
            **common,
        )
    return escalate(
        Reason.UNKNOWN_STATE,
        "unknown",
        f"provider state {shown_state} is not in the {policy.profile_slug} state table"
        if not isinstance(raw_state, str)
        else f"provider state {raw_state!r} is not in the {policy.profile_slug} state table",
        warnings=warnings,
        **common,
    )


def _pending(
    *, reading: Reading, body: object, shown_state: str, warnings: tuple[str, ...], common: dict[str, Any]
) -> Decision:
    policy, obs = reading.policy, reading.obs
    expiry_problem = fields.past_own_expiry(policy, body, obs.received_at)
    if expiry_problem is not None:
        return escalate(Reason.INTEGRATION_FAILURE, "contradiction", expiry_problem, warnings=warnings, **common)
    hint, hint_warnings = fields.poll_hint(policy, body, obs.received_at)
    return wait_decision(
        reading=reading,
        interpreted="pending",
        explanation=f"provider state {shown_state!r} is pending",
        poll_hint=hint,
        warnings=warnings + hint_warnings,
        **common,
    )


def _success(
    *,
    policy: Policy,
    body: object,
    shown_state: str,
    counts: dict[str, int] | None,
    warnings: tuple[str, ...],
    common: dict[str, Any],
) -> Decision:
    values, missing = fields.required_fields(policy, body)
    if missing:
        return escalate(
            Reason.INTEGRATION_FAILURE,
            "contradiction",
            f"provider state {shown_state!r} means success but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing or empty",
            warnings=warnings,
            **common,
        )
    result = {"values": values, "counts": counts}
    if counts and counts.get("failed"):
        # DESIGN section 5: any failed item makes it partial, even when none succeeded; the counts
        # in the result say how many.
        return complete(
            Status.PARTIALLY_SUCCEEDED,
            "success",
            f"provider state {shown_state!r} with {counts['failed']} failed items",
            result=result,
            warnings=warnings,
            **common,
        )
    return complete(
        Status.SUCCEEDED,
        "success",
        f"provider state {shown_state!r} is success",
        result=result,
        warnings=warnings,
        **common,
    )
