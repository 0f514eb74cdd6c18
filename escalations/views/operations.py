"""Dashboard views for operations: the list, one operation's page, and its exports.

Views only adapt: parse, call selectors, render. Reads need the viewer role (escalations.roles).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from escalations import exports
from escalations.chart.requests import request_chart
from escalations.chart.svg import render_svg
from escalations.roles import can_decide, viewer_required
from escalations.selectors import cards as card_selectors
from escalations.selectors import history as history_selectors
from escalations.selectors import operations as operation_selectors
from escalations.views import DashboardRequest
from escalations.views.cards import refresh_s, sign_in_context
from escalations.views.history import audit_jsonl
from operations import selectors
from operations.audit.story import operation_story, operation_story_latest
from operations.decisions.check import STALE, posted_version
from operations.models import CardActivity, Decision, Operation, StatusCheck
from operations.polling.window import upcoming_checks
from operations.vocabulary import POLLABLE_STATUSES, Reason


@viewer_required
@require_GET
def operation_list(request: DashboardRequest) -> HttpResponse:
    filters = operation_selectors.OperationFilters.from_query(request.GET)
    data = operation_selectors.operation_list(filters=filters, page=request.GET.get("page"))
    page = data.page.number
    context = {
        "data": data,
        "tab_links": [(key, label, count, filters.query(tab=key, status="")) for key, label, count in data.tabs],
        "current_query_no_page": filters.query(),
        "current_query": filters.query() + (f"&page={page}" if page > 1 else ""),
        "filters": filters,
        "nav": "operations",
        "reasons": card_selectors.REASONS,
        "statuses": sorted(operation_selectors.STATUS_VALUES),
        "refresh_s": refresh_s(),
    }
    if request.htmx and request.htmx.target == "operations-table":
        # The live refresh brings the tab counts along (out of band), so they move with the rows.
        return render(request, "operations/_table.html", {**context, "tabs_oob": True})
    return render(request, "operations/list.html", context)


STORY_SHOWN = 150
# Status requests listed in the table (newest first); the chart draws up to CHECKS_SHOWN.
CHECKS_LISTED = 50


@viewer_required
@require_GET
def operation_detail(request: DashboardRequest, operation_id: str) -> HttpResponse:
    page = operation_selectors.operation_page(operation_id=operation_id)
    if page is None:
        raise Http404("no such operation")
    now = timezone.now()
    op = page.operation
    card_view, escalations = card_selectors.operation_cards(operation=op, now=now)
    story = operation_story_latest(operation_id=op.pk, limit=STORY_SHOWN)
    chart = request_chart(
        checks=page.checks,
        authorizations=page.authorizations,
        created_at=op.created_at,
        deadline_at=op.deadline_at,
        business_deadline_at=op.business_deadline_at,
        now=now,
        completed_at=op.completed_at,
        first_number=page.checks_total - len(page.checks) + 1,
        planned=_planned_checks(op),
        check_spacing_s=op.check_spacing_s,
        business_stop=any(e.reason == Reason.BUSINESS_DEADLINE_PASSED for e in escalations),
    )
    context = {
        "page": page,
        "op": op,
        "cv": card_view,
        "card": card_view.card if card_view else None,
        "esc": card_view.card.escalation if card_view else None,
        "escalations": escalations,
        "chart": chart,
        "chart_svg": render_svg(chart),
        "recent_checks": page.checks[::-1][:CHECKS_LISTED],
        "story": story,
        "story_more": len(story) >= STORY_SHOWN,
        "can_decide": can_decide(request.user),
        "where": "operation",
        "nav": "operations",
        "refresh_s": refresh_s(),
        "now": now,
        "elapsed_pct": _elapsed_pct(op, now),
        "warnings": operation_selectors.operation_warnings(operation=op, checks=page.checks),
        "flash": _back_from_sign_in(request, card_view),
        **(sign_in_context(request, card_view.card) if card_view else {}),
    }
    return render(request, "operations/detail.html", context)


def _planned_checks(op: Operation) -> list[datetime]:
    """The checks still to come in a window a human granted (none outside one)."""
    if op.status not in POLLABLE_STATUSES or not op.check_spacing_s or op.next_poll_at is None:
        return []
    return upcoming_checks(
        next_poll_at=op.next_poll_at,
        spacing_s=op.check_spacing_s,
        checks_left=op.requests_left,
        ends_at=op.deadline_at,
        jitter_floor=op.provider.jitter_floor,
    )


def _back_from_sign_in(request: DashboardRequest, card_view: card_selectors.CardView | None) -> dict | None:
    """Back on the page after "Sign in again" (?card=<id>&v=<version shown>): the card as it was, or
    the usual "state changed — review again" when it moved meanwhile. Nothing is decided for the
    person: a decision that cannot be undone is always a click after the fresh sign-in."""
    if "v" not in request.GET:
        return None
    shown = posted_version(request.GET.get("v"))
    escalation = card_view.card.escalation if card_view else None
    if escalation is not None and str(escalation.pk) == request.GET.get("card") and escalation.version == shown:
        return {"kind": "ok", "text": "You signed in again; the card is as you left it"}
    text = f"While you were signing in the card changed: {STALE}"
    if escalation is None:
        messages.warning(request, f"{text}. It is no longer open.")
        return None
    return {"kind": "warn", "text": text}


def _elapsed_pct(op: Operation, now: datetime) -> int:
    total = (op.deadline_at - op.created_at).total_seconds()
    end = op.completed_at or now
    if total <= 0:
        return 100
    return max(0, min(100, round(100 * (end - op.created_at).total_seconds() / total)))


@viewer_required
@require_GET
def operation_checks_csv(request: DashboardRequest, operation_id: str) -> HttpResponseBase:
    op = selectors.operation_get(operation_id=operation_id)
    if op is None:
        raise Http404("no such operation")
    return exports.csv_response(
        request,
        filename=f"{op.pk}-status-checks.csv",
        header=exports.CHECK_HEADER,
        rows=exports.check_rows(StatusCheck.objects.filter(operation=op)),
    )


@viewer_required
@require_GET
def operation_decisions_csv(request: DashboardRequest, operation_id: str) -> HttpResponseBase:
    op = selectors.operation_get(operation_id=operation_id)
    if op is None:
        raise Http404("no such operation")
    return exports.csv_response(
        request,
        filename=f"{op.pk}-decisions.csv",
        header=exports.DECISION_HEADER,
        rows=exports.decision_rows(Decision.objects.filter(operation=op).order_by("decided_at", "pk")),
    )


@viewer_required
@require_GET
def operation_activity_csv(request: DashboardRequest, operation_id: str) -> HttpResponseBase:
    op = selectors.operation_get(operation_id=operation_id)
    if op is None:
        raise Http404("no such operation")
    return exports.csv_response(
        request,
        filename=f"{op.pk}-card-activity.csv",
        header=exports.ACTIVITY_HEADER,
        rows=exports.activity_rows(CardActivity.objects.filter(operation=op).order_by("at", "pk")),
    )


@viewer_required
@require_GET
def operation_audit_jsonl(request: DashboardRequest, operation_id: str) -> HttpResponseBase:
    op = selectors.operation_get(operation_id=operation_id)
    if op is None:
        raise Http404("no such operation")
    return audit_jsonl(request, operation_id=op.pk, since=None, until=None, filename=f"{op.pk}-audit.jsonl")


@viewer_required
@require_GET
def operation_report(request: DashboardRequest, operation_id: str) -> HttpResponse:
    page = operation_selectors.operation_page(operation_id=operation_id, checks_shown=None)
    if page is None:
        raise Http404("no such operation")
    escalations = card_selectors.operation_cards(operation=page.operation, now=timezone.now())[1]
    return render(
        request,
        "operations/report.html",
        {
            "page": page,
            "op": page.operation,
            "escalations": escalations,
            "story": operation_story(operation_id=page.operation.pk),
            "activity": history_selectors.operation_activity(operation_id=page.operation.pk),
            "generated_at": timezone.now(),
        },
    )
