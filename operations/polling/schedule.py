"""When to look next: provider guidance first, then local backoff with jitter, never past the deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from operations.polling.signals import Hint, seconds
from operations.polling.window import next_check
from operations.vocabulary import DelaySource


@dataclass(frozen=True)
class Wait:
    next_poll_at: datetime
    delay_source: DelaySource
    delay_ms: int
    backoff_attempt: int
    notes: tuple[str, ...] = ()
    # How long the provider asked to wait (Retry-After, poll hint), before the deadline cap.
    guidance_s: float | None = None
    # The wake-up was moved to the deadline (its note is the last of `notes`).
    capped: bool = False


# A profile's backoff multiplier (the profile checks and a database constraint hold it here):
# below 1 each wait would be shorter than the last, far above 4 backoff would jump to its cap.
MIN_BACKOFF_MULTIPLIER = 1.0
MAX_BACKOFF_MULTIPLIER = 4.0


def backoff_raw(*, base_s: float, max_s: float, attempt: int, multiplier: float = 2.0) -> float:
    # Held to its bounds here too, whatever a policy was built from.
    multiplier = min(MAX_BACKOFF_MULTIPLIER, max(MIN_BACKOFF_MULTIPLIER, multiplier))
    # multiplier**attempt overflows float long before it matters (62 doublings already pass any
    # cap): the cap makes large attempts moot.
    return min(max_s, base_s * multiplier ** min(attempt, 62))


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
    paced_spacing_s: float | None = None,
    paced_checks_left: int = 1,
    multiplier: float = 2.0,
) -> Wait:
    """The next wake-up, by docs/DESIGN.md section 4's precedence, capped at the deadline.

    1. Retry-After is a minimum: pollerdash never looks sooner than the provider asked.
    2. A valid body poll hint, clamped to [floor, cap].
    3. Local backoff: raw = min(max, base * multiplier**attempt), actual uniform in [floor*raw, raw].
    4. Inside a window a human granted (`paced_spacing_s`, with `paced_checks_left` of its checks
       still to come), the next check goes in its own slot of the window (window.next_check) in
       place of local backoff (which neither restarts nor moves on), and provider guidance still
       wins when it asks for longer.
    A wake-up that would fall after the deadline is moved to the deadline, where the operation is
    escalated without a request. `guidance_s` keeps what the provider asked for, uncapped.
    """
    guidance_s, guidance_source, notes = _guidance(
        retry_after=retry_after, poll_hint=poll_hint, hint_floor_s=hint_floor_s, hint_cap_s=hint_cap_s
    )
    if paced_spacing_s is not None:
        paced = next_check(
            now=now,
            ends_at=deadline_at,
            spacing_s=paced_spacing_s,
            checks_left=paced_checks_left,
            jitter_floor=jitter_floor,
            rng=rng,
            guidance_s=guidance_s,
            guidance_source=guidance_source,
        )
        delay_s, source = paced.delay_s, paced.delay_source
    elif guidance_s is not None:
        delay_s, source = guidance_s, guidance_source
    else:
        raw = backoff_raw(base_s=base_s, max_s=max_s, attempt=backoff_attempt, multiplier=multiplier)
        delay_s, source = jittered(raw, jitter_floor=jitter_floor, rng=rng), DelaySource.LOCAL_BACKOFF
        # Only local backoff moves on; guidance and a window's slots leave the attempt where it is.
        backoff_attempt += 1
    return _capped(
        now=now,
        deadline_at=deadline_at,
        delay_s=delay_s,
        source=source,
        attempt=backoff_attempt,
        notes=notes,
        guidance_s=guidance_s,
    )


def _capped(
    *,
    now: datetime,
    deadline_at: datetime,
    delay_s: float,
    source: DelaySource,
    attempt: int,
    notes: list[str],
    guidance_s: float | None,
) -> Wait:
    """The wake-up `delay_s` from now, moved to the deadline when it would fall at or after it."""
    remaining_s = (deadline_at - now).total_seconds()
    capped = delay_s >= remaining_s
    if capped:
        notes.append(f"wake-up capped at the deadline ({delay_s:.0f} s asked, {max(remaining_s, 0):.0f} s left)")
        delay_s = max(remaining_s, 0.0)
    return Wait(
        next_poll_at=deadline_at if capped else now + seconds(delay_s),
        delay_source=source,
        delay_ms=round(delay_s * 1000),
        backoff_attempt=attempt,
        notes=tuple(notes),
        guidance_s=guidance_s,
        capped=capped,
    )


def _guidance(
    *, retry_after: Hint | None, poll_hint: Hint | None, hint_floor_s: float, hint_cap_s: float
) -> tuple[float | None, DelaySource, list[str]]:
    """How long the provider asked to wait and by which signal (Retry-After first, else a poll
    hint clamped to [floor, cap]), with the notes the hints and the clamp leave."""
    notes = [hint.note for hint in (retry_after, poll_hint) if hint is not None and hint.note]
    if retry_after is not None and retry_after.delay_s is not None:
        return max(retry_after.delay_s, hint_floor_s), DelaySource.PROVIDER_RETRY_AFTER, notes
    if poll_hint is None or poll_hint.delay_s is None:
        return None, DelaySource.PROVIDER_RETRY_AFTER, notes
    guidance_s = max(poll_hint.delay_s, hint_floor_s)
    if guidance_s > hint_cap_s:
        notes.append(f"poll hint {guidance_s:g} s clamped to {hint_cap_s:g} s")
        guidance_s = hint_cap_s
    return guidance_s, DelaySource.PROVIDER_POLL_HINT, notes
