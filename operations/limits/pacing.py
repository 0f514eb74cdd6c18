"""Provider-account pacing: `rate_limit_per_s` across every operation, process and host.

Two places enforce it, consistently:

- The dispatcher admits claims under an exclusive lock on the account row: never more than the
  allowance of the current window minus what was sent in it and what is claimed but unsent
  (`admissible`). Each admitted claim thus holds a reserved send slot until it is charged.
- The charge (controller._charge) enforces the exact limit at send time. A charge that carries a
  live admitted claim spends its reserved slot under a shared lock on the account (workers of one
  account charge in parallel; a pause still serialises with them) after checking that the window
  has room; any other charge (no claim, or a claim whose lease ran out) counts the window under
  the exclusive lock and waits for room or defers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from operations.infrastructure import fastsql
from operations.models import Operation, ProviderAccount, StatusCheck
from operations.vocabulary import POLLABLE_STATUSES

# The window is stretched past one second so that the spread between the moment a request is
# charged (StatusCheck.sent_at) and the moment it reaches the provider cannot fit one request
# too many into any real one-second window: a relative margin, plus an absolute one for the
# durable commit of the charge and the scheduling noise of a busy host (measured on a loaded
# 2-core machine: charge-to-send p50 14 ms, p99 38 ms, max 46 ms).
WINDOW_MARGIN = 1.03
WINDOW_SLACK_S = 0.1


@dataclass(frozen=True)
class Allowance:
    window: timedelta
    max_in_window: int


# The rates a profile may declare (operations/profiles/checks.py checks them): outside them the window
# arithmetic overflows the database's integers and timestamps.
MIN_RATE_PER_S = 0.001
MAX_RATE_PER_S = 10_000


def allowance(*, rate_per_s: float) -> Allowance:
    """N requests per window: rate 10/s -> 10 per 1.13 s; rate 0.5/s -> 1 per 2.16 s."""
    # A row stored before the bounds existed must not stop pacing for every account.
    rate_per_s = min(max(rate_per_s, MIN_RATE_PER_S), MAX_RATE_PER_S)
    base_s = max(1.0, 1.0 / rate_per_s)
    return Allowance(
        window=timedelta(seconds=base_s * WINDOW_MARGIN + WINDOW_SLACK_S),
        max_in_window=max(1, math.floor(rate_per_s * base_s)),
    )


def lock_account(*, name: str) -> ProviderAccount:
    """The account row, locked for this transaction (created on first use)."""
    account = ProviderAccount.objects.select_for_update().filter(name=name).first()
    if account is None:
        ProviderAccount.objects.get_or_create(name=name)
        account = ProviderAccount.objects.select_for_update().get(name=name)
    return account


_SHARED_NAMES = ("id", "name", "paused_until", "pause_reason")


def share_account(*, name: str) -> ProviderAccount | None:
    """The account row under a shared lock (PostgreSQL FOR SHARE), or None if it does not exist.

    Shared holders do not wait for each other, but they do wait for a transaction that holds the
    row exclusively (a pause being recorded, a dispatcher admitting claims, a charge counting the
    window), and such a transaction waits for them: a charge sees every committed pause and none
    is recorded under it. Count the window in a later statement (`has_room`): a statement that
    waited for the lock still reads everything else from its snapshot taken before the wait, so
    it would miss the sends the exclusive holder just committed. SQLite serialises every writing
    transaction anyway, so a plain read is enough there (fastsql.lock_clause).
    """
    # Plain SQL on every charge (fastsql says why).
    row = fastsql.fetchone(
        f"SELECT id, name, paused_until, pause_reason FROM {fastsql.table(ProviderAccount)} WHERE name = %s"
        f"{fastsql.lock_clause(share=True)}",
        [name],
    )
    return None if row is None else fastsql.instance(ProviderAccount, _SHARED_NAMES, row)


def has_room(*, account: str, rate_per_s: float, now: datetime) -> bool:
    """Whether one more request to this account fits the allowance now."""
    rule = allowance(rate_per_s=rate_per_s)
    return _sent_in_window(account=account, rule=rule, now=now) < rule.max_in_window


def room(*, account: str, rate_per_s: float, now: datetime) -> int:
    """How many more requests to this account fit the allowance now (a group charges that many)."""
    rule = allowance(rate_per_s=rate_per_s)
    return rule.max_in_window - _sent_in_window(account=account, rule=rule, now=now)


def _sent_in_window(*, account: str, rule: Allowance, now: datetime) -> int:
    # Bounded: counting stops at the allowance, whatever the traffic. Plain SQL: every charge
    # runs it (operations/infrastructure/fastsql.py says why).
    row = fastsql.fetchone(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {fastsql.table(StatusCheck)} "
        f"WHERE {fastsql.column(StatusCheck, 'account')} = %s AND {fastsql.column(StatusCheck, 'sent_at')} > %s "
        "LIMIT %s) AS recent",
        [account, fastsql.prep(StatusCheck, "sent_at", now - rule.window), rule.max_in_window],
    )
    return row[0] if row else 0


def next_free_send(*, account: str, rate_per_s: float, now: datetime) -> datetime:
    """Earliest time a request to this account fits the allowance (`now` when it fits now).

    Call with the account row locked, so the answer holds until the charge commits.
    """
    rule = allowance(rate_per_s=rate_per_s)
    if _sent_in_window(account=account, rule=rule, now=now) < rule.max_in_window:
        return now
    # The oldest of the last N sends must leave the window before another fits.
    nth_latest = (
        StatusCheck.objects.filter(account=account)
        .order_by("-sent_at")
        .values_list("sent_at", flat=True)[rule.max_in_window - 1 : rule.max_in_window]
    )
    return nth_latest[0] + rule.window


def claimed_unsent(*, account: str, now: datetime) -> int:
    """Claims the dispatcher handed to workers that have not been charged yet (live leases only).

    A worker's charge clears `claimed_at`, and from then on the request counts in the window
    instead, so every admitted claim is counted exactly once until it leaves the window.
    """
    live = ", ".join(["%s"] * len(POLLABLE_STATUSES))
    row = fastsql.fetchone(
        f"SELECT COUNT(*) FROM {fastsql.table(Operation)} WHERE {fastsql.column(Operation, 'account')} = %s "
        f"AND {fastsql.column(Operation, 'status')} IN ({live}) "
        # Claimed operations are due: this keeps the scan on the due index.
        f"AND {fastsql.column(Operation, 'next_poll_at')} <= %s "
        f"AND {fastsql.column(Operation, 'claimed_at')} IS NOT NULL "
        f"AND {fastsql.column(Operation, 'lease_expires_at')} > %s",
        [account, *sorted(POLLABLE_STATUSES), *[fastsql.prep(Operation, "next_poll_at", now)] * 2],
    )
    return row[0] if row else 0


def admissible(*, account: str, rate_per_s: float, now: datetime) -> int:
    """How many more claims the dispatcher may hand out for this account right now.

    The allowance of the current window minus what was already sent in it and what was claimed
    but not yet sent. Call with the account row locked (like the charge), so two dispatchers
    cannot both spend the same room. The charge re-checks the exact limit at send time.
    """
    rule = allowance(rate_per_s=rate_per_s)
    sent = _sent_in_window(account=account, rule=rule, now=now)
    return max(0, rule.max_in_window - sent - claimed_unsent(account=account, now=now))
