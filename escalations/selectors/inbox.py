"""The inbox: open cards needing a decision, most urgent first, with faceted counts.

Cards of one outage (a CardGroup: same provider account and reason, opened within
CARD_GROUP_WINDOW_S) show as one group row on the first page when two or more of them match the
filters; the other cards are listed one by one. A fixed number of queries whatever the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber

from escalations.selectors.cards import REASONS
from escalations.selectors.paging import PAGE_SIZE, page_number, with_count
from operations.decisions.cards import reason_label
from operations.models import Decision, Escalation, ProviderProfile
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
    "group",
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
# Group rows shown on the first page (the most urgent first); a group's members shown in its row.
GROUP_ROWS_MAX = 20
GROUP_MEMBERS_SHOWN = 5


@dataclass(frozen=True)
class InboxFilters:
    mine: bool = False
    reason: str = ""
    provider: str = ""
    # Half-approved accept_output cards: waiting for a second, different responder.
    awaiting: bool = False

    @classmethod
    def from_query(cls, query: dict) -> InboxFilters:
        reason = str(query.get("reason", ""))
        return cls(
            mine=str(query.get("mine", "")) in {"1", "true", "on"},
            reason=reason if reason in {r.value for r in Reason} else "",
            provider=str(query.get("provider", ""))[:64],
            awaiting=str(query.get("awaiting", "")) in {"1", "true", "on"},
        )

    @property
    def active(self) -> bool:
        return bool(self.mine or self.reason or self.provider or self.awaiting)

    def query(self, **changes: object) -> str:
        """The URL query for these filters with some changed: filters live in the URL."""
        # The changes name this dataclass's own fields (checked at run time by replace).
        current = replace(self, **changes)  # type: ignore[arg-type]
        params = {
            "mine": "1" if current.mine else "",
            "reason": current.reason,
            "provider": current.provider,
            "awaiting": "1" if current.awaiting else "",
        }
        return urlencode({k: v for k, v in params.items() if v})


@dataclass(frozen=True)
class InboxFacets:
    """Open-card counts grouped by (reason, provider, held by the viewer, awaiting a second
    responder): each filter's count is computed with the other filters applied, so a number never
    promises rows the list hides."""

    groups: tuple[tuple[str, str, bool, bool, int], ...]

    def count(self, *, reason: str = "", provider: str = "", mine: bool = False, awaiting: bool = False) -> int:
        return sum(
            n
            for group_reason, group_provider, group_mine, group_awaiting, n in self.groups
            if (not reason or group_reason == reason)
            and (not provider or group_provider == provider)
            and (not mine or group_mine)
            and (not awaiting or group_awaiting)
        )


@dataclass
class GroupRow:
    """Two or more open cards of one outage that match the filters, as one inbox row."""

    group_id: int
    reason: str
    account: str
    count: int
    soonest_business_deadline: datetime | None
    first_opened_at: datetime
    members: list[Escalation] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.count} operations: {reason_label(self.reason)} on {self.account}"

    @property
    def more(self) -> int:
        """Members not listed in the row."""
        return max(0, self.count - len(self.members))


@dataclass
class InboxView:
    page: Page
    filters: InboxFilters
    open_total: int
    reason_counts: list[tuple[str, str, int]]
    providers: list[str]
    everyone_total: int = 0
    mine_total: int = 0
    awaiting_total: int = 0
    rows: list[Escalation] = field(default_factory=list)
    group_rows: list[GroupRow] = field(default_factory=list)
    # Matching cards that sit in group rows (not counted in the page's rows).
    grouped_cards: int = 0


def _awaiting_second() -> Exists:
    return Exists(Decision.objects.filter(escalation=OuterRef("pk"), outcome=Decision.Outcome.AWAITING_SECOND))


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
            (reason, provider, bool(mine), bool(awaiting), n)
            for reason, provider, mine, awaiting, n in open_cards.annotate(mine=is_mine, awaiting=_awaiting_second())
            .values_list("reason", "operation__provider__slug", "mine", "awaiting")
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
    if filters.awaiting:
        query = query.filter(_awaiting_second())
    known = facets.count(reason=filters.reason, provider=filters.provider, mine=filters.mine, awaiting=filters.awaiting)
    groups = _group_rows(query)
    grouped_ids = [g.group_id for g in groups]
    grouped_cards = sum(g.count for g in groups)
    singles = query.exclude(group_id__in=grouped_ids) if grouped_ids else query
    singles = (
        singles.select_related("operation__provider", "assignee")
        .only(*INBOX_FIELDS)
        .annotate(
            awaiting_by=Subquery(
                Decision.objects.filter(escalation=OuterRef("pk"), outcome=Decision.Outcome.AWAITING_SECOND)
                .order_by("decided_at", "pk")
                .values("username")[:1]
            )
        )
        .order_by(F("operation__business_deadline_at").asc(nulls_last=True), "opened_at", "pk")
    )
    paginator = with_count(Paginator(singles, PAGE_SIZE), known - grouped_cards)
    page_obj = paginator.get_page(page_number(page))
    shown_groups = groups[:GROUP_ROWS_MAX] if page_obj.number == 1 else []
    _attach_members(query, shown_groups)
    providers = list(ProviderProfile.objects.order_by("slug").values_list("slug", flat=True))
    return InboxView(
        page=page_obj,
        filters=filters,
        open_total=facets.count(),
        reason_counts=[
            (
                value,
                label,
                facets.count(reason=value, provider=filters.provider, mine=filters.mine, awaiting=filters.awaiting),
            )
            for value, label in REASONS
        ],
        providers=providers,
        everyone_total=facets.count(reason=filters.reason, provider=filters.provider, awaiting=filters.awaiting),
        mine_total=facets.count(reason=filters.reason, provider=filters.provider, mine=True, awaiting=filters.awaiting),
        awaiting_total=facets.count(reason=filters.reason, provider=filters.provider, mine=filters.mine, awaiting=True),
        rows=list(page_obj.object_list),
        group_rows=shown_groups,
        grouped_cards=grouped_cards,
    )


def _group_rows(query: QuerySet[Escalation]) -> list[GroupRow]:
    """Groups with two or more matching open cards, most urgent first (one query)."""
    rows = (
        query.filter(group__isnull=False)
        .values("group_id", "group__reason", "group__account")
        .annotate(
            n=Count("id"),
            soonest=Min("operation__business_deadline_at"),
            first=Min("opened_at"),
        )
        .filter(n__gte=2)
        .order_by()
    )
    groups = [
        GroupRow(
            group_id=row["group_id"],
            reason=row["group__reason"],
            account=row["group__account"],
            count=row["n"],
            soonest_business_deadline=row["soonest"],
            first_opened_at=row["first"],
        )
        for row in rows
    ]
    # Business deadline soonest (none last), then the oldest: the order of the single cards.
    groups.sort(
        key=lambda g: (
            g.soonest_business_deadline is None,
            g.soonest_business_deadline or g.first_opened_at,
            g.first_opened_at,
            g.group_id,
        )
    )
    return groups


def _attach_members(query: QuerySet[Escalation], groups: list[GroupRow]) -> None:
    """The first few matching members of each shown group, in inbox order (one query)."""
    if not groups:
        return
    ranked = (
        query.filter(group_id__in=[g.group_id for g in groups])
        .select_related("operation")
        .only(
            "id",
            "group",
            "opened_at",
            "assignee",
            "acknowledged_at",
            "operation__id",
            "operation__purpose",
            "operation__provider_job_id",
            "operation__business_deadline_at",
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("group_id")],
                order_by=[F("operation__business_deadline_at").asc(nulls_last=True), F("opened_at"), F("pk")],
            )
        )
        .filter(rank__lte=GROUP_MEMBERS_SHOWN)
        .order_by("group_id", "rank")
    )
    by_group = {g.group_id: g for g in groups}
    for member in ranked:
        # `ranked` holds members of these groups only (group_id__in above), so group_id is set.
        by_group[member.group_id].members.append(member)  # type: ignore[index]
