"""The dashboard on a phone, in a real Chromium emulating one (touch, 390×844, three device pixels per
CSS pixel): a card decided end to end by taps — an extension's two taps, a cancel's confirmation and
the fresh sign-in it needs — and, on every page on the way, no sideways scrolling and no control
smaller than a fingertip (44×44 CSS px). The screenshots land in test-artifacts/phone-*.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from operations.models import Decision, Escalation, Operation
from tests.browser.pages import PHONE_TOUCH, age_sign_in, fits_a_phone

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CANCEL = "Cancel the job at the provider"
EXTEND = "Extend 15 min / 4 checks"


def test_on_a_phone_a_responder_extends_a_card_with_two_taps(
    open_page, make_user, budget_card, artifacts, live_server
) -> None:
    alice = make_user("alice")
    esc = budget_card(purpose="Nightly export of the customer ledger for the data warehouse, region eu-central")
    budget_card(purpose="Quarterly export for the finance team")
    phone = open_page(alice, **PHONE_TOUCH)
    row = phone.locator(f"#esc-{esc.pk}")
    expect(row).to_be_visible()
    fits_a_phone(phone, artifacts, "phone-inbox")

    row.get_by_role("button", name=re.compile("Review")).tap()
    card = phone.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text("Why it stopped")
    fits_a_phone(phone, artifacts, "phone-inbox-card")

    extend = card.get_by_role("button", name=EXTEND)
    extend.tap()
    # The first tap only arms the option, and says what a second tap does (for 8 s: no slow checks here).
    expect(extend).to_contain_text(f"Confirm: {EXTEND} — tap again")
    assert not Decision.objects.exists()
    extend.screenshot(path=str(artifacts / "phone-option-armed.png"), caret="initial")
    extend.tap()
    expect(card.locator(".flash-ok")).to_contain_text(EXTEND)
    expect(card.locator(".card-title")).to_have_text("Decided")
    decision = Decision.objects.get(escalation=esc)
    assert (decision.outcome, decision.user) == ("applied", alice)
    op = Operation.objects.get(pk=esc.operation_id)
    assert (op.status, op.max_status_requests) == ("running", 5)

    phone.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(phone.locator("#op-head .status")).to_have_text("running")
    expect(phone.locator(".chart-svg")).to_be_visible()
    fits_a_phone(phone, artifacts, "phone-operation")


def test_on_a_phone_a_cancel_is_confirmed_by_touch_after_a_fresh_sign_in(
    open_page, make_user, budget_card, artifacts, live_server
) -> None:
    alice = make_user("alice")
    esc = budget_card(purpose="Quarterly export for the finance team")
    phone = open_page(alice, **PHONE_TOUCH)
    phone.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    card = phone.locator(f"#card-{esc.pk}")
    expect(card.locator(".card-title")).to_have_text("Needs a decision")
    fits_a_phone(phone, artifacts, "phone-card")

    card.get_by_text(f"{CANCEL}…").tap()
    confirm = card.get_by_role("button", name=f"Yes, {CANCEL.lower()}")
    expect(confirm).to_be_in_viewport()
    # No on-screen keyboard pops up over the button: the comment box waits for a tap of its own.
    assert phone.evaluate("document.activeElement.tagName") != "TEXTAREA"
    fits_a_phone(phone, artifacts, "phone-card-cancel-confirmation")

    # The sign-in grows old while the confirmation is open: the tap is refused, nothing is sent.
    age_sign_in(phone, minutes=16)
    confirm.tap()
    expect(card.locator(".flash-error")).to_contain_text("needs a sign-in within the last 15 minutes")
    assert Decision.objects.get(escalation=esc).outcome == "refused"
    assert Operation.objects.get(pk=esc.operation_id).status == "needs_attention"
    fits_a_phone(phone, artifacts, "phone-card-sign-in-again")

    card.get_by_test_id("reauth").tap()
    expect(phone.get_by_role("heading", name="Confirm it's you")).to_be_visible()
    phone.fill("#id_password", "pw-alice")
    fits_a_phone(phone, artifacts, "phone-fresh-sign-in")
    phone.get_by_role("button", name="Confirm").tap()
    phone.wait_for_url(re.compile(rf"/operations/{esc.operation_id}/\?card={esc.pk}&v={esc.version}#card-{esc.pk}$"))
    expect(card.locator(".flash-ok")).to_contain_text("the card is as you left it")

    card.get_by_text(f"{CANCEL}…").tap()
    card.get_by_role("button", name=f"Yes, {CANCEL.lower()}").tap()
    expect(card.locator(".callout")).to_contain_text("Cancel at the provider")
    applied = Decision.objects.get(escalation=esc, outcome="applied")
    assert (applied.option, applied.user) == ("cancel_at_provider", alice)
    fits_a_phone(phone, artifacts, "phone-card-cancelled")


def test_on_a_phone_a_group_is_decided_together_by_touch(
    open_page, make_user, budget_card, make_profile, artifacts, live_server, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    alice = make_user("alice")
    profile = make_profile(slug="acme-export", account="acme-export")
    cards = [budget_card(purpose=f"Customer export {n}", provider=profile) for n in range(3)]
    phone = open_page(alice, **PHONE_TOUCH)
    group_row = phone.locator(f"#group-{cards[0].group_id}")
    expect(group_row).to_contain_text("3 operations")
    fits_a_phone(phone, artifacts, "phone-inbox-group")

    group_row.get_by_role("link", name="Review the group →").tap()
    expect(phone.locator("h1")).to_have_text("3 operations: Request budget spent on acme-export")
    fits_a_phone(phone, artifacts, "phone-group")
    phone.get_by_label(re.compile(EXTEND)).tap()
    phone.get_by_role("checkbox", name=f"Select {cards[2].operation_id}").tap()  # leave this one out
    phone.get_by_role("button", name="Review the selected cards…").tap()
    confirm = phone.locator("#bulk-confirm")
    expect(confirm).to_contain_text("2 operations × 4 checks = 8 requests")
    fits_a_phone(phone, artifacts, "phone-group-confirm")
    confirm.get_by_role("button", name=f"Yes: {EXTEND} · 2 operations").tap()
    expect(phone.locator("#bulk-result")).to_contain_text(f"Applied “{EXTEND}” to 2 of 2 cards")
    assert {e.state for e in Escalation.objects.filter(pk__in=[c.pk for c in cards[:2]])} == {"decided"}
    assert Escalation.objects.get(pk=cards[2].pk).state == "open"
    fits_a_phone(phone, artifacts, "phone-group-result")
