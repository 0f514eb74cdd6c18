"""The inbox: open cards needing a decision, most urgent first, with faceted counts.

Cards of one outage (a CardGroup: same provider account and reason, opened within
CARD_GROUP_WINDOW_S) show as one group row when two or more of them match the filters; the other
cards are listed one by one. Groups and single cards share one order, by urgency (`urgency`): a
business deadline that passed first, then the soonest business deadline, then the oldest; a group
counts by its soonest business deadline and its first card. Single cards are paged; each group
row shows on the page where its place in that order falls. A fixed number of queries whatever the
counts.
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
    Expression,
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
from operations.cards.card import reason_label
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
# Group rows shown on one page (the most urgent first); a group's members shown in its row.
GROUP_ROWS_MAX = 20
GROUP_MEMBERS_SHOWN = 5

Urgency = tuple[bool, datetime, datetime, int, int]


def urgency(*, business_deadline_at: datetime | None, opened_at: datetime, group: bool, pk: int) -> Urgency:
    """The one inbox order, for groups and single cards alike: business deadline first (one that
    passed is the soonest), none last; then the oldest. The SQL order of single cards is the same."""
    return (business_deadline_at is None, business_deadline_at or opened_at, opened_at, int(not group), pk)


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

    @property
    def urgency(self) -> Urgency:
        return urgency(
            business_deadline_at=self.soonest_business_deadline,
            opened_at=self.first_opened_at,
            group=True,
            pk=self.group_id,
        )

    @property
    def providers(self) -> str:
        """The provider profiles of the members listed (one account may serve several)."""
        return ", ".join(sorted({m.operation.provider.slug for m in self.members}))

    @property
    def alert_title(self) -> str:
        """A desktop notification's title for this group's news: its reason and size."""
        return f"Decision needed: {reason_label(self.reason)} · group of {self.count} cards"

    @property
    def alert_body(self) -> str:
        return f"{self.label} · provider {self.providers}" if self.providers else self.label


@dataclass(frozen=True)
class Entry:
    """One inbox row: a group or a single card."""

    group: GroupRow | None = None
    card: Escalation | None = None

    @property
    def live_id(self) -> str:
        """What the live list compares between refreshes (static/js/app.js): a card's id, or a group's
        "g<group>.<open cards>", so a group that grows is news."""
        if self.group is not None:
            return f"g{self.group.group_id}.{self.group.count}"
        return str(self.card.pk if self.card is not None else "")


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
    # This page's groups and single cards in one order, by urgency.
    entries: list[Entry] = field(default_factory=list)


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
    facets = _facets(open_cards, is_mine=is_mine)
    query = _filtered(open_cards, filters=filters, mine_q=mine_q)
    known = facets.count(reason=filters.reason, provider=filters.provider, mine=filters.mine, awaiting=filters.awaiting)
    groups = _group_rows(query)
    grouped_ids = [g.group_id for g in groups]
    grouped_cards = sum(g.count for g in groups)
    singles = _singles(query.exclude(group_id__in=grouped_ids) if grouped_ids else query)
    paginator = with_count(Paginator(singles, PAGE_SIZE), known - grouped_cards)
    page_obj = paginator.get_page(page_number(page))
    rows = list(page_obj.object_list)
    shown_groups = _groups_on_page(groups, singles=singles, rows=rows, page=page_obj)[:GROUP_ROWS_MAX]
    _attach_members(query, shown_groups)
    entries = [Entry(group=g) for g in shown_groups] + [Entry(card=esc) for esc in rows]
    entries.sort(key=lambda e: e.group.urgency if e.group is not None else _card_urgency(e.card))
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
        rows=rows,
        group_rows=shown_groups,
        grouped_cards=grouped_cards,
        entries=entries,
    )


def _facets(open_cards: QuerySet[Escalation], *, is_mine: Expression) -> InboxFacets:
    """One grouped count of the open cards, from which every filter's count is read."""
    return InboxFacets(
        groups=tuple(
            (reason, provider, bool(mine), bool(awaiting), n)
            for reason, provider, mine, awaiting, n in open_cards.annotate(mine=is_mine, awaiting=_awaiting_second())
            .values_list("reason", "operation__provider__slug", "mine", "awaiting")
            .annotate(n=Count("id"))
            .order_by()
        )
    )


def _filtered(open_cards: QuerySet[Escalation], *, filters: InboxFilters, mine_q: Q) -> QuerySet[Escalation]:
    query = open_cards
    if filters.mine:
        query = query.filter(mine_q)
    if filters.reason:
        query = query.filter(reason=filters.reason)
    if filters.provider:
        query = query.filter(operation__provider__slug=filters.provider)
    if filters.awaiting:
        query = query.filter(_awaiting_second())
    return query


def _singles(cards: QuerySet[Escalation]) -> QuerySet[Escalation]:
    """The cards shown one by one, most urgent first, with who accepted a card awaiting a second."""
    return (
        cards.select_related("operation__provider", "assignee")
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


def _card_urgency(card: Escalation | None) -> Urgency:
    assert card is not None
    return urgency(
        business_deadline_at=card.operation.business_deadline_at, opened_at=card.opened_at, group=False, pk=card.pk
    )


def _groups_on_page(
    groups: list[GroupRow], *, singles: QuerySet[Escalation], rows: list[Escalation], page: Page
) -> list[GroupRow]:
    """The groups whose place in the inbox order falls on this page of single cards: after the last
    card of the page before (one query), up to the last card of this page (or to the end, on the last)."""
    low: Urgency | None = None
    if page.number > 1:
        before = singles.select_related(None).values_list("operation__business_deadline_at", "opened_at", "pk")[
            page.start_index() - 2
        ]
        low = urgency(business_deadline_at=before[0], opened_at=before[1], group=False, pk=before[2])
    high = _card_urgency(rows[-1]) if rows and page.has_next() else None
    return [g for g in groups if (low is None or g.urgency > low) and (high is None or g.urgency <= high)]


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
    # The one inbox order (urgency), which single cards follow too.
    groups.sort(key=lambda g: g.urgency)
    return groups


def _attach_members(query: QuerySet[Escalation], groups: list[GroupRow]) -> None:
    """The first few matching members of each shown group, in inbox order (one query)."""
    if not groups:
        return
    ranked = (
        query.filter(group_id__in=[g.group_id for g in groups])
        .select_related("operation__provider")
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
            "operation__provider",
            "operation__provider__slug",
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
