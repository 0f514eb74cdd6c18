"""The operations list (tabs, filters, pages) and one operation's page."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery

from escalations.selectors.paging import PAGE_SIZE
from operations.models import Authorization, Decision, Escalation, Operation, ProviderProfile, StatusCheck
from operations.vocabulary import Reason, Status

# Status requests drawn on the operation page (the chart and the table); the CSV has them all.
CHECKS_SHOWN = 1000

# Status tabs of the operations list: tab key -> (label, statuses).
STATUS_TABS: dict[str, tuple[str, tuple[str, ...]]] = {
    "all": ("All", ()),
    "needs_attention": ("Needs attention", (Status.NEEDS_ATTENTION,)),
    "active": ("Watching", (Status.PENDING, Status.RUNNING)),
    "succeeded": ("Succeeded", (Status.SUCCEEDED, Status.PARTIALLY_SUCCEEDED)),
    "failed": ("Failed", (Status.FAILED,)),
    "ended": ("Closed / cancelled / expired", (Status.CLOSED, Status.CANCELLED, Status.EXPIRED)),
}
STATUS_VALUES = {status.value for status in Status}
# What a row of the operations list shows (the JSON columns stay in the database).
LIST_FIELDS = (
    "id",
    "purpose",
    "provider_job_id",
    "created_at",
    "status",
    "status_requests_used",
    "max_status_requests",
    "next_poll_at",
    "delay_source",
    "last_http_status",
    "last_provider_state",
    "last_polled_at",
    "provider",
    "provider__slug",
)


@dataclass(frozen=True)
class OperationFilters:
    tab: str = "all"
    status: str = ""
    provider: str = ""
    reason: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, query: dict) -> OperationFilters:
        tab = str(query.get("tab", "all"))
        status = str(query.get("status", ""))
        reason = str(query.get("reason", ""))
        return cls(
            tab=tab if tab in STATUS_TABS else "all",
            status=status if status in STATUS_VALUES else "",
            provider=str(query.get("provider", ""))[:64],
            reason=reason if reason in {r.value for r in Reason} else "",
            q=str(query.get("q", "")).strip()[:200],
        )

    @property
    def statuses(self) -> tuple[str, ...]:
        if self.status:
            return (self.status,)
        return tuple(str(s) for s in STATUS_TABS[self.tab][1])

    def query(self, **changes: object) -> str:
        # The changes name this dataclass's own fields (checked at run time by replace).
        current = replace(self, **changes)  # type: ignore[arg-type]
        params = {
            "tab": "" if current.tab == "all" else current.tab,
            "status": current.status,
            "provider": current.provider,
            "reason": current.reason,
            "q": current.q,
        }
        return urlencode({k: v for k, v in params.items() if v})

    @property
    def active(self) -> bool:
        return bool(self.status or self.provider or self.reason or self.q)


def operation_queryset(*, filters: OperationFilters) -> QuerySet[Operation]:
    open_reason = Escalation.objects.filter(operation=OuterRef("pk"), state=Escalation.State.OPEN).values("reason")[:1]
    query = Operation.objects.select_related("provider").only(*LIST_FIELDS).annotate(open_reason=Subquery(open_reason))
    if filters.statuses:
        query = query.filter(status__in=filters.statuses)
    if filters.provider:
        query = query.filter(provider__slug=filters.provider)
    if filters.reason:
        query = query.filter(Exists(Escalation.objects.filter(operation=OuterRef("pk"), reason=filters.reason)))
    if filters.q:
        text = filters.q
        matches = Q(pk__startswith=text) | Q(provider_job_id__icontains=text) | Q(purpose__icontains=text)
        id_prefix = _operation_id_prefix(text)
        if id_prefix:
            matches |= Q(pk__startswith=id_prefix)
        query = query.filter(matches)
    return query.order_by("-created_at", "-pk")


_ULID_PREFIX = re.compile(r"^(?:op_)?([0-9A-HJKMNP-TV-Z]{4,26})$", re.IGNORECASE)


def _operation_id_prefix(text: str) -> str:
    """An id pasted without its "op_" or in lower case still finds its operation."""
    found = _ULID_PREFIX.match(text)
    return f"op_{found.group(1).upper()}" if found else ""


@dataclass
class OperationList:
    page: Page
    filters: OperationFilters
    tabs: list[tuple[str, str, int]]  # key, label, count
    providers: list[str]
    status_counts: dict[str, int]


def operation_list(*, filters: OperationFilters, page: object = 1) -> OperationList:
    # COUNT(*), not COUNT(id): the status index alone answers it (an index-only scan, 4x faster at 100,000).
    counts = dict(Operation.objects.values_list("status").annotate(n=Count("*")).order_by())
    tabs = [
        (key, label, sum(counts.get(str(s), 0) for s in statuses) if statuses else sum(counts.values()))
        for key, (label, statuses) in STATUS_TABS.items()
    ]
    paginator = Paginator(operation_queryset(filters=filters), PAGE_SIZE)
    if not (filters.provider or filters.reason or filters.q):
        # The count is in the aggregate already.
        paginator.__dict__["count"] = (
            sum(counts.get(s, 0) for s in filters.statuses) if filters.statuses else sum(counts.values())
        )
    text = str(page or "1")
    number = int(text) if text.isascii() and text.isdigit() and len(text) < 7 else 1
    providers = list(ProviderProfile.objects.order_by("slug").values_list("slug", flat=True))
    return OperationList(
        page=paginator.get_page(number), filters=filters, tabs=tabs, providers=providers, status_counts=counts
    )


@dataclass
class OperationPage:
    operation: Operation
    checks: list[StatusCheck]  # loaded with the CHECK_FIELDS columns only
    checks_total: int
    authorizations: list[Authorization]
    decisions: list[Decision]


CHECK_FIELDS = (
    "id",
    "operation_id",
    "sent_at",
    "received_at",
    "http_status",
    "transport_error",
    "retry_after",
    "provider_state",
    "decision",
    "reason",
    "delay_source",
    "next_poll_at",
    "warnings",
)


# The decision of a status request answered after the operation had ended (operations.lifecycle.polls).
IGNORED_AFTER_TERMINAL = "ignored_after_terminal"


@dataclass(frozen=True)
class Warnings:
    now: list[str]
    earlier: list[str]


def operation_warnings(*, operation: Operation, checks: list[StatusCheck]) -> Warnings:
    """The operation's warnings as the page lists them: what is true now, and what no longer is.

    While the operation is watched every warning is current. Once it ended, a warning a status
    request raised before the end (an ignored poll hint, an unreadable progress value) described a
    poll that will not come again; what came after the end (a provider that changed its mind, a
    callback that gave up) is still news. `checks`: the rows loaded for the page (CHECK_FIELDS).
    """
    warnings = list(operation.warnings or [])
    if not operation.done or operation.completed_at is None:
        return Warnings(now=warnings, earlier=[])
    while_watched = {
        text
        for check in checks
        if check.sent_at <= operation.completed_at and check.decision != IGNORED_AFTER_TERMINAL
        for text in (check.warnings or [])
    }
    return Warnings(
        now=[w for w in warnings if w not in while_watched],
        earlier=[w for w in warnings if w in while_watched],
    )


def operation_page(*, operation_id: str, checks_shown: int | None = CHECKS_SHOWN) -> OperationPage | None:
    """Everything the operation page shows except its card and timeline: five queries.

    `checks_shown`: the most recent status requests to load (the chart and table), or None for all
    (the printable report)."""
    operation = Operation.objects.select_related("provider", "agent").filter(pk=operation_id).first()
    if operation is None:
        return None
    # The most recent requests, shown oldest first (the chart reads left to right).
    # Plain rows, not model instances: a thousand of them cost a fraction of the time.
    recent = operation.checks.order_by("-sent_at", "-pk").values_list(*CHECK_FIELDS, named=True)
    checks = list(recent if checks_shown is None else recent[:checks_shown])[::-1]
    # Every request sent has its row (charged before sending), so the counter is the total.
    checks_total = max(len(checks), operation.status_requests_used)
    authorizations = list(
        Authorization.objects.filter(operation=operation).select_related("granted_by", "escalation").order_by("number")
    )
    decisions = list(
        Decision.objects.filter(operation=operation)
        .select_related("escalation", "authorization", "confirms", "confirmed_by")
        .order_by("decided_at", "pk")
    )
    return OperationPage(
        operation=operation,
        checks=checks,
        checks_total=checks_total,
        authorizations=authorizations,
        decisions=decisions,
    )
