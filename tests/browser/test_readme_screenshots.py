"""The README's screenshots, taken from the demo's own scenarios in Chromium, so they stay current.

The demo's profiles and scenarios are seeded as `make demo` seeds them and played for two minutes
on the injected clock (tests.support.run_like_the_dispatcher); then the inbox, an open card and an
operation page are photographed. `make screenshots` (README_SCREENSHOTS=1) writes them into docs/img/,
which the README shows; a plain test run writes them under test-artifacts/ so it leaves the checkout
as it was (the ids and times in the pictures differ from run to run). The test also checks what
each picture is meant to show, so a broken page fails here rather than in a stale picture.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect

from demo import seed as demo
from operations.models import Escalation, Operation, ProviderProfile
from tests.support import T0, run_like_the_dispatcher

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
IMAGES = (
    ROOT / "docs" / "img" if os.environ.get("README_SCREENSHOTS") == "1" else ROOT / "test-artifacts" / "readme-img"
)
CLIP = {"x": 0, "y": 0, "width": 1280, "height": 1250}


def test_the_readme_tour_inbox_card_and_operation_page(
    open_page, make_user, fake_provider, time_machine, rng, live_server
) -> None:
    time_machine.move_to(T0, tick=False)
    demo.load_demo_profiles(provider_url=fake_provider.base_url)
    ProviderProfile.objects.update(rate_limit_per_s=10_000)  # pacing has its own tests
    demo.seed_scenarios()
    run_like_the_dispatcher(time_machine, rng, until=T0 + timedelta(minutes=2))
    time_machine.move_to(T0 + timedelta(minutes=2, seconds=30), tick=True)
    assert not demo.scenarios_waiting()

    page = open_page(make_user("responder"))
    IMAGES.mkdir(parents=True, exist_ok=True)
    expect(page.locator("#inbox-rows")).to_contain_text("Deployment validation for the 15:00 release window")
    page.screenshot(path=str(IMAGES / "inbox.png"), caret="initial")

    card = Escalation.objects.get(operation__purpose__startswith="Re-index", state="open")
    page.locator(f"#esc-{card.pk}").get_by_role("button", name=re.compile("Review")).click()
    opened = page.locator(f"#card-{card.pk}")
    expect(opened.get_by_role("button", name="Extend 15 min / 4 checks")).to_be_visible()
    opened.screenshot(path=str(IMAGES / "card.png"), caret="initial")

    # A finished one: its facts, the chart of its status requests and its timeline.
    op = Operation.objects.get(purpose__startswith="Nightly revenue export", status="succeeded")
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.locator(".chart-svg")).to_be_visible()
    expect(page.get_by_role("heading", name="Authorization chain")).to_be_visible()
    page.screenshot(path=str(IMAGES / "operation.png"), caret="initial", full_page=True, clip=CLIP)
