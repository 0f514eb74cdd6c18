"""The inbox by urgency, alerts that name a group, and local time after every partial refresh, in a real
Chromium against real cards (issue 25, item 3).

Desktop notifications are recorded in place of the browser's own (its UI is a boundary we do not
own, tests/browser/test_inbox_alerts.py); the viewer's time zone is the browser context's.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from operations.models import Escalation, Operation
from tests.browser.pages import shoot
from tests.browser.test_inbox_alerts import RECORDERS, away, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOS_ANGELES = "America/Los_Angeles"
LOCAL = re.compile(r"\d\d:\d\d(:\d\d)? P[SD]T")


def mark_stale(page, selector: str) -> None:
    """Tag the element now on the page, so the test can wait for the server's fresh copy of it."""
    page.evaluate("s => document.querySelector(s).setAttribute('data-stale', '')", selector)


def wait_refreshed(page, selector: str) -> None:
    wait_for(
        page,
        f"document.querySelector({selector!r}) && !document.querySelector({selector!r}).hasAttribute('data-stale')",
    )


def test_after_an_act_the_refreshed_facts_chart_and_timeline_stay_in_the_viewers_time(
    open_page, make_user, budget_card, live_server, artifacts
) -> None:
    esc = budget_card(business_deadline_at=timezone.now() + timedelta(minutes=50))
    page = open_page(make_user("alice"), timezone_id=LOS_ANGELES)
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    deadline = page.locator(".facts dt:text-is('Deadline') + dd time")
    expect(deadline).to_have_text(LOCAL)

    # Acknowledging the card answers with the card and refreshes the rest of the page (its head and body).
    mark_stale(page, "#op-body")
    mark_stale(page, "#op-head")
    page.locator(f"#card-{esc.pk}").get_by_role("button", name="Acknowledge — I'm on it").click()
    wait_refreshed(page, "#op-body")
    wait_refreshed(page, "#op-head")

    expect(page.locator("[data-tz-note]")).to_have_text(re.compile(r"^times in P[SD]T$"))
    expect(deadline).to_have_text(LOCAL)
    expect(page.locator(".chart-svg text[data-zone-label]")).to_have_text(re.compile(r"time \(P[SD]T\)"))
    story = page.locator(".story")
    expect(story).to_contain_text(re.compile(r"deadline (\w{3} \d+ )?\d\d:\d\d:\d\d P[SD]T"))
    expect(story.locator(".story-text").first).not_to_contain_text("UTC")
    # Every clock label of the chart reads the viewer's time of the moment it stands for.
    labels = page.evaluate(
        """() => Array.from(document.querySelectorAll(".chart-svg text[data-at]")).map(t => [t.textContent,
        new Date(t.getAttribute("data-at")).toLocaleTimeString("en-GB", {hour: "2-digit", minute: "2-digit"})])"""
    )
    assert labels and all(local in text for text, local in labels), labels
    shoot(page, artifacts, "operation-refreshed-local-time")


def test_the_bulk_review_says_until_when_in_the_viewers_time(
    open_page, make_user, budget_card, make_profile, live_server, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    profile = make_profile(slug="acme-export", account="acme-export")
    cards = [budget_card(purpose=f"Customer export {n}", provider=profile) for n in range(2)]
    page = open_page(make_user("alice"), timezone_id=LOS_ANGELES)
    page.goto(f"{live_server.url}/groups/{cards[0].group_id}/")
    page.get_by_label(re.compile("Extend 15 min / 4 checks")).check()
    page.get_by_role("button", name="Review the selected cards…").click()
    confirm = page.locator("#bulk-confirm")
    # The date comes first when the window ends on another day in the viewer's zone (near its midnight).
    expect(confirm).to_contain_text(re.compile(r"until ([A-Z][a-z]{2} \d{1,2} )?\d\d:\d\d P[SD]T"))
    expect(confirm).not_to_contain_text("UTC")


def test_the_inbox_puts_the_most_urgent_first_groups_and_cards_alike(
    open_page, make_user, budget_card, make_profile, settings, artifacts
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    now = timezone.now()

    def single(name: str, business_in: timedelta | None) -> Escalation:
        card = budget_card(purpose=name, provider=make_profile(slug=name.lower().replace(" ", "-")))
        if business_in is not None:
            Operation.objects.filter(pk=card.operation_id).update(business_deadline_at=now + business_in)
        return card

    def group(name: str, business_in: timedelta | None) -> int:
        profile = make_profile(slug=name, account=name)
        cards = [budget_card(purpose=f"{name} {n}", provider=profile) for n in range(2)]
        if business_in is not None:
            Operation.objects.filter(pk=cards[1].operation_id).update(business_deadline_at=now + business_in)
        return cards[0].group_id

    oldest = single("Oldest card without a business deadline", None)
    calm = group("calm-outage", None)  # no business deadline, opened after `oldest`
    hour = single("Release notes due in an hour", timedelta(hours=1))
    soon = group("soon-outage", timedelta(minutes=30))
    # The case: its business deadline passed 15 min ago; every group used to sit above it.
    passed = single("Deployment validation, deadline passed", timedelta(minutes=-15))

    page = open_page(make_user("alice"))
    rows = page.locator("#inbox-rows > article")
    expected = [f"esc-{passed.pk}", f"group-{soon}", f"esc-{hour.pk}", f"esc-{oldest.pk}", f"group-{calm}"]
    expect(rows).to_have_count(5)
    assert [rows.nth(i).get_attribute("id") for i in range(5)] == expected
    shoot(page, artifacts, "inbox-by-urgency")


def test_a_card_joining_a_group_is_announced_with_the_group_its_reason_and_provider(
    open_page, make_user, budget_card, make_profile, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    profile = make_profile(slug="acme-export", account="acme")
    budget_card(purpose="Customer export 1", provider=profile)
    budget_card(purpose="Customer export 2", provider=profile)
    page = open_page(make_user("alice"))
    page.add_init_script(RECORDERS)
    page.reload()
    page.locator("[data-alerts-desktop]").click()
    away(page, True)

    budget_card(purpose="Customer export 3", provider=profile)
    wait_for(page, "window.__shown.length === 1")
    [shown] = page.evaluate("window.__shown")
    assert shown["title"] == "Decision needed: Request budget spent · group of 3 cards"
    assert shown["body"] == "3 operations: Request budget spent on acme · provider acme-export"
    assert "new card" not in shown["title"] and "card g" not in shown["body"]
