"""The on-call dashboard in a real Chromium: live inbox, deciding, keyboard, roles, escaping."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from operations.models import Authorization, Decision, Escalation, Operation
from tests.browser.pages import PHONE, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS_PURPOSE = "<script>window.xss='purpose'</script> export"
XSS_META = "<img src=x onerror=\"window.xss='metadata'\">"
# A job id is one path segment (no /), so the provider's state that rides in it is an element without one.
XSS_STATE = "<img src=x onerror=window.xss=3>"
XSS_ERROR = "<svg onload=\"window.xss='error'\"></svg>"


def test_a_responder_sees_a_card_arrive_live_and_extends_it(open_page, make_user, budget_card, artifacts, live_server):
    alice = make_user("alice")
    page = open_page(alice)
    expect(page.get_by_text("Nothing needs a decision")).to_be_visible()
    expect(page).to_have_title("Inbox · pollerdash")

    # The card is opened by the real controller while the page is open; no reload.
    esc = budget_card()
    row = page.locator(f"#esc-{esc.pk}")
    expect(row).to_be_visible(timeout=10_000)
    expect(page).to_have_title("(1) Inbox · pollerdash")
    expect(page.locator("#inbox-counts .seg-item").first).to_contain_text("Everyone 1")
    expect(row.locator(".chip-reason")).to_have_text("Request budget spent")
    expect(row).to_contain_text("1 of 1")
    shoot(page, artifacts, "inbox-desktop")

    row.get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text("Why it stopped")
    extend = card.get_by_role("button", name="Extend 15 min / 4 checks")
    expect(extend).to_contain_text("+4 requests: 4 checks, about every")
    shoot(page, artifacts, "card-desktop")
    extend.click()
    expect(extend).to_contain_text("Confirm: Extend 15 min / 4 checks")  # two-step: nothing sent yet
    assert not Decision.objects.exists()
    extend.click()
    expect(card.locator(".flash-ok")).to_contain_text("Extend 15 min / 4 checks")
    expect(card.locator(".card-title")).to_have_text("Decided")

    op = Operation.objects.get(pk=esc.operation_id)
    assert op.status == "running" and op.max_status_requests == 5 and op.delay_source == "manual_extension"
    assert Authorization.objects.get(operation=op, number=2).granted_by == alice

    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.locator(".op-sub .status")).to_have_text("running")
    expect(page.get_by_role("heading", name="Authorization chain")).to_be_visible()
    expect(page.get_by_role("cell", name="extension").first).to_be_visible()
    expect(page.locator(".chart-svg")).to_be_visible()
    shoot(page, artifacts, "operation-desktop")

    page.get_by_role("link", name="History").click()
    history_row = page.locator("table.history tbody tr").first
    expect(history_row).to_contain_text("alice")
    expect(history_row).to_contain_text("Extend 15 min / 4 checks")
    expect(history_row.locator(".outcome")).to_have_text("applied")
    shoot(page, artifacts, "history-desktop")

    # The same pages at phone width.
    phone = open_page(alice, viewport=PHONE)
    other = budget_card(purpose="Nightly export of the customer ledger for the data warehouse")
    phone.goto(f"{live_server.url}/")
    expect(phone.locator(f"#esc-{other.pk}")).to_be_visible()
    shoot(phone, artifacts, "inbox-phone")
    phone.locator(f"#esc-{other.pk}").get_by_role("button", name=re.compile("Review")).click()
    expect(phone.locator(f"#card-{other.pk}")).to_contain_text("Why it stopped")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shoot(phone, artifacts, "inbox-card-phone")
    phone.goto(f"{live_server.url}/operations/{op.pk}/")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shoot(phone, artifacts, "operation-phone")


def test_an_open_inline_card_shows_what_another_responder_decided(open_page, make_user, budget_card):
    from operations.decisions.services import escalation_decide
    from tests.support import signed_in_now

    alice, bob = make_user("alice"), make_user("bob")
    esc = budget_card()
    waiting = budget_card(purpose="Second export, still waiting")
    page = open_page(alice)
    page.locator(f"#esc-{esc.pk}").get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card.locator(".card-title")).to_have_text("Needs a decision")
    page.mouse.move(0, 0)  # the pointer is off the list; the open card alone holds the rows

    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=esc.pk,
        user=bob,
        option_id="close",
        card_version=esc.version,
        comment="dup job",
    )
    # The card refreshes itself in place; the list is held (a card is open) and says only what changed.
    expect(card.locator(".card-title")).to_have_text("Decided")
    expect(card).to_contain_text("The operation is now")
    expect(card.locator("[data-option-index]")).to_have_count(0)
    expect(page.locator("#live-note")).to_contain_text("1 no longer open")
    expect(page).to_have_title("(1) Inbox · pollerdash")
    expect(page.locator("#inbox-counts .seg-item").first).to_contain_text("Everyone 1")
    expect(page.locator(f"#esc-{waiting.pk}")).to_be_visible()


def test_a_decision_on_the_operation_page_updates_the_whole_page(open_page, make_user, budget_card, live_server):
    alice = make_user("alice")
    esc = budget_card()
    page = open_page(alice)
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    expect(page.locator("#op-head .status")).to_have_text("needs attention")
    expect(page.locator("#op-body .gauges")).to_contain_text("1 of 1 used")
    extend = page.locator(f"#card-{esc.pk}").get_by_role("button", name="Extend 15 min / 4 checks")
    extend.click()
    extend.click()
    expect(page.locator(f"#card-{esc.pk} .flash-ok")).to_contain_text("Extend 15 min / 4 checks")
    # Without a reload: the head, the gauges and the authorization chain follow the decision.
    expect(page.locator("#op-head .status")).to_have_text("running")
    expect(page.locator("#op-body .gauges")).to_contain_text("1 of 5 used")
    expect(page.get_by_role("cell", name="extension").first).to_be_visible()


def test_a_viewer_sees_no_decision_buttons(open_page, make_user, budget_card, live_server):
    vera = make_user("vera", role="viewer")
    esc = budget_card()
    page = open_page(vera)
    row = page.locator(f"#esc-{esc.pk}")
    row.get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text("Deciding needs the responder role")
    expect(card.locator("[data-option-index]")).to_have_count(0)
    expect(card.get_by_role("button")).to_have_count(0)
    page.keyboard.press("1")
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    expect(page.locator(".card")).to_contain_text("Deciding needs the responder role")
    expect(page.locator(".card [data-option-index]")).to_have_count(0)
    assert not Decision.objects.exists()
    assert Escalation.objects.get(pk=esc.pk).state == "open"


def test_provider_and_agent_text_is_shown_literally_and_never_runs(
    open_page, make_user, make_profile, make_operation, live_server, artifacts
):
    from operations.polls.controller import poll_once
    from tests.support import job_id

    alice = make_user("alice")
    loose = make_profile(job_id_pattern=r"^.{1,200}$")
    op = make_operation(
        job_id("unknown_state", value=XSS_STATE),
        provider=loose,
        purpose=XSS_PURPOSE,
        metadata={"note": XSS_META, XSS_META[:40]: "key"},
    )
    poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence)
    esc = Escalation.objects.get(operation=op, state="open")
    assert esc.reason == "unknown_state"
    Operation.objects.filter(pk=op.pk).update(
        warnings=[XSS_ERROR], error={"code": "x", "message": XSS_ERROR, "provider_error": {"detail": XSS_META}}
    )
    page = open_page(alice)
    page.on("dialog", lambda dialog: dialog.dismiss())
    expect(page.locator(f"#esc-{esc.pk}")).to_contain_text(XSS_PURPOSE)
    page.locator(f"#esc-{esc.pk}").get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text(XSS_STATE)
    expect(card.get_by_role("button", name=re.compile("Treat")).first).to_contain_text(XSS_STATE)
    for path in (f"/operations/{op.pk}/", "/operations/", f"/operations/{op.pk}/report/"):
        page.goto(f"{live_server.url}{path}")
        expect(page.get_by_text(XSS_PURPOSE).first).to_be_visible()
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.get_by_text(XSS_META).first).to_be_visible()
    expect(page.get_by_text(XSS_ERROR).first).to_be_visible()
    expect(page.locator(".card")).to_contain_text(XSS_STATE)
    shoot(page, artifacts, "escaping-operation-desktop")
    assert page.evaluate("window.xss") is None
    assert page.locator("img[src='x']").count() == 0


def test_a_responder_over_the_decision_rate_is_told_on_the_card_and_nothing_is_recorded(
    open_page, make_user, budget_card, artifacts, settings
):
    from datetime import timedelta

    from django.utils import timezone

    from operations.limits import ratelimit
    from operations.models import RateWindow

    settings.DECISIONS_PER_MINUTE = 1
    alice = make_user("alice")
    esc = budget_card()
    # Alice used up this minute and the next already (a minute may turn while the page loads).
    start, _ = ratelimit.window_of(now=timezone.now(), window_s=60)
    for minute in (0, 1):
        RateWindow.objects.create(
            key=f"decisions:user:{alice.pk}", window_start=start + timedelta(minutes=minute), count=1
        )
    page = open_page(alice)
    page.locator(f"#esc-{esc.pk}").get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    extend = card.get_by_role("button", name="Extend 15 min / 4 checks")
    extend.click()
    extend.click()
    expect(card.locator(".flash-error")).to_contain_text("Too many decisions: at most 1 per minute per person")
    expect(card.get_by_role("button", name="Extend 15 min / 4 checks")).to_be_visible()  # still open, still offered
    shoot(page, artifacts, "card-too-many-decisions")
    assert not Decision.objects.exists()
    assert Escalation.objects.get(pk=esc.pk).state == "open"


def test_a_confirmation_shows_one_comment_box_and_keeps_what_was_typed(open_page, make_user, budget_card) -> None:
    esc = budget_card()
    page = open_page(make_user("alice"))
    page.locator(f"#esc-{esc.pk}").get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    comments = card.locator("textarea[name=comment]")
    expect(comments.filter(visible=True)).to_have_count(1)
    card.locator(f"#comment-{esc.pk}").fill("vendor confirmed the job is dead")
    card.locator(".opt-explicit summary").filter(has_text="Close").click()
    # One box at a time: the confirmation's own, holding what was typed in the card's.
    expect(comments.filter(visible=True)).to_have_count(1)
    expect(card.locator(".opt-explicit[open] textarea[name=comment]")).to_have_value("vendor confirmed the job is dead")
    card.get_by_role("button", name="Keep the card open").click()
    expect(card.locator(f"#comment-{esc.pk}")).to_be_visible()


def test_the_history_range_is_typed_in_local_dates_and_times(open_page, make_user, live_server) -> None:
    page = open_page(make_user("alice"), timezone_id="America/Los_Angeles")
    page.goto(f"{live_server.url}/history/")
    expect(page.get_by_text("From (America/Los_Angeles)")).to_be_visible()
    page.fill("input[name=since]", "2026-12-01T01:30")
    page.fill("input[name=until]", "2026-12-01T18:00")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"tz=America%2FLos_Angeles"))
    assert "since=2026-12-01T01%3A30" in page.url
    # The filter is shown back as typed, in the same zone.
    expect(page.locator("input[name=since]")).to_have_value("2026-12-01T01:30")
    expect(page.locator("[data-tz-label]").first).to_have_text("(America/Los_Angeles)")
