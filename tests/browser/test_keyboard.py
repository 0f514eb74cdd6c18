"""Keyboard safety in a real Chromium: a number key acts only on the card the responder opened and
is looking at (the open card that holds the focus); it never opens a card, and a key's hint shows
only where that key works."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from operations.models import Decision

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def visible_hints(page: object, selector: str = "kbd.key-hint") -> list[str]:
    """The key hints a person can see on the page."""
    return page.eval_on_selector_all(
        selector, "els => els.filter(e => e.checkVisibility()).map(e => e.textContent.trim())"
    )


def test_a_number_key_on_a_fresh_inbox_opens_nothing_and_decides_nothing(open_page, make_user, budget_card):
    bob = make_user("bob")
    first, second = budget_card(), budget_card(purpose="Second export")
    page = open_page(bob)
    expect(page.locator(f"#esc-{first.pk}")).to_be_visible()
    expect(page.locator(f"#esc-{second.pk}")).to_be_visible()
    # No row is selected: no hint anywhere, since no key would do anything yet.
    assert visible_hints(page) == []

    for _ in range(2):
        page.keyboard.press("1")
    page.keyboard.press("2")
    expect(page.locator(".row.is-open")).to_have_count(0)
    expect(page.locator(".is-armed")).to_have_count(0)
    assert not Decision.objects.exists()

    # j selects the top row: its `o` hint appears, on that row only; a number still opens nothing.
    page.keyboard.press("j")
    selected = page.locator(".row.is-selected")
    expect(selected).to_have_count(1)
    assert visible_hints(page) == ["o"]
    expect(selected.locator("kbd.key-hint")).to_be_visible()
    page.keyboard.press("1")
    page.keyboard.press("1")
    expect(page.locator(".row.is-open")).to_have_count(0)
    assert not Decision.objects.exists()


def test_number_keys_act_only_on_the_open_card_that_has_the_focus(open_page, make_user, budget_card):
    bob = make_user("bob")
    first, second = budget_card(), budget_card(purpose="Second export")
    page = open_page(bob)
    rows = page.locator("#inbox-rows .row")
    expect(rows).to_have_count(2)
    top_id, other_id = (rows.nth(i).get_attribute("data-esc") for i in range(2))
    other = page.locator(f"#esc-{other_id}")

    # j, o: the top card opens and takes the focus; its number hints show, nowhere else.
    page.keyboard.press("j")
    page.keyboard.press("o")
    top_card = page.locator(f"#card-{top_id}")
    expect(top_card.locator(".options")).to_be_visible()
    expect(top_card).to_be_focused()
    expect(top_card.locator(".options kbd.key-hint").first).to_be_visible()
    assert "o" in visible_hints(page) and set(visible_hints(page, f"#card-{top_id} .options kbd")) >= {"1", "2"}

    # 1 arms its first option (nothing sent); Esc disarms.
    page.keyboard.press("1")
    armed = top_card.locator("[data-option-index='1'] button")
    expect(armed).to_contain_text("Confirm: Extend 15 min / 4 checks")
    page.keyboard.press("Escape")
    expect(page.locator(".is-armed")).to_have_count(0)

    # j moves on to the other row: the open card keeps its place but no longer has the keys.
    page.keyboard.press("j")
    expect(other).to_have_class(re.compile("is-selected"))
    assert visible_hints(page, f"#card-{top_id} .options kbd") == []
    page.keyboard.press("1")
    page.keyboard.press("1")
    expect(page.locator(".is-armed")).to_have_count(0)
    expect(other).not_to_have_class(re.compile("is-open"))
    assert not Decision.objects.exists()

    # o opens the other card: now 1, 1 decides that card, and only that one.
    page.keyboard.press("o")
    other_card = page.locator(f"#card-{other_id}")
    expect(other_card).to_be_focused()
    page.keyboard.press("1")
    expect(other_card.locator("[data-option-index='1'] button")).to_contain_text("Confirm:")
    page.keyboard.press("1")
    expect(other_card.locator(".flash-ok")).to_be_visible()
    assert [(d.escalation_id, d.option, d.user) for d in Decision.objects.all()] == [
        (int(other_id), "extend:15m:4", bob)
    ]
    expect(top_card.locator(".card-title")).to_have_text("Needs a decision")
    assert {first.pk, second.pk} == {int(top_id), int(other_id)}


def test_on_the_operation_page_the_keys_wait_until_the_card_is_chosen(open_page, make_user, budget_card, live_server):
    alice = make_user("alice")
    esc = budget_card()
    page = open_page(alice)
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    card = page.locator(f"#card-{esc.pk}")
    expect(card.locator(".options")).to_be_visible()
    # Landing on the page chooses nothing: no hints, and 1 does nothing.
    assert visible_hints(page) == []
    page.keyboard.press("1")
    expect(page.locator(".is-armed")).to_have_count(0)

    # A click on the card gives it the keys.
    card.locator(".why").click()
    expect(card.locator(".options kbd.key-hint").first).to_be_visible()
    page.keyboard.press("1")
    expect(card.locator("[data-option-index='1'] button")).to_contain_text("Confirm: Extend 15 min / 4 checks")
    page.keyboard.press("Escape")

    # A link to the card itself (a notification's) chooses it.
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/#card-{esc.pk}")
    expect(page.locator(f"#card-{esc.pk}")).to_be_focused()
    assert not Decision.objects.exists()
