"""Per-agent quotas: operations not done, new registrations per minute, cards opened per hour.

An agent over a quota has its new registrations refused (QuotaExceeded: 429 `quota_exceeded` with
Retry-After from the API, the same text from the MCP server); nothing it already registered is
touched. Cards count against the agent whose operations opened them: an operation that needs a
human always gets its card (nothing is lost on the poll path), but an agent whose jobs keep
landing on people cannot add more until the hour is over. A setting of 0 turns its quota off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from operations.limits import ratelimit
from operations.models import Agent, Operation
from operations.vocabulary import NOT_DONE_STATUSES

CARD_WINDOW_S = 3600
REGISTRATION_WINDOW_S = 60
# When a slot among the open operations frees up is unknown: the time to ask again.
OPEN_OPERATIONS_RETRY_S = 60


@dataclass
class QuotaExceeded(Exception):
    """A new registration would pass one of the agent's quotas; nothing was written."""

    quota: str  # open_operations | registrations_per_minute | cards_per_hour
    message: str
    retry_after_s: int

    def __str__(self) -> str:
        return f"quota_exceeded ({self.quota}): {self.message}"


def _cards_key(agent_id: int) -> str:
    return f"cards:agent:{agent_id}"


def charge_registration(*, agent: Agent, now: datetime) -> None:
    """Check the agent's quotas for one new operation and count it, or raise QuotaExceeded.

    Call inside the registration's transaction: a registration refused later takes its count
    back with it, and the agent's row lock keeps the open-operations count exact when one agent
    registers from many processes at once.
    """
    Agent.objects.select_for_update().filter(pk=agent.pk).first()
    cards_limit = settings.AGENT_CARDS_PER_HOUR
    if cards_limit > 0:
        cards, left = ratelimit.used(key=_cards_key(agent.pk), window_s=CARD_WINDOW_S, now=now)
        if cards >= cards_limit:
            raise QuotaExceeded(
                "cards_per_hour",
                f"The cards-per-hour quota is used up: your operations needed a person {cards} times this hour (at "
                f"most {cards_limit} per agent), so new registrations wait until the hour ends; operations you "
                f"already registered are still watched. Retry after {left} s",
                left,
            )
    open_limit = settings.AGENT_MAX_OPEN_OPERATIONS
    if open_limit > 0:
        open_now = Operation.objects.filter(agent=agent, status__in=sorted(NOT_DONE_STATUSES)).count()
        if open_now >= open_limit:
            raise QuotaExceeded(
                "open_operations",
                f"The open-operations quota is used up: you have {open_now} operations not done (at most "
                f"{open_limit} per agent); wait for some to finish or cancel those you no longer need, then retry",
                OPEN_OPERATIONS_RETRY_S,
            )
    per_minute = settings.AGENT_REGISTRATIONS_PER_MINUTE
    if per_minute > 0:
        retry_s = ratelimit.take(
            key=f"registrations:agent:{agent.pk}", limit=per_minute, window_s=REGISTRATION_WINDOW_S, now=now
        )
        if retry_s is not None:
            raise QuotaExceeded(
                "registrations_per_minute",
                f"The registrations-per-minute quota is used up: at most {per_minute} new registrations per "
                f"minute per agent; retry after {retry_s} s",
                retry_s,
            )


def count_card(*, agent_id: int, now: datetime) -> None:
    """A card opened for one of the agent's operations; call inside the transaction that opens it."""
    ratelimit.take(key=_cards_key(agent_id), limit=None, window_s=CARD_WINDOW_S, now=now)
