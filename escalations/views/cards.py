"""Dashboard views for cards: the inbox, a card, deciding, and taking a card (the decision history is in
escalations/views/history.py).

Views only adapt: parse the request, call one service or selector, render a page or the fragment
named after the UI piece (templates/escalations/_card.html, _inbox_rows.html). Reads need the
viewer role, every POST the responder role, and Django's CSRF check covers every POST. A decision is
posted with what the session says about the person's sign-in (accounts.signins); one that cannot be
undone and comes too long after it is refused with a "Sign in again" link back to the same card.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts import signins
from accounts.views import reauthenticate_url
from escalations.roles import can_decide, responder_required, viewer_required
from escalations.selectors import cards as card_selectors
from escalations.selectors import inbox as inbox_selectors
from escalations.views import DashboardRequest
from operations.cards.card import Card
from operations.cards.options import Kind, parse_option_id
from operations.cards.words import fresh_sign_in_needed
from operations.decisions import ownership as ownership_services
from operations.decisions import services
from operations.decisions.check import FRESH_SIGN_IN_KINDS, fresh_sign_in_refusal
from operations.models import Escalation

REFRESH_S = 5


def refresh_s() -> int:
    return int(getattr(settings, "DASHBOARD_REFRESH_S", REFRESH_S))


def card_context(
    request: DashboardRequest, view: card_selectors.CardView, *, where: str, flash: dict | None = None
) -> dict:
    return {
        "cv": view,
        "card": view.card,
        "esc": view.card.escalation,
        "op": view.card.operation,
        "can_decide": can_decide(request.user),
        "where": where,
        "flash": flash,
        "refresh_s": refresh_s(),
        **sign_in_context(request, view.card),
    }


def card_return_url(card: Card) -> str:
    """The card on its operation's page at the version shown: where a fresh sign-in comes back to."""
    escalation = card.escalation
    query = urlencode({"card": escalation.pk, "v": escalation.version})
    return f"{reverse('operation_detail', args=[card.operation.pk])}?{query}#card-{escalation.pk}"


def sign_in_context(request: DashboardRequest, card: Card) -> dict:
    """Whether options that cannot be undone may be taken under this session's sign-in now; if not,
    the card offers "Sign in again" in their place (the decision service checks it again)."""
    sign_in = signins.current(request.session)
    return {
        "fresh_sign_in": fresh_sign_in_refusal(sign_in=sign_in, now=timezone.now()) is None,
        "fresh_sign_in_kinds": sorted(FRESH_SIGN_IN_KINDS),
        "fresh_sign_in_needed": fresh_sign_in_needed(minutes=settings.FRESH_SIGN_IN_MINUTES),
        "reauth_url": reauthenticate_url(card_return_url(card)),
    }


@viewer_required
@require_GET
def inbox(request: DashboardRequest) -> HttpResponse:
    filters = inbox_selectors.InboxFilters.from_query(request.GET)
    data = inbox_selectors.inbox(user=request.user, filters=filters, page=request.GET.get("page"))
    page = data.page.number
    links = {
        "everyone": filters.query(mine=False),
        "mine": filters.query(mine=True),
        "any_reason": filters.query(reason=""),
        "awaiting": filters.query(awaiting=not filters.awaiting),
        "reasons": [
            (value, label, count, filters.query(reason=value))
            for value, label, count in data.reason_counts
            if count or value == filters.reason
        ],
        "current_no_page": filters.query(),
        "current": filters.query() + (f"&page={page}" if page > 1 else ""),
    }
    context = {"inbox": data, "filters": filters, "links": links, "nav": "inbox", "refresh_s": refresh_s()}
    if request.htmx and request.htmx.target == "inbox-rows":
        return render(request, "escalations/_inbox_rows.html", context)
    return render(request, "escalations/inbox.html", context)


@viewer_required
@require_GET
def card(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    view = card_selectors.card_by_id(escalation_id=escalation_id, now=timezone.now())
    if view is None:
        raise Http404("no such card")
    if not request.htmx:
        return redirect(f"{reverse('operation_detail', args=[view.card.operation.pk])}#card-{escalation_id}")
    if request.GET.get("etag") == view.etag:
        # Live refresh: nothing on the card changed, keep what the responder is looking at.
        return HttpResponse(status=204)
    where = _where(request.GET.get("where"))
    return _on_page(render(request, "escalations/_card.html", card_context(request, view, where=where)), where=where)


def _where(posted: str | None) -> str:
    """Which page a card is shown on: the inbox or (by default, for anything else) the operation page."""
    return posted if posted in {"inbox", "operation"} else "operation"


def _on_page(response: HttpResponse, *, where: str) -> HttpResponse:
    # On the operation page a changed card means a changed operation: the page refreshes the rest.
    if where == "operation":
        response["HX-Trigger"] = "pd:operation-changed"
    return response


@responder_required
@require_POST
def decide(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    option = request.POST.get("option", "")
    try:
        result = services.escalation_decide(
            escalation_id=escalation_id,
            user=request.user,
            sign_in=signins.current(request.session),
            option_id=option,
            card_version=request.POST.get("version"),
            comment=request.POST.get("comment", ""),
        )
    except Escalation.DoesNotExist:
        raise Http404("no such card") from None
    except services.TooManyDecisions as exc:
        return _too_many_decisions(request, escalation_id=escalation_id, exc=exc)
    parsed = parse_option_id(option)
    is_inspect = parsed is not None and parsed.kind is Kind.INSPECT and not result.refused
    operation_url = f"{reverse('operation_detail', args=[result.decision.operation_id])}#card-{escalation_id}"
    if is_inspect and not request.htmx:
        # The inspect form opens in a new tab: record, then go to the provider's console.
        return HttpResponseRedirect(result.redirect_url or operation_url, status=303)
    if result.needs_fresh_sign_in and not request.htmx:
        messages.error(request, _sign_in_again_text())
        view = card_selectors.card_by_id(escalation_id=escalation_id, now=timezone.now())
        back = card_return_url(view.card) if view is not None else operation_url
        return HttpResponseRedirect(reauthenticate_url(back), status=303)
    if request.htmx:
        view = card_selectors.card_by_id(escalation_id=escalation_id, now=timezone.now())
        assert view is not None
        kind = "error" if result.refused else "ok"
        response_state = (result.decision.provider_response or {}).get("state")
        if response_state is not None and response_state != "confirmed":
            kind = "warn"  # the cancel went out but the provider did not confirm it
        status = 200
        flash: dict[str, object] = {"kind": kind, "text": result.message}
        if result.refused:
            status = 409 if result.stale else 422
        if result.needs_fresh_sign_in:
            status = 403
            flash = {"kind": "error", "text": _sign_in_again_text(), "reauth": True}
        where = _where(request.POST.get("where"))
        context = card_context(request, view, where=where, flash=flash)
        return _on_page(render(request, "escalations/_card.html", context, status=status), where=where)
    level = messages.ERROR if result.refused else messages.SUCCESS
    if (result.decision.provider_response or {}).get("state") not in (None, "confirmed"):
        level = messages.WARNING
    messages.add_message(request, level, result.message)
    return HttpResponseRedirect(operation_url, status=303)


def _sign_in_again_text() -> str:
    needed = fresh_sign_in_needed(minutes=settings.FRESH_SIGN_IN_MINUTES)
    return f"{needed} Nothing was done: sign in again and you will come back to this card"


def _too_many_decisions(
    request: DashboardRequest, *, escalation_id: int, exc: services.TooManyDecisions
) -> HttpResponse:
    """429 with the card as it is (htmx) or a short page saying so; nothing was recorded."""
    view = card_selectors.card_by_id(escalation_id=escalation_id, now=timezone.now()) if request.htmx else None
    if view is not None:
        where = _where(request.POST.get("where"))
        context = card_context(request, view, where=where, flash={"kind": "error", "text": exc.message})
        response = render(request, "escalations/_card.html", context, status=429)
    else:
        response = render(request, "escalations/too_many_decisions.html", {"message": exc.message}, status=429)
    response["Retry-After"] = str(exc.retry_after_s)
    return response


# --- holding a card and writing on it: acts that decide nothing ------------------------------------------


def _card_act(request: DashboardRequest, escalation_id: int, act: Callable[[], object], *, done: str) -> HttpResponse:
    """Run one ownership act and answer with the card as it is now.

    A refusal (closed card 409, someone else holds it 409, a bad note or hand-over 422, too many
    acts 429) shows its reason above the current card and writes nothing.
    """
    flash, status, takeover = {"kind": "ok", "text": done}, 200, False
    try:
        act()
    except Escalation.DoesNotExist:
        raise Http404("no such card") from None
    except services.TooManyDecisions as exc:
        return _too_many_decisions(request, escalation_id=escalation_id, exc=exc)
    except ownership_services.OwnershipRefused as exc:
        flash, status = {"kind": "error", "text": exc.message}, exc.status
        takeover = isinstance(exc, ownership_services.TakeoverNeeded)
    view = card_selectors.card_by_id(escalation_id=escalation_id, now=timezone.now())
    assert view is not None
    if request.htmx:
        where = _where(request.POST.get("where"))
        context = card_context(request, view, where=where, flash=flash) | {"takeover_open": takeover}
        response = render(request, "escalations/_card.html", context, status=status)
        if where == "inbox":
            # The row above the open card says who is on it: it follows at once (the live list
            # holds its rows while a card is open).
            response.write(render_to_string("escalations/_inbox_row_owner.html", {**context, "oob": True}, request))
        return _on_page(response, where=where)
    card_url = f"{reverse('operation_detail', args=[view.card.operation.pk])}#card-{escalation_id}"
    if status != 200:
        return render(
            request, "escalations/card_refused.html", {"message": flash["text"], "back": card_url}, status=status
        )
    messages.success(request, done)
    return HttpResponseRedirect(card_url, status=303)


@responder_required
@require_POST
def acknowledge(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    return _acknowledge(request, escalation_id)


def _acknowledge(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    return _card_act(
        request,
        escalation_id,
        lambda: ownership_services.card_acknowledge(
            escalation_id=escalation_id, user=request.user, takeover_of=request.POST.get("takeover")
        ),
        done="You acknowledged this card: it is yours, and no reminders are sent for it.",
    )


@responder_required
@require_POST
def unacknowledge(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    return _unacknowledge(request, escalation_id)


def _unacknowledge(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    return _card_act(
        request,
        escalation_id,
        lambda: ownership_services.card_unacknowledge(escalation_id=escalation_id, user=request.user),
        done="You gave the card back: nobody holds it, and reminders resume.",
    )


@responder_required
@require_POST
def reassign(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    to = request.POST.get("to", "")
    to_self = to.strip() == request.user.get_username()
    return _card_act(
        request,
        escalation_id,
        lambda: ownership_services.card_reassign(
            escalation_id=escalation_id, by=request.user, to=to, takeover_of=request.POST.get("takeover")
        ),
        # Handing it to oneself while someone else holds it asks for the take-over's confirmation
        # (409, the take-over panel open); otherwise the card is simply one's own now.
        done="The card is yours now." if to_self else f"Card handed to {to.strip()[:150]}; they are told.",
    )


@responder_required
@require_POST
def add_note(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    return _card_act(
        request,
        escalation_id,
        lambda: ownership_services.card_note(
            escalation_id=escalation_id, user=request.user, text=request.POST.get("note", "")
        ),
        done="Note added to the card.",
    )


@responder_required
@require_POST
def snooze(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    minutes = request.POST.get("minutes", "")
    return _card_act(
        request,
        escalation_id,
        lambda: ownership_services.card_snooze(escalation_id=escalation_id, user=request.user, minutes=minutes),
        done="Reminders for this card are snoozed; they resume when the snooze ends.",
    )


@responder_required
@require_POST
def assign(request: DashboardRequest, escalation_id: int) -> HttpResponse:
    """The URL of the former "Take this card" (take=1) / "Give it back" (take=0): acknowledge and
    unacknowledge now, with the same confirmation for taking over someone else's card."""
    if request.POST.get("take") == "1":
        return _acknowledge(request, escalation_id)
    return _unacknowledge(request, escalation_id)
