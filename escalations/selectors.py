"""Dashboard reads for cards, the inbox and the decision history. Nothing here writes.

Each function runs a fixed number of queries whatever the number of rows (select_related and one
aggregate per list), so the inbox and history stay fast with thousands of open cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import BooleanField, Case, Count, F, Q, QuerySet, Value, When

from escalations.cards import EXTENSION_KINDS, Card, build_card, reason_label
from escalations.models import Decision, Escalation
from escalations.options import Kind
from operations.models import Authorization, Operation, ProviderAccount, ProviderProfile
from operations.query_dates import day_end, day_start, parse_day
from operations.vocabulary import Reason

PAGE_SIZE = 50
# What an inbox row shows: loading only this keeps JSON columns (results, errors, snapshots) out.
INBOX_FIELDS = (
    "id",
    "reason",
    "state",
    "opened_at",
    "operation",
    "assignee",
    "operation__id",
    "operation__purpose",
    "operation__provider_job_id",
    "operation__business_deadline_at",
    "operation__status_requests_used",
    "operation__max_status_requests",
    "operation__provider",
    "operation__provider__slug",
    "assignee__username",
)
REASONS = [(reason.value, reason_label(reason.value)) for reason in Reason]


def _page_number(value: object) -> int:
    text = str(value or "1")
    return int(text) if text.isascii() and text.isdigit() and 0 < len(text) < 7 else 1


def _with_count(paginator: Paginator, count: int | None) -> Paginator:
    # The count is already known from an aggregate: save the COUNT(*) query.
    if count is not None:
        paginator.__dict__["count"] = count
    return paginator


# --- cards ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardView:
    card: Card
    decisions: list[Decision]

    @property
    def etag(self) -> str:
        """Changes whenever anything on the card changes (version, or a new recorded look/attempt)."""
        last = self.decisions[-1].pk if self.decisions else 0
        return f"{self.card.escalation.version}.{last}"


def card_view(*, escalation: Escalation, now: datetime) -> CardView:
    """The card of an escalation loaded with its operation and provider: three more queries."""
    operation = escalation.operation
    extensions_used = Authorization.objects.filter(operation_id=operation.pk, kind__in=EXTENSION_KINDS).count()
    paused_until = ProviderAccount.objects.filter(name=operation.account).values_list("paused_until", flat=True).first()
    decisions = list(Decision.objects.filter(escalation=escalation).order_by("decided_at", "pk"))
    # Once the card is decided nobody is awaited any more (the second responder confirmed, or
    # something else closed the card).
    is_open = escalation.state == Escalation.State.OPEN
    awaiting = next((d for d in decisions if d.outcome == Decision.Outcome.AWAITING_SECOND), None) if is_open else None
    inspections = [d for d in decisions if d.outcome == Decision.Outcome.RECORDED]
    card = build_card(
        escalation=escalation,
        operation=operation,
        now=now,
        extensions_used=extensions_used,
        paused_until=paused_until,
        awaiting=awaiting,
        inspections=inspections,
    )
    return CardView(card=card, decisions=decisions)


def card_by_id(*, escalation_id: int, now: datetime) -> CardView | None:
    escalation = Escalation.objects.select_related("operation__provider", "assignee").filter(pk=escalation_id).first()
    return None if escalation is None else card_view(escalation=escalation, now=now)


# --- inbox ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InboxFilters:
    mine: bool = False
    reason: str = ""
    provider: str = ""

    @classmethod
    def from_query(cls, query: dict) -> InboxFilters:
        reason = str(query.get("reason", ""))
        return cls(
            mine=str(query.get("mine", "")) in {"1", "true", "on"},
            reason=reason if reason in {r.value for r in Reason} else "",
            provider=str(query.get("provider", ""))[:64],
        )

    @property
    def active(self) -> bool:
        return bool(self.mine or self.reason or self.provider)

    def query(self, **changes: object) -> str:
        """The URL query for these filters with some changed: filters live in the URL."""
        current = replace(self, **changes)  # type: ignore[arg-type]
        params = {"mine": "1" if current.mine else "", "reason": current.reason, "provider": current.provider}
        return urlencode({k: v for k, v in params.items() if v})


@dataclass(frozen=True)
class InboxFacets:
    """Open-card counts grouped by (reason, provider, assigned to the viewer): each filter's count
    is computed with the other filters applied, so a number never promises rows the list hides."""

    groups: tuple[tuple[str, str, bool, int], ...]

    def count(self, *, reason: str = "", provider: str = "", mine: bool = False) -> int:
        return sum(
            n
            for group_reason, group_provider, group_mine, n in self.groups
            if (not reason or group_reason == reason)
            and (not provider or group_provider == provider)
            and (not mine or group_mine)
        )


@dataclass
class InboxView:
    page: Page
    filters: InboxFilters
    open_total: int
    reason_counts: list[tuple[str, str, int]]
    providers: list[str]
    everyone_total: int = 0
    mine_total: int = 0
    rows: list[Escalation] = field(default_factory=list)


def inbox(*, user: object, filters: InboxFilters, page: object = 1) -> InboxView:
    """Open cards needing a decision, most urgent first: business deadline soonest, then oldest."""
    open_cards = Escalation.objects.filter(state=Escalation.State.OPEN)
    user_id = getattr(user, "pk", None)
    is_mine = (
        Case(When(assignee_id=user_id, then=Value(True)), default=Value(False), output_field=BooleanField())
        if user_id is not None
        else Value(False, output_field=BooleanField())
    )
    facets = InboxFacets(
        groups=tuple(
            (reason, provider, bool(mine), n)
            for reason, provider, mine, n in open_cards.annotate(mine=is_mine)
            .values_list("reason", "operation__provider__slug", "mine")
            .annotate(n=Count("id"))
            .order_by()
        )
    )
    query: QuerySet[Escalation] = open_cards
    if filters.mine:
        query = query.filter(assignee_id=user_id)
    if filters.reason:
        query = query.filter(reason=filters.reason)
    if filters.provider:
        query = query.filter(operation__provider__slug=filters.provider)
    query = (
        query.select_related("operation__provider", "assignee")
        .only(*INBOX_FIELDS)
        .order_by(F("operation__business_deadline_at").asc(nulls_last=True), "opened_at", "pk")
    )
    known = facets.count(reason=filters.reason, provider=filters.provider, mine=filters.mine)
    paginator = _with_count(Paginator(query, PAGE_SIZE), known)
    page_obj = paginator.get_page(_page_number(page))
    providers = list(ProviderProfile.objects.order_by("slug").values_list("slug", flat=True))
    return InboxView(
        page=page_obj,
        filters=filters,
        open_total=facets.count(),
        reason_counts=[
            (value, label, facets.count(reason=value, provider=filters.provider, mine=filters.mine))
            for value, label in REASONS
        ],
        providers=providers,
        everyone_total=facets.count(reason=filters.reason, provider=filters.provider),
        mine_total=facets.count(reason=filters.reason, provider=filters.provider, mine=True),
        rows=list(page_obj.object_list),
    )


# --- history of decisions ---------------------------------------------------------------------------------

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
    since: date | None = None
    until: date | None = None

    @classmethod
    def from_query(cls, query: dict) -> HistoryFilters:
        """The filters of a history URL; FilterError names a day that cannot be applied."""
        outcome = str(query.get("outcome", ""))
        option = str(query.get("option", ""))
        reason = str(query.get("reason", ""))
        return cls(
            user=str(query.get("user", ""))[:150],
            outcome=outcome if outcome in OUTCOMES else "",
            option=option if option in OPTION_KINDS else "",
            reason=reason if reason in {r.value for r in Reason} else "",
            provider=str(query.get("provider", ""))[:64],
            operation=str(query.get("operation", "")).strip()[:40],
            since=parse_day(query.get("since"), field="since"),
            until=parse_day(query.get("until"), field="until"),
        )

    @property
    def since_at(self) -> datetime | None:
        return day_start(self.since)

    @property
    def until_at(self) -> datetime | None:
        return day_end(self.until)

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
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
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
    if filters.reason:
        query = query.filter(escalation__reason=filters.reason)
    if filters.provider:
        query = query.filter(operation__provider__slug=filters.provider)
    if filters.operation:
        query = query.filter(operation_id=filters.operation)
    if filters.since_at:
        query = query.filter(decided_at__gte=filters.since_at)
    if filters.until_at:
        query = query.filter(decided_at__lt=filters.until_at)
    return query


@dataclass
class HistoryView:
    page: Page
    filters: HistoryFilters
    users: list[str]
    providers: list[str]


def history(*, filters: HistoryFilters, page: object = 1) -> HistoryView:
    page_obj = Paginator(history_queryset(filters=filters), PAGE_SIZE).get_page(_page_number(page))
    users = list(Decision.objects.order_by("username").values_list("username", flat=True).distinct())
    providers = list(ProviderProfile.objects.order_by("slug").values_list("slug", flat=True))
    return HistoryView(page=page_obj, filters=filters, users=users, providers=providers)


def open_count() -> int:
    return Escalation.objects.filter(state=Escalation.State.OPEN).count()


def operation_cards(*, operation: Operation, now: datetime) -> tuple[CardView | None, list[Escalation]]:
    """The operation's open card (if any) and all its escalations, newest first."""
    escalations = list(Escalation.objects.filter(operation=operation).select_related("assignee").order_by("-opened_at"))
    current = next((e for e in escalations if e.state == Escalation.State.OPEN), None)
    if current is None:
        return None, escalations
    current.operation = operation
    return card_view(escalation=current, now=now), escalations
