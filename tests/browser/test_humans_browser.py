"""Holding cards, notes and bulk decisions in a real Chromium, with real cards from the controller.

Notifications are counted where they end: Django's e-mail backend (pytest-django's outbox). The
queue's tasks are run here, in order, as a worker would run them; reminders are asked for at an
injected "now" instead of waiting for time to pass.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from operations.models import Decision, Escalation, PolicyRun
from tests.browser.pages import PHONE, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def notify(settings) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    settings.NOTIFY_WEBHOOK_URL = ""
    settings.NOTIFY_REMINDER_S = 900
    settings.SITE_URL = "https://pollerdash.example.test"


def open_inline(page, esc: Escalation):
    row = page.locator(f"#esc-{esc.pk}")
    row.get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text("Why it stopped")
    return card


def test_acknowledge_stops_the_reminders_for_that_card(
    open_page, make_user, budget_card, make_profile, notify, mailoutbox, pump, artifacts, settings
) -> None:
    # Every give-back restarts here; how often one may is tested in tests/escalations/test_paging_caps.py.
    settings.NOTIFY_RESTART_MIN_S = 0
    alice = make_user("alice")
    mine = budget_card(purpose="Quarterly export for the finance team")
    other = budget_card(purpose="Nightly ledger export", provider=make_profile(slug="ledger", account="ledger"))
    assert pump() == ["sent", "sent"]  # each card's "Decision needed" (the settings policy's level)
    mailoutbox.clear()

    page = open_page(alice)
    card = open_inline(page, mine)
    expect(card.locator(".owner-state")).to_contain_text("Nobody has acknowledged this card yet")
    card.get_by_role("button", name="Acknowledge — I'm on it").click()
    expect(card.locator(".owner-state")).to_contain_text("You acknowledged this card")
    expect(card.locator(".flash-ok")).to_contain_text("no reminders are sent for it")
    # The row says so at once, without waiting for the list to refresh.
    expect(page.locator(f"#esc-{mine.pk} .row-owner")).to_contain_text("you · since")
    shoot(page, artifacts, "humans-acknowledged-card")
    page.reload()
    expect(page.locator(f"#esc-{mine.pk} .row-owner")).to_contain_text("you · since")

    # The reminder is due for both (NOTIFY_REMINDER_S has passed): only the other card is reminded.
    PolicyRun.objects.update(next_step_at=timezone.now() - timedelta(seconds=1))
    assert pump() == ["sent"]
    [reminder] = mailoutbox
    assert reminder.subject.startswith("[pollerdash] Still undecided")
    assert str(other.operation_id) in reminder.subject
    assert PolicyRun.objects.get(pk=mine.pk).status == PolicyRun.Status.ACKNOWLEDGED

    # Given back, the card's policy starts again from its first level.
    card = open_inline(page, mine)
    card.get_by_role("button", name="Give it back").click()
    expect(card.locator(".owner-state")).to_contain_text("Nobody has acknowledged this card yet")
    assert pump() == ["sent"]
    assert str(mine.operation_id) in mailoutbox[-1].subject


def test_reassign_notifies_the_responder_and_taking_it_back_asks_first(
    open_page, make_user, budget_card, notify, mailoutbox, pump, artifacts, live_server
) -> None:
    alice = make_user("alice")
    bob = make_user("bob")
    bob.email = "bob@example.test"
    bob.save()
    make_user("vera", role="viewer")
    esc = budget_card()
    pump()
    mailoutbox.clear()

    page = open_page(alice)
    card = open_inline(page, esc)
    card.get_by_text("Hand to another responder…").click()
    options = card.locator("select[name=to] option").all_text_contents()
    assert options == ["alice (you)", "bob"]  # responders only: the viewer cannot be handed a card
    card.locator("select[name=to]").select_option("bob")
    shoot(page, artifacts, "humans-hand-over")
    card.get_by_role("button", name="Hand over").click()
    expect(card.locator(".owner-state")).to_contain_text("alice handed this card to bob")
    expect(card.locator(".owner-state")).to_contain_text("Not acknowledged yet")

    assert pump() == ["sent"]
    [mail] = mailoutbox
    assert mail.to == ["bob@example.test"]
    assert mail.subject.startswith("[pollerdash] alice handed you a card: Request budget spent")
    assert f"/operations/{esc.operation_id}/#card-{esc.pk}" in mail.body

    # bob sees it under "Mine" and acknowledges it.
    bobs = open_page(bob)
    bobs.goto(f"{live_server.url}/?mine=1")
    expect(bobs.locator(f"#esc-{esc.pk} .row-owner")).to_contain_text("you")
    bobs_card = open_inline(bobs, esc)
    bobs_card.get_by_role("button", name="Acknowledge — I'm on it").click()
    expect(bobs_card.locator(".owner-state")).to_contain_text("You acknowledged this card")

    # alice taking it back is asked to confirm, naming bob; bob is told.
    expect(card.locator(".owner-state")).to_contain_text("bob acknowledged this card", timeout=30_000)
    card.get_by_text("Take over from bob…").click()
    expect(card.locator(".takeover .warn")).to_contain_text("bob holds this card")
    shoot(page, artifacts, "humans-take-over-confirm")
    card.get_by_role("button", name="Yes, take over from bob").click()
    expect(card.locator(".owner-state")).to_contain_text("You acknowledged this card")
    pump()
    assert mailoutbox[-1].to == ["bob@example.test"] and "alice took over your card" in mailoutbox[-1].subject


def test_handing_a_held_card_to_yourself_asks_the_take_over_question_then_the_card_can_be_decided(
    open_page, make_user, budget_card, notify, mailoutbox, pump, artifacts
) -> None:
    """Issue 24 items 7 and 0: picking yourself in the hand-over form of a card someone else holds
    asks the take-over's question, naming them, and they are told; the card taken over is then
    decided while its policy runs (once a 500)."""
    alice = make_user("alice")
    alice.email = "alice@example.test"
    alice.save()
    bob = make_user("bob")
    esc = budget_card()
    pump()
    mailoutbox.clear()

    alices = open_page(alice)
    open_inline(alices, esc).get_by_role("button", name="Acknowledge — I'm on it").click()
    expect(alices.locator(f"#card-{esc.pk} .owner-state")).to_contain_text("You acknowledged this card")

    page = open_page(bob)
    card = open_inline(page, esc)
    card.get_by_text("Hand to another responder…").click()
    card.locator("select[name=to]").select_option("bob")
    card.get_by_role("button", name="Hand over").click()
    expect(card.locator(".flash-error")).to_contain_text("alice holds this card. Confirm that you take it over")
    expect(card.locator(".takeover .warn")).to_contain_text("alice holds this card")
    expect(card.locator(".owner-state")).to_contain_text("alice acknowledged this card")
    assert Escalation.objects.get(pk=esc.pk).assignee == alice
    shoot(page, artifacts, "humans-hand-to-self-asks")
    card.get_by_role("button", name="Yes, take over from alice").click()
    expect(card.locator(".owner-state")).to_contain_text("You acknowledged this card")
    pump()
    [told] = mailoutbox
    assert told.to == ["alice@example.test"] and "bob took over your card" in told.subject

    extend = card.get_by_role("button", name="Extend 15 min / 4 checks")
    extend.click()
    extend.click()
    expect(card.locator(".card-title")).to_have_text("Decided")
    pump()
    assert PolicyRun.objects.get(pk=esc.pk).status == PolicyRun.Status.ENDED


def test_a_note_appears_on_the_card_in_the_exports_and_in_the_report(
    open_page, make_user, budget_card, artifacts, live_server, settings, tmp_path
) -> None:
    from operations.audit import checkpoints

    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "key.pem")
    checkpoints.generate_key_file(tmp_path / "key.pem")
    alice = make_user("alice")
    vera = make_user("vera", role="viewer")
    esc = budget_card()
    note = "On the phone with the vendor <b>ETA</b> 20 min"

    page = open_page(alice)
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    card = page.locator(f"#card-{esc.pk}")
    card.locator("textarea[name=note]").fill(note)
    card.get_by_role("button", name="Add note").click()
    expect(card.locator(".note-text")).to_have_text(note)
    expect(card.locator(".note-meta")).to_contain_text("alice")
    shoot(page, artifacts, "humans-note-on-card")

    with page.expect_download() as download:
        page.get_by_role("link", name="Card activity (CSV)").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert [(r["user"], r["kind"], r["text"]) for r in rows] == [("alice", "note", note)]
    with page.expect_download() as download:
        page.get_by_role("link", name="Audit log (JSONL)").click()
    assert '"type":"human.note"' in download.value.path().read_text()

    page.get_by_role("link", name="Printable report").click()
    expect(page.locator("body")).to_contain_text(f"noted: “{note}”")
    shoot(page, artifacts, "humans-note-in-report")

    # A viewer reads the note and has no form to write one.
    viewer = open_page(vera)
    viewer.goto(f"{live_server.url}/operations/{esc.operation_id}/")
    expect(viewer.locator(f"#card-{esc.pk} .note-text")).to_have_text(note)
    expect(viewer.locator("textarea[name=note]")).to_have_count(0)


def test_a_bulk_decision_over_a_group_applies_where_offered_and_lists_the_member_that_does_not(
    open_page, make_user, budget_card, make_profile, notify, pump, artifacts, live_server, settings
) -> None:
    settings.CARD_GROUP_WINDOW_S = 600
    alice = make_user("alice")
    main = make_profile(slug="acme-export", account="acme-export")
    # A second integration on the same provider account: its profile offers only the 60-minute extension.
    other = make_profile(slug="acme-archive", account="acme-export", extension_options=[{"minutes": 60, "checks": 8}])
    cards = [budget_card(purpose=f"Customer export {n}", provider=main) for n in range(5)]
    cards.append(budget_card(purpose="Archive export", provider=other))
    assert len({c.group_id for c in cards}) == 1
    # One notification for the outage, not six.
    assert pump() == ["sent"]

    page = open_page(alice)
    group_row = page.locator(f"#group-{cards[0].group_id}")
    expect(group_row).to_contain_text("6 operations: Request budget spent on acme-export")
    expect(page.locator("article.row")).to_have_count(0)
    shoot(page, artifacts, "humans-inbox-group-row")
    group_row.get_by_role("link", name="Review the group →").click()
    expect(page.locator("h1")).to_have_text("6 operations: Request budget spent on acme-export")
    page.get_by_label(re.compile("Extend 15 min / 4 checks")).check()
    page.locator("textarea[name=comment]").fill("provider status page: incident resolved")
    shoot(page, artifacts, "humans-group-page")
    page.get_by_role("button", name="Review the selected cards…").click()

    confirm = page.locator("#bulk-confirm")
    expect(confirm).to_contain_text("5 operations × 4 checks = 20 requests")
    expect(confirm).to_contain_text("1 selected card does not offer it")
    expect(confirm).to_contain_text("Archive export")
    assert not Decision.objects.exists()
    shoot(page, artifacts, "humans-bulk-confirm")
    confirm.get_by_role("button", name="Yes: Extend 15 min / 4 checks · 5 operations").click()

    result = page.locator("#bulk-result")
    expect(result).to_contain_text("Applied “Extend 15 min / 4 checks” to 5 of 6 cards")
    expect(result).to_contain_text(f"Archive export {cards[5].operation_id}: option not offered on this card")
    shoot(page, artifacts, "humans-bulk-result")
    applied = Decision.objects.filter(outcome="applied")
    assert applied.count() == 5 and {d.comment for d in applied} == {"provider status page: incident resolved"}
    assert Escalation.objects.get(pk=cards[5].pk).state == "open"
    expect(page.locator(f"#member-{cards[5].pk}")).to_be_visible()

    phone = open_page(alice, viewport=PHONE)
    phone.goto(f"{live_server.url}/groups/{cards[0].group_id}/")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shoot(phone, artifacts, "humans-group-page-phone")


def test_a_half_approved_acceptance_carries_a_badge_a_filter_finds_it_and_the_others_are_told(
    open_page, make_user, make_operation, budget_card, notify, mailoutbox, pump, artifacts
) -> None:
    from operations.models import Operation
    from operations.polls.controller import poll_once

    alice = make_user("alice")
    bob = make_user("bob")
    bob.email = "bob@example.test"
    bob.save()
    op = make_operation("succeeded_no_result__id=badge", purpose="Audio summary of the weekly all-hands")
    current = Operation.objects.get(pk=op.pk)
    poll_once(operation_id=current.pk, fence=current.fence)
    waiting = Escalation.objects.get(operation=op, state="open")
    budget_card(purpose="Another card, not waiting for anyone")
    pump()
    mailoutbox.clear()

    page = open_page(alice)
    card = open_inline(page, waiting)
    card.locator(".opt-explicit summary").filter(has_text="Accept").click()
    card.locator(".opt-explicit[open] textarea[name=comment]").fill("the file is in the bucket, checked by hand")
    card.locator(".opt-explicit[open]").get_by_role("button", name=re.compile("^Yes")).click()
    expect(card.locator(".flash-ok")).to_contain_text("a second, different responder must confirm")
    # One message to each other responder and to the team's address.
    assert pump() == ["sent", "sent"]
    assert sorted(to for mail in mailoutbox for to in mail.to) == ["bob@example.test", "oncall@example.test"]

    bobs = open_page(bob)
    row = bobs.locator(f"#esc-{waiting.pk}")
    expect(row.locator(".chip-awaiting")).to_have_text("accepted by alice — needs a second responder")
    bobs.get_by_role("link", name=re.compile("Needs a second responder")).click()
    expect(bobs.locator("article.row")).to_have_count(1)
    expect(bobs.locator(f"#esc-{waiting.pk}")).to_be_visible()
    shoot(bobs, artifacts, "humans-awaiting-second-filter")


def test_handing_someone_elses_card_to_a_third_person_is_a_confirmed_take_over(
    open_page, make_user, budget_card, notify, mailoutbox, pump
) -> None:
    """Review F6: Carol hands Alice's card to Bob only by ticking that she takes it over from Alice,
    who is told as a take-over tells her."""
    alice = make_user("alice")
    alice.email = "alice@example.test"
    alice.save()
    make_user("bob")
    carol = make_user("carol")
    esc = budget_card()
    pump()
    alices = open_page(alice)
    open_inline(alices, esc).get_by_role("button", name="Acknowledge — I'm on it").click()
    expect(alices.locator(f"#card-{esc.pk} .owner-state")).to_contain_text("You acknowledged this card")
    pump()
    mailoutbox.clear()

    page = open_page(carol)
    card = open_inline(page, esc)
    card.get_by_text("Hand to another responder…").click()
    card.locator("select[name=to]").select_option("bob")
    card.get_by_role("button", name="Hand over").click()
    expect(card.locator(".flash-error")).to_contain_text("alice holds this card")
    assert Escalation.objects.get(pk=esc.pk).assignee == alice

    card.get_by_text("Hand to another responder…").click()
    card.locator("select[name=to]").select_option("bob")
    card.get_by_label(re.compile("handing it on takes it over")).check()
    card.get_by_role("button", name="Hand over").click()
    expect(card.locator(".owner-state")).to_contain_text("carol handed this card to bob")
    pump()
    told = [mail for mail in mailoutbox if mail.to == ["alice@example.test"]]
    assert len(told) == 1 and "carol took over your card" in told[0].subject
