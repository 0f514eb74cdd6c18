"""The decision history: every decision and refused attempt, filtered, newest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet

from escalations.selectors.paging import PAGE_SIZE, page_number
from operations.cards.options import Kind
from operations.infrastructure.query_dates import parse_bound, parse_zone
from operations.models import CardActivity, Decision, ProviderProfile
from operations.vocabulary import Reason

_Row = TypeVar("_Row", Decision, CardActivity)

OUTCOMES = [choice for choice, _ in Decision.Outcome.choices]
OPTION_KINDS = [kind.value for kind in Kind]


@dataclass(frozen=True)
class HistoryFilters:
    user: str = ""
    outcome: str = ""
    option: str = ""
    reason: str = ""
    provider: str = ""
    operation: str = ""
    # The bounds as typed (a day, or a local date and time) and the zone they are read in.
    since: str = ""
    until: str = ""
    tz: str = ""
    since_at: datetime | None = None
    until_at: datetime | None = None

    @classmethod
    def from_query(cls, query: dict) -> HistoryFilters:
        """The filters of a history URL; FilterError names a day that cannot be applied."""
        outcome = str(query.get("outcome", ""))
        option = str(query.get("option", ""))
        reason = str(query.get("reason", ""))
        zone = parse_zone(query.get("tz"))
        since_text, until_text = (str(query.get(name) or "").strip()[:40] for name in ("since", "until"))
        return cls(
            user=str(query.get("user", ""))[:150],
            outcome=outcome if outcome in OUTCOMES else "",
            option=option if option in OPTION_KINDS else "",
            reason=reason if reason in {r.value for r in Reason} else "",
            provider=str(query.get("provider", ""))[:64],
            operation=str(query.get("operation", "")).strip()[:40],
            since=since_text,
            until=until_text,
            tz="" if zone is UTC else str(zone),
            since_at=parse_bound(since_text, field="since", zone=zone, end=False),
            until_at=parse_bound(until_text, field="until", zone=zone, end=True),
        )

    @staticmethod
    def _input(text: str) -> str:
        """A bound as a datetime-local input shows it (a day starts at 00:00)."""
        return f"{text}T00:00" if len(text) == 10 else text[:16]

    @property
    def since_input(self) -> str:
        return self._input(self.since)

    @property
    def until_input(self) -> str:
        # An "until" day runs to its end: shown as that day's last minute.
        return f"{self.until}T23:59" if len(self.until) == 10 else self.until[:16]

    @property
    def active(self) -> bool:
        return any(
            (self.user, self.outcome, self.option, self.reason, self.provider, self.operation, self.since, self.until)
        )

    def query(self) -> str:
        params = {
            "user": self.user,
            "outcome": self.outcome,
            "option": self.option,
            "reason": self.reason,
            "provider": self.provider,
            "operation": self.operation,
            "since": self.since,
            "until": self.until,
            "tz": self.tz,
        }
        return urlencode({k: v for k, v in params.items() if v})


def history_queryset(*, filters: HistoryFilters) -> QuerySet[Decision]:
    query = Decision.objects.select_related(
        "escalation", "operation__provider", "authorization", "confirms", "confirmed_by"
    ).order_by("-decided_at", "-pk")
    if filters.user:
        # The name shown in the history: the one the decision was taken under.
        query = query.filter(username=filters.user)
    if filters.outcome:
        query = query.filter(outcome=filters.outcome)
        if filters.outcome == Decision.Outcome.AWAITING_SECOND:
            # Still waiting: an acceptance a second responder confirmed is no longer awaiting anyone.
            query = query.filter(confirmed_by__isnull=True)
    if filters.option:
        query = query.filter(Q(option=filters.option) | Q(option__startswith=f"{filters.option}:"))
    return _card_filters(query, filters, at="decided_at")


def activity_queryset(*, filters: HistoryFilters) -> QuerySet[CardActivity]:
    """Acknowledgements, hand-overs and notes matching the history's filters (outcome and option
    filters are about decisions: they leave this list out)."""
    query = CardActivity.objects.select_related("escalation", "operation__provider").order_by("-at", "-pk")
    if filters.outcome or filters.option:
        return query.none()
    if filters.user:
        query = query.filter(username=filters.user)
    return _card_filters(query, filters, at="at")


def _card_filters(query: QuerySet[_Row], filters: HistoryFilters, *, at: str) -> QuerySet[_Row]:
    """The filters decisions and card activity share: the card's reason, the provider, the operation,
    and the date range on the row's time field `at`."""
    if filters.reason:
        query = query.filter(escalation__reason=filters.reason)
    if filters.provider:
        query = query.filter(operation__provider__slug=filters.provider)
    if filters.operation:
        query = query.filter(operation_id=filters.operation)
    if filters.since_at:
        query = query.filter(**{f"{at}__gte": filters.since_at})
    if filters.until_at:
        query = query.filter(**{f"{at}__lt": filters.until_at})
    return query


def operation_activity(*, operation_id: str) -> list[CardActivity]:
    """Every acknowledgement, hand-over and note on the operation's cards, oldest first."""
    return list(CardActivity.objects.filter(operation_id=operation_id).order_by("at", "pk"))


@dataclass
class HistoryView:
    page: Page
    filters: HistoryFilters
    users: list[str]
    providers: list[str]
    # The newest acknowledgements, hand-overs and notes matching the filters (all of them: the CSV).
    activity: list[CardActivity] = field(default_factory=list)
    activity_more: bool = False


ACTIVITY_SHOWN = 50


def history(*, filters: HistoryFilters, page: object = 1) -> HistoryView:
    page_obj = Paginator(history_queryset(filters=filters), PAGE_SIZE).get_page(page_number(page))
    users = list(Decision.objects.order_by("username").values_list("username", flat=True).distinct())
    providers = list(ProviderProfile.objects.order_by("slug").values_list("slug", flat=True))
    activity = list(activity_queryset(filters=filters)[: ACTIVITY_SHOWN + 1])
    return HistoryView(
        page=page_obj,
        filters=filters,
        users=users,
        providers=providers,
        activity=activity[:ACTIVITY_SHOWN],
        activity_more=len(activity) > ACTIVITY_SHOWN,
    )
