"""An extension decided in a real Chromium lasts its window: counted at the fake provider's own log.

The page is driven in Chromium against the live server; then the test plays the dispatcher (one poll
whenever one is due) over the first minute after the decision, on the injected clock.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from operations.models import Decision, Escalation, Operation
from operations.polls import dispatch
from operations.polls.controller import poll_once
from operations.vocabulary import POLLABLE_STATUSES, Reason
from tests.browser.pages import shoot
from tests.support import job_id

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def provider_times(fake_provider, op: Operation) -> list[datetime]:
    return [
        datetime.fromtimestamp(r["at"], tz=timezone.get_current_timezone())
        for r in fake_provider.requests(job_id=op.provider_job_id)
        if r["kind"] == "status"
    ]


def play_the_dispatcher(op: Operation, *, until: datetime, traveller) -> None:
    """Poll once at each due time up to `until`, moving the injected clock to it (never catching up)."""
    for _ in range(20):
        current = Operation.objects.get(pk=op.pk)
        if current.status not in POLLABLE_STATUSES or current.next_poll_at is None or current.next_poll_at > until:
            return
        if current.next_poll_at > timezone.now():
            traveller.move_to(current.next_poll_at, tick=False)
        poll_once(operation_id=current.pk, fence=current.fence)


def test_extend_5_min_3_checks_sends_one_request_promptly_and_lasts_the_five_minutes(
    open_page, make_user, make_profile, make_operation, fake_provider, live_server, artifacts, settings, time_machine
):
    settings.OPERATION_MIN_DEADLINE_S = 1
    profile = make_profile(extension_options=[{"minutes": 5, "checks": 3}])
    alice = make_user("alice")
    page = open_page(alice)

    # A job that never finishes, one poll, then its (short) deadline passes: the dispatcher's sweep
    # opens the card without a request.
    op = make_operation(
        job_id("never_finishes"), provider=profile, deadline_at=timezone.now() + timedelta(seconds=2), purpose="Render"
    )
    poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence)
    time_machine.move_to(timezone.now() + timedelta(seconds=3), tick=True)
    assert dispatch.sweep_deadlines() == 1
    esc = Escalation.objects.get(operation=op, state="open")
    assert esc.reason == Reason.DEADLINE_EXCEEDED
    before = len(provider_times(fake_provider, op))

    row = page.locator(f"#esc-{esc.pk}")
    expect(row).to_be_visible()
    row.get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    extend = card.get_by_role("button", name="Extend 5 min / 3 checks")
    # The option says how the checks are spent, before anyone clicks.
    expect(extend).to_contain_text(re.compile(r"\+3 requests: 3 checks, about every 2 min, until \d\d:\d\d UTC"))
    extend.click()
    extend.click()
    expect(card.locator(".flash-ok")).to_contain_text("Extend 5 min / 3 checks")
    decided = Decision.objects.get(escalation=esc).decided_at

    # The dispatcher's first pass after the decision: one check at once.
    current = Operation.objects.get(pk=op.pk)
    assert current.next_poll_at == decided and current.check_spacing_s == pytest.approx(100, abs=1)
    poll_once(operation_id=op.pk, fence=current.fence)
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.locator(".chart-svg .mark.planned")).to_have_count(2)
    expect(page.locator(".legend")).to_contain_text("planned check in the extension's window (2)")
    shoot(page, artifacts, "operation-extension-window")

    play_the_dispatcher(op, until=decided + timedelta(minutes=1), traveller=time_machine)

    after = provider_times(fake_provider, op)[before:]
    in_first_minute = [moment for moment in after if moment < decided + timedelta(minutes=1)]
    assert after and after[0] - decided < timedelta(seconds=5)  # promptly
    assert len(in_first_minute) == 1, in_first_minute
    # The next check is paced in its own slot (100-200 s), not the old backoff's first step.
    current = Operation.objects.get(pk=op.pk)
    assert timedelta(seconds=150) <= current.next_poll_at - decided <= timedelta(seconds=200)
    assert current.status == "running" and current.delay_source == "manual_extension"

    # The rest of the window: the third check in its final fifth, and the card back at it, not before.
    play_the_dispatcher(op, until=decided + timedelta(minutes=5), traveller=time_machine)
    after = provider_times(fake_provider, op)[before:]
    assert len(after) == 3
    deadline = Operation.objects.get(pk=op.pk).deadline_at
    assert deadline - timedelta(minutes=1) <= after[-1] < deadline
    again = Escalation.objects.get(operation=op, state="open")
    assert again.opened_at == after[-1] and again.reason == Reason.REQUEST_BUDGET_EXHAUSTED


def test_a_business_deadline_card_offers_keep_waiting_and_the_chart_marks_where_polling_stopped(
    open_page, make_user, make_profile, make_operation, fake_provider, live_server, artifacts, time_machine
):
    profile = make_profile()
    alice = make_user("alice")
    page = open_page(alice)
    business = timezone.now() + timedelta(seconds=2)
    op = make_operation(
        job_id("never_finishes"),
        provider=profile,
        business_deadline_at=business,
        purpose="Deployment validation for the 15:00 release window",
    )
    poll_once(operation_id=op.pk, fence=Operation.objects.get(pk=op.pk).fence)
    time_machine.move_to(business + timedelta(seconds=1), tick=True)
    assert dispatch.sweep_deadlines() == 1
    esc = Escalation.objects.get(operation=op, state="open")

    row = page.locator(f"#esc-{esc.pk}")
    expect(row.locator(".chip-reason")).to_have_text("Business deadline passed")
    row.get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card).to_contain_text("passed before the job finished; no request was sent after it")
    keep = card.get_by_role("button", name="Keep waiting until the technical deadline")
    expect(keep).to_contain_text("no new requests or time: polling resumes now within the operation's own bounds")
    expect(card.get_by_role("button", name="Extend 15 min / 4 checks")).to_be_visible()
    shoot(page, artifacts, "card-business-deadline")
    keep.click()
    keep.click()
    expect(card.locator(".flash-ok")).to_contain_text("Keep waiting until the technical deadline")
    decision = Decision.objects.get(escalation=esc)
    assert (decision.option, decision.outcome, decision.user) == ("keep_waiting", "applied", alice)
    assert Operation.objects.get(pk=op.pk).status == "running"

    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.locator(".chart-svg .vline-label-business")).to_contain_text("polling stopped")
    expect(page.locator(".story")).to_contain_text("alice chose to keep waiting past the business deadline")
    shoot(page, artifacts, "operation-business-deadline")
