"""Provider-account pacing: `rate_limit_per_s` across every operation, process and host.

The limit is enforced where the request is charged: under a row lock on the account, pollerdash
counts the requests it sent to that account in the last window and charges this one only if it
fits. The dispatcher also admits no more claims per account than the window allows, so workers
never queue up behind a slow account.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from operations.models import Operation, ProviderAccount, StatusCheck
from operations.vocabulary import POLLABLE_STATUSES

# The window is stretched past one second so that the spread between the moment a request is
# charged (StatusCheck.sent_at) and the moment it reaches the provider cannot fit one request
# too many into any real one-second window: a relative margin, plus an absolute one for the
# scheduling noise of a busy host (a worker descheduled between its charge and its send).
WINDOW_MARGIN = 1.03
WINDOW_SLACK_S = 0.05


@dataclass(frozen=True)
class Allowance:
    window: timedelta
    max_in_window: int


def allowance(rate_per_s: float) -> Allowance:
    """N requests per window: rate 10/s -> 10 per 1.08 s; rate 0.5/s -> 1 per 2.11 s."""
    base_s = max(1.0, 1.0 / rate_per_s)
    return Allowance(
        window=timedelta(seconds=base_s * WINDOW_MARGIN + WINDOW_SLACK_S),
        max_in_window=max(1, math.floor(rate_per_s * base_s)),
    )


def lock_account(name: str) -> ProviderAccount:
    """The account row, locked for this transaction (created on first use)."""
    account = ProviderAccount.objects.select_for_update().filter(name=name).first()
    if account is None:
        ProviderAccount.objects.get_or_create(name=name)
        account = ProviderAccount.objects.select_for_update().get(name=name)
    return account


def next_free_send(*, account: str, rate_per_s: float, now: datetime) -> datetime:
    """Earliest time a request to this account fits the allowance (`now` when it fits now).

    Call with the account row locked, so the answer holds until the charge commits.
    """
    rule = allowance(rate_per_s)
    recent = list(
        StatusCheck.objects.filter(account=account, sent_at__gt=now - rule.window)
        .order_by("-sent_at")
        .values_list("sent_at", flat=True)[: rule.max_in_window]
    )
    if len(recent) < rule.max_in_window:
        return now
    # The oldest of the last N sends must leave the window before another fits.
    return recent[-1] + rule.window


def sends_in_window(*, account: str, rate_per_s: float, now: datetime) -> int:
    rule = allowance(rate_per_s)
    return StatusCheck.objects.filter(account=account, sent_at__gt=now - rule.window).count()


def claimed_unsent(*, account: str, now: datetime) -> int:
    """Claims the dispatcher handed to workers that have not been charged yet (live leases only).

    A worker's charge clears `claimed_at`, and from then on the request counts in the window
    instead, so every admitted claim is counted exactly once until it leaves the window.
    """
    return (
        Operation.objects.filter(
            account=account,
            status__in=sorted(POLLABLE_STATUSES),
            next_poll_at__lte=now,  # claimed operations are due: this keeps the scan on the due index
            claimed_at__isnull=False,
            lease_expires_at__gt=now,
        )
        .order_by()
        .count()
    )


def admissible(*, account: str, rate_per_s: float, now: datetime) -> int:
    """How many more claims the dispatcher may hand out for this account right now.

    The allowance of the current window minus what was already sent in it and what was claimed
    but not yet sent. Call with the account row locked (like the charge), so two dispatchers
    cannot both spend the same room. The charge re-checks the exact limit at send time.
    """
    rule = allowance(rate_per_s)
    sent = (
        StatusCheck.objects.filter(account=account, sent_at__gt=now - rule.window)
        .order_by()[: rule.max_in_window]
        .count()
    )
    return max(0, rule.max_in_window - sent - claimed_unsent(account=account, now=now))
