"""What the dashboard says, and how it looks, in a real Chromium: one word for one outcome on every
page, export and report; each viewer's own time zone and light; a chart whose labels never overlap.

Screenshots land in test-artifacts/ (dark-*, la-*, chart-*): look at them.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from operations.models import Authorization, Decision, Operation, StatusCheck
from tests.browser.pages import PHONE, shoot
from tests.support import signed_in_now

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUSED = "sent — provider refused"
LOS_ANGELES = "America/Los_Angeles"


def test_a_provider_refused_cancel_has_one_name_on_every_page_the_csv_and_the_reports(
    open_page, make_user, budget_card, live_server
):
    alice = make_user("alice")
    esc = budget_card(scenario="cancel_unsupported")
    page = open_page(alice)
    op_url = f"{live_server.url}/operations/{esc.operation_id}/"
    page.goto(op_url)
    card = page.locator(f"#card-{esc.pk}")
    card.locator("summary", has_text="Cancel the job at the provider").click()
    card.get_by_role("button", name="Yes, cancel the job at the provider").click()
    # The provider answered 405: the card says so in the vocabulary's words and stays open.
    expect(card.locator(".callout .cancel-outcome")).to_have_text(REFUSED)
    expect(card.locator(".card-title")).to_have_text("Needs a decision")
    decision = Decision.objects.get(escalation=esc)
    assert decision.outcome == "applied" and decision.provider_response["state"] == "not_supported"

    # The operation page: decisions table, facts and the audit story.
    page.goto(op_url)
    row = page.locator("section.panel", has_text="Decisions").locator("tbody tr").first
    expect(row.locator("[data-label=Option]")).to_have_text("Cancel the job at the provider")
    expect(row.locator(".outcome")).to_have_text(REFUSED)
    expect(page.locator(".facts .cancel-outcome")).to_have_text(REFUSED)
    expect(page.locator(".story")).to_contain_text(f"provider answered the cancel: {REFUSED} (HTTP 405)")

    # The history page.
    page.goto(f"{live_server.url}/history/")
    history_row = page.locator("table.history tbody tr").first
    expect(history_row.locator(".option-name")).to_have_text("Cancel the job at the provider")
    expect(history_row.locator(".outcome")).to_have_text(REFUSED)

    # The CSV exports: the ids keep their columns, the words are the same.
    for url in (f"{op_url}decisions.csv", f"{live_server.url}/history/decisions.csv"):
        answer = page.request.get(url)
        assert answer.ok, url
        (only,) = list(csv.DictReader(io.StringIO(answer.text())))
        assert (only["option"], only["outcome"]) == ("cancel_at_provider", "applied")
        assert (only["option_label"], only["outcome_label"]) == ("Cancel the job at the provider", REFUSED)

    # The printable reports.
    page.goto(f"{op_url}report/")
    expect(page.locator("article.decision h3")).to_contain_text(f"Cancel the job at the provider · {REFUSED}")
    expect(page.locator("body")).to_contain_text(f"provider answered the cancel: {REFUSED} (HTTP 405)")
    page.goto(f"{live_server.url}/history/report/")
    expect(page.locator("tbody tr").first).to_contain_text(REFUSED)
    expect(page.locator("body")).not_to_contain_text("sent, not confirmed")
    expect(page.locator("body")).not_to_contain_text("not supported")


def local(moment: object, form: str = "%Y-%m-%d %H:%M:%S") -> str:
    return moment.astimezone(ZoneInfo(LOS_ANGELES)).strftime(form)


def test_a_viewer_in_los_angeles_with_a_dark_system_sees_local_times_in_the_dark(
    open_page, make_user, budget_card, live_server, artifacts
):
    from operations.decisions.services import escalation_decide

    alice, bob = make_user("alice"), make_user("bob")
    esc = budget_card(business_deadline_at=timezone.now() + timedelta(minutes=50))
    op = Operation.objects.get(pk=esc.operation_id)
    # Some history to look at: a provider-refused cancel, then a stale attempt on the same card.
    other = budget_card(purpose="Nightly ledger export", scenario="cancel_unsupported")
    escalation_decide(
        sign_in=signed_in_now(),
        escalation_id=other.pk,
        user=alice,
        option_id="cancel_at_provider",
        card_version=other.version,
    )
    escalation_decide(
        sign_in=signed_in_now(), escalation_id=other.pk, user=bob, option_id="close", card_version=other.version
    )
    page = open_page(alice, color_scheme="dark", timezone_id=LOS_ANGELES)

    # The light follows the system: a dark page, light text.
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert _luminance(background) < 0.1 < 0.6 < _luminance(text), (background, text)
    zone = page.locator("[data-tz-note]")
    expect(zone).to_have_text(re.compile(r"^times in P[SD]T$"))
    assert "America/Los_Angeles" in zone.get_attribute("title")

    page.locator(f"#esc-{esc.pk}").get_by_role("button", name=re.compile("Review")).click()
    card = page.locator(f"#card-{esc.pk}")
    expect(card.locator(".options")).to_be_visible()
    # The option's "new deadline 11:15 UTC" reads in the viewer's zone, with UTC on hover.
    effect = card.locator("[data-option-index='1'] .opt-effect")
    expect(effect).to_contain_text(re.compile(r"until (\w{3} \d+ )?\d\d:\d\d P[SD]T"))
    expect(effect).not_to_contain_text("UTC")
    assert effect.locator("time").first.get_attribute("title").endswith(" UTC")
    shoot(page, artifacts, "dark-la-inbox-card")

    page.goto(f"{live_server.url}/operations/{op.pk}/")
    deadline = page.locator(".facts dt:text-is('Deadline') + dd time")
    expect(deadline).to_have_text(re.compile("^" + re.escape(local(op.deadline_at)) + r" P[SD]T$"))
    assert deadline.get_attribute("title") == op.deadline_at.astimezone(ZoneInfo("UTC")).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )
    first_check = StatusCheck.objects.filter(operation=op).earliest("sent_at")
    sent = page.locator(".story li").first.locator("time[data-local]")
    expect(sent).to_have_text(local(op.created_at, "%H:%M:%S"))
    # A time inside a sentence of the timeline too: "deadline 13:54:55 PST", UTC on hover.
    registered = page.locator(".story li").first.locator(".story-text")
    # Near local midnight the deadline falls on the next day, which the sentence then names.
    expect(registered).to_contain_text(
        re.compile(rf"deadline ({local(op.deadline_at, '%b')} \d+ )?{local(op.deadline_at, '%H:%M:%S')} P[SD]T")
    )
    expect(registered).not_to_contain_text("UTC")
    expect(page.locator(".chart-svg text[data-zone-label]")).to_have_text(re.compile(r"time \(P[SD]T\)"))
    shoot(page, artifacts, "dark-la-operation")
    assert first_check.sent_at >= op.created_at

    # The printable report stays UTC: it is shared across zones.
    page.goto(f"{live_server.url}/operations/{op.pk}/report/")
    expect(page.locator("body")).to_contain_text(op.deadline_at.astimezone(ZoneInfo("UTC")).strftime("%H:%M:%S UTC"))

    # The same views in the light, at phone width, in the same zone.
    phone = open_page(alice, viewport=PHONE, timezone_id=LOS_ANGELES)
    phone.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(phone.locator("[data-tz-note]")).to_have_text(re.compile("P[SD]T"))
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    shoot(phone, artifacts, "la-operation-phone")
    dark_phone = open_page(alice, viewport=PHONE, color_scheme="dark", timezone_id=LOS_ANGELES)
    dark_phone.goto(f"{live_server.url}/history/")
    expect(dark_phone.locator("table.history .outcome")).to_have_text(
        ["refused — state changed", "sent — provider refused"]
    )
    shoot(dark_phone, artifacts, "dark-la-history-phone")
    page.goto(f"{live_server.url}/history/")
    shoot(page, artifacts, "dark-la-history")
    dark_phone.goto(f"{live_server.url}/")
    shoot(dark_phone, artifacts, "dark-la-inbox-phone")


def _luminance(css: str) -> float:
    red, green, blue = (int(v) / 255 for v in re.findall(r"\d+", css)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def crowded_operation(make_operation) -> Operation:
    """An operation whose chart has many labels close together: four extensions ten seconds apart,
    the deadlines they replaced, the business deadline just before the deadline, and now."""
    from tests.support import job_id

    start = timezone.now()
    op = make_operation(
        job_id("never_finishes"),
        purpose="Crowded chart",
        business_deadline_at=start + timedelta(minutes=8, seconds=30),
        deadline_at=start + timedelta(minutes=5),
        max_status_requests=4,
    )
    first = Authorization.objects.get(operation=op, number=1)
    previous = first
    for number in range(2, 6):
        previous = Authorization.objects.create(
            operation=op,
            number=number,
            previous=previous,
            kind="extension",
            granted_by_label="user:alice",
            granted_at=op.created_at + timedelta(seconds=10 * number),
            deadline_at=op.created_at + timedelta(minutes=4 + number),
            max_status_requests=4 * number,
            max_transport_failures=3,
        )
    StatusCheck.objects.bulk_create(
        StatusCheck(
            operation=op,
            account=op.account,
            fence=n,
            started_at=op.created_at + timedelta(seconds=4 * n),
            sent_at=op.created_at + timedelta(seconds=4 * n),
            received_at=op.created_at + timedelta(seconds=4 * n),
            http_status=200,
            provider_state="running",
            decision="wait",
            delay_source="local_backoff",
        )
        for n in range(1, 12)
    )
    Operation.objects.filter(pk=op.pk).update(deadline_at=previous.deadline_at, max_status_requests=20)
    return op


OVERLAPS = """
svg => {
  const boxes = [...svg.querySelectorAll('text')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  }).filter(b => b.right > b.left);
  const svgBox = svg.getBoundingClientRect();
  const outside = boxes.filter(b => b.left < svgBox.left - 0.5 || b.right > svgBox.right + 0.5
    || b.top < svgBox.top - 0.5 || b.bottom > svgBox.bottom + 0.5).map(b => b.text);
  const pairs = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) pairs.push([a.text, b.text]);
  }
  return {count: boxes.length, pairs, outside};
}
"""


@pytest.mark.parametrize("width", [390, 1440])
def test_the_chart_labels_never_overlap(open_page, make_user, make_operation, live_server, artifacts, width):
    op = crowded_operation(make_operation)
    page = open_page(make_user("alice", role="viewer"), viewport={"width": width, "height": 900})
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    svg = page.locator(".chart-svg")
    expect(svg).to_be_visible()
    labels = page.locator(".chart-svg .vline-label")
    expect(labels).to_have_count(4 + 4 + 3)  # grants, replaced deadlines, deadline + business + now
    result = svg.evaluate(OVERLAPS)
    assert result["count"] >= 20
    assert result["pairs"] == [], result["pairs"]
    assert result["outside"] == [], result["outside"]
    svg.scroll_into_view_if_needed()
    page.locator("figure.chart").screenshot(path=str(artifacts / f"chart-crowded-{width}.png"))
