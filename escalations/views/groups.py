"""Dashboard views for a group of cards: its page, acknowledging it, and bulk decisions over its members.

A bulk decision takes two POSTs: `step=review` shows the confirmation (the count, the combined cost,
the members that do not offer the option) and writes nothing; `step=apply` decides. Views only
adapt: operations.decisions.bulk checks and applies.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts import signins
from accounts.views import reauthenticate_url
from escalations.roles import can_decide, responder_required, viewer_required
from escalations.selectors import groups as group_selectors
from escalations.views import DashboardRequest
from escalations.views.cards import refresh_s
from operations.cards.words import SIGN_IN_AGAIN
from operations.decisions import bulk, ownership, services
from operations.models import BulkDecision, CardGroup, Escalation


def _page(
    request: HttpRequest,
    group_id: int,
    *,
    status: int = 200,
    preview: bulk.BulkPreview | None = None,
    refused: BulkDecision | None = None,
    form: dict | None = None,
) -> HttpResponse:
    view = group_selectors.group_view(group_id=group_id, page=request.GET.get("page"), now=timezone.now())
    if view is None:
        raise Http404("no such group")
    shown = request.GET.get("bulk", "")
    result = None
    if shown.isascii() and shown.isdigit() and len(shown) < 19:
        result = BulkDecision.objects.filter(pk=int(shown), group=view.group).first()
    shown_result = refused or result
    refusals = _refusals(shown_result)
    context = {
        "refusals": refusals,
        # A bulk decision refused for an old sign-in offers the way to a fresh one, back to this group.
        "reauth_url": reauthenticate_url(reverse("card_group", args=[group_id]))
        if any(why == SIGN_IN_AGAIN for _, why in refusals)
        else "",
        "gv": view,
        "group": view.group,
        "can_decide": can_decide(request.user),
        "preview": preview,
        "result": shown_result,
        "form": form or {},
        "nav": "inbox",
        "refresh_s": refresh_s(),
    }
    return render(request, "escalations/group.html", context, status=status)


def _refusals(bulk_decision: BulkDecision | None) -> list[tuple[Escalation | None, str]]:
    """Each refusal of a bulk decision with its card (and operation), to name it as a person would."""
    if bulk_decision is None:
        return []
    ids = [r.get("escalation_id") for r in bulk_decision.refused if r.get("escalation_id")]
    cards = {e.pk: e for e in Escalation.objects.select_related("operation").filter(pk__in=ids)}
    return [(cards.get(r.get("escalation_id")), str(r.get("why", ""))) for r in bulk_decision.refused]


@viewer_required
@require_GET
def group(request: DashboardRequest, group_id: int) -> HttpResponse:
    return _page(request, group_id)


@responder_required
@require_POST
def group_acknowledge(request: DashboardRequest, group_id: int) -> HttpResponse:
    if not CardGroup.objects.filter(pk=group_id).exists():
        raise Http404("no such group")
    try:
        count, others = ownership.acknowledge_group(group_id=group_id, user=request.user)
    except services.TooManyDecisions as exc:
        return _too_many(request, exc)
    text = f"You acknowledged {count} card{'s' if count != 1 else ''} of this group: no reminders are sent for them."
    if others:
        text += f" Cards held by {', '.join(others)} stay theirs (take one over on its card)."
    messages.success(request, text)
    return HttpResponseRedirect(reverse("card_group", args=[group_id]), status=303)


@responder_required
@require_POST
def group_bulk(request: DashboardRequest, group_id: int) -> HttpResponse:
    group_row = CardGroup.objects.filter(pk=group_id).first()
    if group_row is None:
        raise Http404("no such group")
    members, unreadable = bulk.parse_members(request.POST.getlist("card"))
    option = request.POST.get("option", "")
    comment = request.POST.get("comment", "")
    form = {"option": option, "comment": comment, "cards": {m.escalation_id for m in members}}
    if request.POST.get("step") != "apply":
        preview = bulk.preview_bulk(group=group_row, members=members, option_id=option, user=request.user)
        preview.problems = unreadable + preview.problems
        return _page(request, group_id, preview=preview, form=form)
    try:
        result = bulk.decide_bulk(
            group_id=group_id,
            user=request.user,
            sign_in=signins.current(request.session),
            option_id=option,
            members=members,
            comment=comment,
            confirmed_count=request.POST.get("confirm_count"),
            unreadable=unreadable,
        )
    except services.TooManyDecisions as exc:
        return _too_many(request, exc)
    if result.refused_whole:
        return _page(request, group_id, status=422, refused=result.bulk, form=form)
    return HttpResponseRedirect(f"{reverse('card_group', args=[group_id])}?bulk={result.bulk.pk}", status=303)


def _too_many(request: DashboardRequest, exc: services.TooManyDecisions) -> HttpResponse:
    response = render(request, "escalations/too_many_decisions.html", {"message": exc.message}, status=429)
    response["Retry-After"] = str(exc.retry_after_s)
    return response
