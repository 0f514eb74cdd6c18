"""The checks of a window a human granted: "N minutes / M checks" spends its M checks across the window.

docs/DESIGN.md section 4, item 4. The first check goes out promptly (the job may have finished while
the card waited) unless the provider asked to wait longer; the other M-1 are paced: spacing =
remaining window / M, each wake-up jittered within [jitter_floor * spacing, spacing], never sooner
than the provider asked and never at or after the window's end (a wake-up there is a deadline, where
the operation goes back to a human without a request). Backoff plays no part inside a window.

Pure: the caller passes `now`, the provider's guidance and the RNG.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from operations.polling.schedule import paced_wait
from operations.polling.signals import seconds


@dataclass(frozen=True)
class Window:
    """A granted window: its first check, its end (the new deadline), its checks and their spacing."""

    first_at: datetime
    ends_at: datetime
    checks: int
    spacing_s: float


def open_window(*, now: datetime, not_before: datetime | None, ends_at: datetime, checks: int) -> Window:
    """The window an extension grants: the first check at once, or when the provider's wait ends.

    `not_before`: the latest of the provider's asks (Retry-After, a poll hint, an account pause).
    The spacing divides what remains of the window after the first check by all M checks, so the
    last one falls about one spacing before the end, even at the top of its jitter.
    """
    if checks < 1:
        raise ValueError("a window holds at least one check")
    first_at = now if not_before is None or not_before <= now else not_before
    remaining_s = max((ends_at - first_at).total_seconds(), 0.0)
    return Window(first_at=first_at, ends_at=ends_at, checks=checks, spacing_s=remaining_s / checks)


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
        at = paced_wait(
            after=at, spacing_s=window.spacing_s, jitter_floor=jitter_floor, rng=rng, guidance_s=guidance
        ).next_poll_at
    return planned


def upcoming_checks(*, next_poll_at: datetime, spacing_s: float, checks_left: int, ends_at: datetime) -> list[datetime]:
    """The checks still to come in a window, for people: the next one, then one spacing apart.

    Each later one is drawn at the top of its jitter, so the real check comes at or before it.
    """
    return [
        moment
        for moment in (next_poll_at + seconds(spacing_s * index) for index in range(max(checks_left, 0)))
        if moment < ends_at
    ]
