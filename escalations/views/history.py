"""Dashboard views for the decision history: the page, its CSV and JSONL exports, its printable report,
and the verifiable audit export that an operation's page streams too.

Views only adapt: parse the filters of the URL (a filter that cannot be applied is a 400 page naming
it), call one selector or export, render. Every view here needs the viewer role.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps

from django.conf import settings
from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from escalations import export_slots, exports
from escalations.roles import viewer_required
from escalations.selectors import cards as card_selectors
from escalations.selectors import history as history_selectors
from escalations.views import DashboardRequest
from operations.audit import checkpoints
from operations.audit import export as audit_export
from operations.infrastructure.query_dates import FilterError


def with_history_filters(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Parse the history filters of the URL for the view; a filter that cannot be applied is a 400
    page naming it (the history, its exports and its report alike)."""

    @wraps(view)
    def wrapped(request: DashboardRequest) -> HttpResponseBase:
        try:
            filters = history_selectors.HistoryFilters.from_query(request.GET)
        except FilterError as exc:
            # Back to the history with the other filters kept and the one that failed dropped.
            kept = request.GET.copy()
            kept.pop(exc.field, None)
            kept.pop("page", None)
            back = reverse("decision_history") + (f"?{kept.urlencode()}" if kept else "")
            return render(
                request, "filter_error.html", {"field": exc.field, "message": exc.message, "back": back}, status=400
            )
        return view(request, filters)

    return wrapped


@viewer_required
@require_GET
@with_history_filters
def history(request: DashboardRequest, filters: history_selectors.HistoryFilters) -> HttpResponse:
    data = history_selectors.history(filters=filters, page=request.GET.get("page"))
    return render(
        request,
        "escalations/history.html",
        {
            "history": data,
            "filters": filters,
            "nav": "history",
            "outcomes": history_selectors.OUTCOMES,
            "option_kinds": history_selectors.OPTION_KINDS,
            "reasons": card_selectors.REASONS,
        },
    )


@viewer_required
@require_GET
@with_history_filters
def history_csv(request: DashboardRequest, filters: history_selectors.HistoryFilters) -> HttpResponseBase:
    return exports.csv_response(
        request,
        filename=f"pollerdash-decisions-{timezone.now():%Y%m%dT%H%M%SZ}.csv",
        header=exports.DECISION_HEADER,
        rows=exports.decision_rows(history_selectors.history_queryset(filters=filters).order_by("decided_at", "pk")),
    )


@viewer_required
@require_GET
@with_history_filters
def history_activity_csv(request: DashboardRequest, filters: history_selectors.HistoryFilters) -> HttpResponseBase:
    return exports.csv_response(
        request,
        filename=f"pollerdash-card-activity-{timezone.now():%Y%m%dT%H%M%SZ}.csv",
        header=exports.ACTIVITY_HEADER,
        rows=exports.activity_rows(history_selectors.activity_queryset(filters=filters).order_by("at", "pk")),
    )


@viewer_required
@require_GET
@with_history_filters
def history_jsonl(request: DashboardRequest, filters: history_selectors.HistoryFilters) -> HttpResponseBase:
    # A verifiable export cannot leave out entries of its range: it is cut by operation and dates only.
    return audit_jsonl(
        request,
        operation_id=filters.operation or None,
        since=filters.since_at,
        until=filters.until_at,
        filename=f"pollerdash-audit-{timezone.now():%Y%m%dT%H%M%SZ}.jsonl",
    )


@viewer_required
@require_GET
@with_history_filters
def history_report(request: DashboardRequest, filters: history_selectors.HistoryFilters) -> HttpResponse:
    decisions = list(history_selectors.history_queryset(filters=filters)[: exports.CHUNK])
    activity = list(history_selectors.activity_queryset(filters=filters)[: exports.CHUNK])
    return render(
        request,
        "escalations/history_report.html",
        {
            "decisions": decisions,
            "activity": activity,
            "filters": filters,
            "generated_at": timezone.now(),
            "limit": exports.CHUNK,
        },
    )


def audit_jsonl(
    request: DashboardRequest,
    *,
    operation_id: str | None,
    since: datetime | None,
    until: datetime | None,
    filename: str,
) -> HttpResponseBase:
    """The verifiable audit export (operations.audit.export), streamed; errors become a page.
    `?format=2` writes an operation or date export in format 2, for a reader whose verifier
    predates format 3 (a full export is format 2 either way)."""
    wanted = request.GET.get("format", "3")
    if wanted not in {str(version) for version in audit_export.VERSIONS}:
        message = f"format={wanted[:20]}: the audit export is written in format 3 (the default) or 2"
        return render(request, "export_error.html", {"message": message}, status=400)
    slot = None
    if operation_id is None:
        # A full or date-range export holds a database connection while it streams: it needs a slot
        # (escalations/export_slots.py). An operation's export is small: its requests are budgeted.
        try:
            slot = export_slots.take(user_id=request.user.pk)
        except export_slots.ExportsBusy as exc:
            busy = render(request, "export_error.html", {"message": str(exc)}, status=429)
            busy["Retry-After"] = str(export_slots.RETRY_AFTER_S)
            return busy
    try:
        lines = audit_export.stream_export(
            operation_id=operation_id,
            since=since,
            until=until,
            version=int(wanted),
            max_entries=settings.AUDIT_EXPORT_WEB_MAX_ENTRIES,
        )
    except BaseException as exc:
        if slot is not None:
            slot.release()
        if isinstance(exc, audit_export.ExportError | checkpoints.CheckpointError):
            return render(request, "export_error.html", {"message": str(exc)}, status=409)
        raise
    if slot is None:
        return exports.jsonl_response(request, filename=filename, lines=lines, on_close=None)
    return exports.jsonl_response(request, filename=filename, lines=slot.kept(lines), on_close=slot.release)
