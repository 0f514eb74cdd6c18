"""The inbox: open cards needing a decision, most urgent first, with faceted counts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import BooleanField, Case, Count, F, Q, QuerySet, Value, When

from escalations.selectors.cards import REASONS
from escalations.selectors.paging import PAGE_SIZE, page_number, with_count
from operations.models import Escalation, ProviderProfile
from operations.vocabulary import Reason

# What an inbox row shows: loading only this keeps JSON columns (results, errors, snapshots) out.
INBOX_FIELDS = (
    "id",
    "reason",
    "state",
    "opened_at",
    "operation",
    "assignee",
    "acknowledged_by",
    "acknowledged_at",
    "assigned_at",
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
    # "Mine": the cards I acknowledged or that were handed to me.
    mine_q = Q(assignee_id=user_id) | Q(acknowledged_by_id=user_id) if user_id is not None else Q(pk__in=[])
    is_mine = (
        Case(When(mine_q, then=Value(True)), default=Value(False), output_field=BooleanField())
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
        query = query.filter(mine_q)
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
    paginator = with_count(Paginator(query, PAGE_SIZE), known)
    page_obj = paginator.get_page(page_number(page))
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
