"""Dashboard views over real cards: ordering, filters in the URL, live fragments, htmx decisions."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from operations.models import Decision, Escalation, Operation
from tests.support import T0, signed_in_now

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def responder_client(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


def row_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<article class="row" id="esc-(\d+)"', html)]


def test_the_inbox_puts_the_soonest_business_deadline_first_then_the_oldest(
    stopped, responder_client, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 0  # one row per card (groups have their own tests)
    late = stopped(business_deadline_at=T0 + timedelta(hours=5))
    no_deadline_old = stopped()
    soon = stopped(business_deadline_at=T0 + timedelta(hours=1))
    no_deadline_new = stopped()
    html = responder_client.get(reverse("inbox")).content.decode()
    assert row_ids(html) == [soon.pk, late.pk, no_deadline_old.pk, no_deadline_new.pk]
    assert "<title>(4) Inbox · pollerdash</title>" in html
    assert "Request budget" not in html  # only reasons that have cards get a chip


def test_inbox_filters_live_in_the_url(stopped, make_profile, responder_client, alice) -> None:
    other = make_profile(slug="other-provider")
    mine = stopped()
    unknown = stopped("unknown_state", provider=other)
    responder_client.post(reverse("escalation_assign", args=[mine.pk]), {"take": "1"})
    assert row_ids(responder_client.get(reverse("inbox"), {"mine": "1"}).content.decode()) == [mine.pk]
    assert row_ids(responder_client.get(reverse("inbox"), {"reason": "unknown_state"}).content.decode()) == [unknown.pk]
    page = responder_client.get(reverse("inbox"), {"provider": "other-provider"}).content.decode()
    assert row_ids(page) == [unknown.pk]
    assert 'href="?mine=1&amp;provider=other-provider"' in page  # the other filters keep this one
    empty = responder_client.get(reverse("inbox"), {"reason": "rate_limited"}).content.decode()
    assert "No open cards match these filters" in empty and "Clear filters" in empty


def chip_counts(html: str) -> dict[str, int]:
    counts = re.search(r'id="inbox-counts".*?</div>\s*</div>', html, re.S).group(0)
    return {label.strip(): int(n) for label, n in re.findall(r'>([^<>]+?) <span class="n">(\d+)</span>', counts)}


def test_each_count_applies_the_other_filters(stopped, make_profile, responder_client, alice) -> None:
    other = make_profile(slug="other-provider")
    mine = stopped()
    stopped()
    stopped("unknown_state", provider=other)
    responder_client.post(reverse("escalation_assign", args=[mine.pk]), {"take": "1"})
    everything = responder_client.get(reverse("inbox")).content.decode()
    assert chip_counts(everything) == {"Everyone": 3, "Mine": 1, "Deadline exceeded": 2, "Unknown provider state": 1}
    other_only = responder_client.get(reverse("inbox"), {"provider": "other-provider"}).content.decode()
    assert chip_counts(other_only) == {"Everyone": 1, "Mine": 0, "Unknown provider state": 1}
    assert "<title>(3) Inbox" in other_only  # the tab title counts every open card
    query = {"reason": "deadline_exceeded", "mine": "1"}
    deadline_mine = responder_client.get(reverse("inbox"), query).content.decode()
    assert chip_counts(deadline_mine) == {"Everyone": 2, "Mine": 1, "Deadline exceeded": 1}
    assert row_ids(deadline_mine) == [mine.pk]


def test_the_empty_inbox_says_so(responder_client) -> None:
    html = responder_client.get(reverse("inbox")).content.decode()
    assert "Nothing needs a decision" in html and "<title>Inbox · pollerdash</title>" in html


def test_the_live_fragment_carries_the_rows_the_title_and_the_counts(stopped, responder_client) -> None:
    esc = stopped()
    fragment = responder_client.get(reverse("inbox"), headers={**HTMX, "HX-Target": "inbox-rows"}).content.decode()
    assert fragment.startswith("\n<title>(1) Inbox · pollerdash</title>") or "<title>(1) Inbox" in fragment[:200]
    assert 'id="inbox-counts" class="filter-counts" hx-swap-oob="true"' in fragment
    assert f'data-ids="{esc.pk}"' in fragment and "<html" not in fragment


def test_the_operations_live_refresh_brings_the_tab_counts(stopped, make_operation, responder_client) -> None:
    stopped()
    url = reverse("operation_list")
    page = responder_client.get(url).content.decode()
    assert (
        page.count('id="operations-tabs"') == 1 and 'id="operations-tabs" aria-label="Status" hx-swap-oob' not in page
    )
    make_operation("slow_success__id=new-one")
    fragment = responder_client.get(url, headers={**HTMX, "HX-Target": "operations-table"}).content.decode()
    assert 'id="operations-tabs" aria-label="Status" hx-swap-oob="true"' in fragment and "<html" not in fragment
    tabs = re.search(r'id="operations-tabs".*?</nav>', fragment, re.S).group(0)
    assert re.search(r'All <span class="n">2</span>', tabs), tabs


def test_a_card_refresh_is_204_until_something_on_it_changes(stopped, responder_client, bob) -> None:
    from operations.decisions.services import escalation_decide

    esc = stopped()
    url = reverse("escalation_card", args=[esc.pk])
    first = responder_client.get(url, headers=HTMX)
    etag = re.search(r"etag=([0-9.]+)", first.content.decode()).group(1)
    assert responder_client.get(url, {"etag": etag}, headers=HTMX).status_code == 204
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=bob, option_id="inspect", card_version=esc.version
    )
    changed = responder_client.get(url, {"etag": etag}, headers=HTMX)
    assert changed.status_code == 200 and "Looked at by bob" in changed.content.decode()
    # Without htmx the card's URL leads to its operation page.
    assert responder_client.get(url)["Location"] == f"/operations/{esc.operation_id}/#card-{esc.pk}"


def test_htmx_decisions_answer_with_the_refreshed_card(stopped, responder_client) -> None:
    esc = stopped()
    url = reverse("escalation_decide", args=[esc.pk])
    forged = responder_client.post(url, {"option": "extend:999m:99", "version": esc.version}, headers=HTMX)
    assert forged.status_code == 422
    assert "option not offered on this card: extend:999m:99" in forged.content.decode()
    applied = responder_client.post(
        url, {"option": "extend:15m:4", "version": esc.version, "where": "inbox"}, headers=HTMX
    )
    assert applied.status_code == 200 and "flash-ok" in applied.content.decode()
    assert "Decided" in applied.content.decode()
    stale = responder_client.post(url, {"option": "close", "version": esc.version}, headers=HTMX)
    assert stale.status_code == 409 and "state changed — review again" in stale.content.decode()
    assert [d.outcome for d in Decision.objects.order_by("pk")] == ["refused", "applied", "refused"]
    assert Operation.objects.get(pk=esc.operation_id).status == "running"


def test_inspect_records_and_then_opens_the_provider_console(stopped, responder_client) -> None:
    esc = stopped()
    response = responder_client.post(
        reverse("escalation_decide", args=[esc.pk]), {"option": "inspect", "version": esc.version}
    )
    assert response.status_code == 303 and "/console/never_finishes" in response["Location"]
    assert Decision.objects.get().outcome == "recorded"
    assert Escalation.objects.get(pk=esc.pk).state == "open"


def test_operations_list_tabs_filters_and_search(stopped, make_operation, responder_client) -> None:
    esc = stopped(purpose="Quarterly ledger")
    running = make_operation("slow_success__id=listed", purpose="Invoice batch")
    url = reverse("operation_list")
    assert esc.operation_id in responder_client.get(url, {"tab": "needs_attention"}).content.decode()
    assert running.pk not in responder_client.get(url, {"tab": "needs_attention"}).content.decode()
    assert running.pk in responder_client.get(url, {"tab": "active"}).content.decode()
    assert running.pk in responder_client.get(url, {"q": "invoice"}).content.decode()
    assert running.pk in responder_client.get(url, {"q": "listed"}).content.decode()
    assert running.pk in responder_client.get(url, {"q": running.pk[:12]}).content.decode()
    # An id pasted without "op_" or in lower case finds it too.
    assert running.pk in responder_client.get(url, {"q": running.pk[3:]}).content.decode()
    assert running.pk in responder_client.get(url, {"q": running.pk.lower()}).content.decode()
    assert esc.operation_id not in responder_client.get(url, {"q": "invoice"}).content.decode()
    by_reason = responder_client.get(url, {"reason": "deadline_exceeded"}).content.decode()
    assert esc.operation_id in by_reason and running.pk not in by_reason
    assert running.pk in responder_client.get(url, {"status": "pending"}).content.decode()
    page = responder_client.get(url, {"page": "999"})
    assert page.status_code == 200  # out of range: the last page, never a 500
    assert responder_client.get(url, {"tab": "nonsense", "status": "x'--", "page": "-1"}).status_code == 200


def test_history_filters(stopped, responder_client, alice, bob) -> None:
    from operations.decisions.services import escalation_decide

    esc = stopped()
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=alice, option_id="extend:15m:4", card_version=esc.version
    )
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=esc.pk, user=bob, option_id="close", card_version=esc.version
    )
    url = reverse("decision_history")
    by_bob = responder_client.get(url, {"user": "bob"}).content.decode()
    assert "refused — state changed" in by_bob and "Extend 15 min / 4 checks" not in by_bob
    applied = responder_client.get(url, {"outcome": "applied", "option": "extend"}).content.decode()
    # Tables name the option, not its id (the id is on hover and in the CSV).
    assert ">Extend 15 min / 4 checks<" in applied and "Close — stop watching" not in applied
    assert "<code>extend:15m:4</code>" not in applied
    assert "No decisions match" in responder_client.get(url, {"since": "2030-01-01"}).content.decode()
    assert responder_client.get(url, {"outcome": "<x>"}).status_code == 200  # not an outcome: no filter


def test_the_first_acceptor_is_told_to_wait_for_a_second_responder(stopped, client: Client, alice, bob) -> None:
    from operations.decisions.services import escalation_decide

    esc = stopped("succeeded_no_result")
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="accept_output",
        card_version=esc.version,
        comment="ok",
    )
    url = reverse("escalation_card", args=[esc.pk])
    client.force_login(alice)
    mine = client.get(url, headers=HTMX).content.decode()
    assert "You accepted this output" in mine and 'value="accept_output"' not in mine
    client.force_login(bob)
    theirs = client.get(url, headers=HTMX).content.decode()
    assert "Confirm acceptance (second responder after alice)" in theirs and 'value="accept_output"' in theirs


def test_a_confirmed_acceptance_waits_for_nobody(stopped, client: Client, alice, bob) -> None:
    from operations.decisions.services import escalation_decide

    esc = stopped("succeeded_no_result")
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="accept_output",
        card_version=esc.version,
        comment="ok",
    )
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=bob,
        option_id="accept_output",
        card_version=esc.version + 1,
        comment="checked",
    )
    client.force_login(alice)
    card = client.get(reverse("escalation_card", args=[esc.pk]), headers=HTMX).content.decode()
    assert "Decided" in card and "must confirm" not in card
    history = client.get(reverse("decision_history")).content.decode()
    assert "confirmed by bob" in history and "awaiting second</span>" not in history
    waiting = client.get(reverse("decision_history"), {"outcome": "awaiting_second"}).content.decode()
    assert "No decisions match" in waiting


def test_a_cancel_the_provider_did_not_confirm_is_not_shown_as_done(stopped, responder_client, alice) -> None:
    from operations.decisions.services import escalation_decide

    esc = stopped("cancel_unsupported")
    result = escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=alice,
        option_id="cancel_at_provider",
        card_version=esc.version,
    )
    assert result.decision.provider_response["state"] != "confirmed"
    history = responder_client.get(reverse("decision_history")).content.decode()
    assert 'outcome-warn">sent — provider refused<' in history and 'outcome-ok">applied<' not in history


def test_a_flood_of_refused_decisions_is_recorded_once_with_a_count_then_refused_with_429(
    stopped, responder_client, settings
) -> None:
    from operations.models import AuditEntry

    settings.DECISIONS_PER_MINUTE = 5
    esc = stopped()
    url = reverse("escalation_decide", args=[esc.pk])
    entries = AuditEntry.objects.count()
    flood = {"option": "extend:999m:99", "version": esc.version, "comment": "x" * 1900}
    answers = [responder_client.post(url, flood, headers=HTMX) for _ in range(8)]
    assert [a.status_code for a in answers] == [422] * 5 + [429] * 3
    # Five refusals reached the card; they are one record and one audit entry.
    [refusal] = Decision.objects.filter(escalation=esc)
    assert refusal.outcome == "refused" and refusal.repeat_count == 4 and refusal.last_repeated_at is not None
    assert AuditEntry.objects.count() == entries + 1
    limited = answers[-1]
    assert limited["Retry-After"] == str(60 - timezone.now().second)  # until the minute's window ends
    assert "Too many decisions: at most 5 per minute per person. Nothing was recorded" in limited.content.decode()
    assert 'id="card-' in limited.content.decode()  # htmx gets the card back, with the message
    plain = responder_client.post(url, {"option": "close", "version": esc.version})
    assert plain.status_code == 429 and "Too many decisions" in plain.content.decode()
    assert Decision.objects.filter(escalation=esc).count() == 1

    history = responder_client.get(reverse("decision_history")).content.decode()
    assert "tried 4 more times the same way" in history
    csv_text = b"".join(responder_client.get(reverse("decision_history_csv")).streaming_content).decode()
    header, row = csv_text.splitlines()[:2]
    assert header.endswith(
        ",repeat_count,last_repeated_at,option_label,outcome_label,bulk_decision_id,authentication,channel,channel_identity"
    )
    assert ",4," in row and ",Extend 999 min / 99 checks,refused — option not offered,," in row


def test_refusals_that_differ_or_come_later_are_recorded_apart(stopped, alice, bob, clock, settings) -> None:
    from operations.decisions.services import escalation_decide

    settings.DECISIONS_PER_MINUTE = 0
    settings.DECISION_REPEAT_WINDOW_S = 600
    esc = stopped()

    def refuse(user: object, option: str = "extend:999m:99", version: object = None) -> Decision:
        result = escalation_decide(
            sign_in=signed_in_now(),
            escalation_id=esc.pk,
            user=user,
            option_id=option,
            card_version=esc.version if version is None else version,
        )
        assert result.refused
        return result.decision

    first = refuse(alice)
    assert refuse(alice).pk == first.pk
    assert refuse(bob).pk != first.pk  # another person
    assert refuse(alice, option="extend:999m:98").pk != first.pk  # another option
    assert refuse(alice, version=esc.version + 7).pk != first.pk  # another version (and reason: stale)
    clock.shift(timedelta(seconds=599))
    assert refuse(alice).pk == first.pk  # within the window of its last repeat
    clock.shift(timedelta(seconds=601))
    assert refuse(alice).pk != first.pk
    first.refresh_from_db()
    assert first.repeat_count == 2
