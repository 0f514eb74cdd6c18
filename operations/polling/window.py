"""The checks of a window a human granted: "N minutes / M checks" spends its M checks across the window.

docs/DESIGN.md section 4, item 4. The window, from its first check to its end (the new deadline), is
cut into M slots of one spacing each (spacing = window / M); check k belongs to slot k, so the last
check falls in the window's final spacing and the window lasts. The first check goes out at the
start of its slot, promptly (the job may have finished while the card waited) unless the provider
asked to wait; every other check is jittered inside its own slot, uniform in
[slot start + jitter_floor * spacing, slot end - margin]: never closer than floor * spacing to the
check before it, never at or after the window's end (a wake-up there is a deadline, where the
operation goes back to a human without a request).

The slots are counted back from the window's end by the checks still to come, so nothing but the
deadline, the spacing and the budget left is needed to place the next check, and a check made late
(a provider's wait, a paused account, a busy dispatcher) does not move the later ones earlier or
push the last one out of the final spacing. Provider guidance is a minimum: a check is never sent
sooner than the provider asked, which may carry it past its slot (then the checks after it keep
floor * spacing apart and any that would fall at or after the end are not sent: the deadline comes
first). Backoff plays no part inside a window.

Pure: the caller passes `now`, the provider's guidance and the RNG.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from operations.polling.signals import seconds
from operations.vocabulary import DelaySource

# How far before its slot's end a check is planned at the latest: the dispatcher's next pass and a
# worker's pick-up take a moment, and a last check planned at the very end would reach the gate
# after the deadline, where it is a deadline card instead of the check the person was promised.
END_MARGIN_S = 5.0
END_MARGIN_SHARE = 0.2


@dataclass(frozen=True)
class Window:
    """A granted window: its first check, its end (the new deadline), its checks and their spacing."""

    first_at: datetime
    ends_at: datetime
    checks: int
    spacing_s: float


@dataclass(frozen=True)
class Slot:
    """Where one check of a window may fall: from `earliest` to `latest`, both inside the window."""

    earliest: datetime
    latest: datetime


@dataclass(frozen=True)
class PacedWait:
    next_poll_at: datetime
    delay_s: float
    delay_source: DelaySource


def open_window(*, now: datetime, not_before: datetime | None, ends_at: datetime, checks: int) -> Window:
    """The window an extension grants: the first check at once, or when the provider's wait ends.

    `not_before`: the latest of the provider's asks (Retry-After, a poll hint, an account pause).
    The spacing divides the window, from the first check to its end, by its M checks: one slot each.
    """
    if checks < 1:
        raise ValueError("a window holds at least one check")
    first_at = now if not_before is None or not_before <= now else not_before
    remaining_s = max((ends_at - first_at).total_seconds(), 0.0)
    return Window(first_at=first_at, ends_at=ends_at, checks=checks, spacing_s=remaining_s / checks)


def end_margin_s(spacing_s: float) -> float:
    """How far before its slot's end a check falls at the latest (see END_MARGIN_S)."""
    return min(END_MARGIN_S, END_MARGIN_SHARE * spacing_s)


def slot(*, ends_at: datetime, spacing_s: float, after: int, jitter_floor: float) -> Slot:
    """The slot of the check that has `after` checks of the window after it (0: the last check,
    whose slot is the window's final spacing)."""
    end = ends_at - timedelta(seconds=spacing_s * max(after, 0))
    latest = end - seconds(end_margin_s(spacing_s))
    earliest = min(end - seconds(spacing_s * (1.0 - jitter_floor)), latest)
    return Slot(earliest=earliest, latest=latest)


def next_check(
    *,
    now: datetime,
    ends_at: datetime,
    spacing_s: float,
    checks_left: int,
    jitter_floor: float,
    rng: random.Random,
    guidance_s: float | None = None,
    guidance_source: DelaySource = DelaySource.PROVIDER_RETRY_AFTER,
) -> PacedWait:
    """The next check of a window, after the check answered at `now`.

    `checks_left`: the window's checks still to come, this next one included (the budget left).
    Jittered inside its own slot, at least floor * spacing after `now`, and never sooner than the
    provider asked (`guidance_s`, already validated; it then names the delay's source). The caller
    caps the wake-up at the deadline.
    """
    where = slot(ends_at=ends_at, spacing_s=spacing_s, after=max(checks_left, 1) - 1, jitter_floor=jitter_floor)
    at = where.earliest + seconds(rng.uniform(0.0, (where.latest - where.earliest).total_seconds()))
    at = max(at, now + seconds(jitter_floor * spacing_s))
    source = DelaySource.MANUAL_EXTENSION
    if guidance_s is not None and now + seconds(guidance_s) > at:
        at, source = now + seconds(guidance_s), guidance_source
    return PacedWait(next_poll_at=at, delay_s=(at - now).total_seconds(), delay_source=source)


def plan_checks(
    *,
    window: Window,
    jitter_floor: float,
    rng: random.Random,
    guidance_s: Sequence[float | None] = (),
) -> list[datetime]:
    """Every check of the window, as the controller will place them if each answer is "still pending".

    `guidance_s[k]`: how long the provider asks to wait after check k (None: no ask). A check that
    would fall at or after the window's end is not planned: the window ends first.
    """
    planned: list[datetime] = []
    at = window.first_at
    for index in range(window.checks):
        if at >= window.ends_at:
            break
        planned.append(at)
        guidance = guidance_s[index] if index < len(guidance_s) else None
        at = next_check(
            now=at,
            ends_at=window.ends_at,
            spacing_s=window.spacing_s,
            checks_left=window.checks - index - 1,
            jitter_floor=jitter_floor,
            rng=rng,
            guidance_s=guidance,
        ).next_poll_at
    return planned


def upcoming_checks(
    *, next_poll_at: datetime, spacing_s: float, checks_left: int, ends_at: datetime, jitter_floor: float
) -> list[datetime]:
    """The checks still to come in a window, for people: the next one, then each later one at the
    latest moment it can fall (the end of its slot, or floor * spacing after the one before it), so
    the real check comes at or before its mark unless the provider asks to wait."""
    planned: list[datetime] = []
    at = next_poll_at
    for after in range(max(checks_left, 0) - 1, -1, -1):
        if at >= ends_at:
            break
        planned.append(at)
        if after:
            latest = slot(ends_at=ends_at, spacing_s=spacing_s, after=after - 1, jitter_floor=jitter_floor).latest
            at = max(latest, at + seconds(jitter_floor * spacing_s))
    return planned
