"""When to look next: provider guidance first, then local backoff with jitter, never past the deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from operations.polling.signals import Hint, seconds
from operations.vocabulary import DelaySource


@dataclass(frozen=True)
class Wait:
    next_poll_at: datetime
    delay_source: DelaySource
    delay_ms: int
    backoff_attempt: int
    notes: tuple[str, ...] = ()


def backoff_raw(*, base_s: float, max_s: float, attempt: int) -> float:
    # 2**attempt overflows float long before it matters; the cap makes large attempts moot.
    return min(max_s, base_s * 2 ** min(attempt, 62))


def jittered(raw_s: float, *, jitter_floor: float, rng: random.Random) -> float:
    """Uniform in [floor * raw, raw]: spreads a fleet of operations so they never poll in step."""
    return rng.uniform(jitter_floor * raw_s, raw_s)


def plan_wait(
    *,
    now: datetime,
    deadline_at: datetime,
    retry_after: Hint | None,
    poll_hint: Hint | None,
    base_s: float,
    max_s: float,
    jitter_floor: float,
    backoff_attempt: int,
    hint_floor_s: float,
    hint_cap_s: float,
    rng: random.Random,
) -> Wait:
    """The next wake-up, by docs/DESIGN.md section 4's precedence, capped at the deadline.

    1. Retry-After is a minimum: pollerdash never looks sooner than the provider asked.
    2. A valid body poll hint, clamped to [floor, cap].
    3. Local backoff: raw = min(max, base * 2**attempt), actual uniform in [floor*raw, raw].
    A wake-up that would fall after the deadline is moved to the deadline, where the operation is
    escalated without a request.
    """
    notes: list[str] = []
    for hint in (retry_after, poll_hint):
        if hint is not None and hint.note:
            notes.append(hint.note)
    attempt = backoff_attempt
    if retry_after is not None and retry_after.delay_s is not None:
        delay_s, source = max(retry_after.delay_s, hint_floor_s), DelaySource.PROVIDER_RETRY_AFTER
    elif poll_hint is not None and poll_hint.delay_s is not None:
        delay_s, source = max(poll_hint.delay_s, hint_floor_s), DelaySource.PROVIDER_POLL_HINT
        if delay_s > hint_cap_s:
            notes.append(f"poll hint {delay_s:g} s clamped to {hint_cap_s:g} s")
            delay_s = hint_cap_s
    else:
        raw = backoff_raw(base_s=base_s, max_s=max_s, attempt=attempt)
        delay_s, source = jittered(raw, jitter_floor=jitter_floor, rng=rng), DelaySource.LOCAL_BACKOFF
        attempt += 1
    remaining_s = (deadline_at - now).total_seconds()
    if delay_s >= remaining_s:
        notes.append(f"wake-up capped at the deadline ({delay_s:.0f} s asked, {max(remaining_s, 0):.0f} s left)")
        delay_s = max(remaining_s, 0.0)
        next_poll_at = deadline_at
    else:
        next_poll_at = now + seconds(delay_s)
    return Wait(
        next_poll_at=next_poll_at,
        delay_source=source,
        delay_ms=round(delay_s * 1000),
        backoff_attempt=attempt,
        notes=tuple(notes),
    )
