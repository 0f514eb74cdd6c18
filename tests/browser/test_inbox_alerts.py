"""Alerts in the inbox tab (static/js/notify.js) in real Chromium on the real inbox: no permission prompt
on load, one on the click, a desktop notification and a title marker for a card that arrives while
the tab is away (the hidden tab keeps checking, slowly), nothing twice, sound only after a click;
the card lists who was told. The browser's own Notification and AudioContext are recorded (the
browser's UI is a boundary we do not own); visibility and focus are set by the test."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.browser.pages import DESKTOP, PHONE, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RECORDERS = """
window.__shown = []; window.__asked = 0; window.__audio = 0;
window.__visible = sessionStorage.getItem("__visible") || "visible"; window.__focus = window.__visible === "visible";
Object.defineProperty(document, "visibilityState", {get: function () { return window.__visible; }});
document.hasFocus = function () { return window.__focus; };
function FakeNotification(title, options) {
  window.__shown.push({title: title, body: options.body, tag: options.tag});
  this.close = function () {};
}
// The browser remembers a permission across reloads; so does the recorder.
FakeNotification.permission = sessionStorage.getItem("__permission") || "default";
FakeNotification.requestPermission = function () {
  window.__asked += 1;
  FakeNotification.permission = "granted";
  sessionStorage.setItem("__permission", "granted");
  return Promise.resolve("granted");
};
window.Notification = FakeNotification;
function FakeAudio() {
  window.__audio += 1; this.state = "running"; this.currentTime = 0; this.destination = {};
  var param = {setValueAtTime: function () {}, exponentialRampToValueAtTime: function () {}};
  var node = function () {
    return {type: "", frequency: param, gain: param, connect: function (n) { return n; },
            start: function () {}, stop: function () {}};
  };
  this.createOscillator = node; this.createGain = node; this.resume = function () {};
}
window.AudioContext = FakeAudio;
"""


def wait_for(page: object, script: str, *, timeout_s: float = 20.0) -> object:
    """Evaluate `script` until it is truthy (wait_for_function would need eval, which the CSP refuses)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = page.evaluate(script)
        if value:
            return value
        page.wait_for_timeout(100)
    raise AssertionError(f"timed out waiting for {script}")


def away(page: object, hidden: bool) -> None:
    page.evaluate(
        """hidden => { window.__visible = hidden ? "hidden" : "visible"; window.__focus = !hidden;
        document.dispatchEvent(new Event("visibilitychange")); }""",
        hidden,
    )


def test_a_card_arriving_while_the_tab_is_away_is_one_desktop_notification_and_a_title_marker(
    open_page, make_user, budget_card, artifacts, settings
) -> None:
    settings.NOTIFY_EMAILS = ["oncall@example.test"]
    first = budget_card(purpose="Nightly ledger export")
    page = open_page(make_user("alice"))
    page.add_init_script(RECORDERS)
    page.reload()
    desktop = page.locator("[data-alerts-desktop]")
    expect(desktop).to_have_text("Desktop notifications: off")
    assert page.evaluate("window.__asked") == 0  # never asked on load

    desktop.click()
    expect(desktop).to_have_attribute("aria-pressed", "true")
    expect(desktop).to_have_text("Desktop notifications: on")
    assert page.evaluate("window.__asked") == 1
    page.locator("[data-alerts-sound]").click()
    assert page.evaluate("window.__audio") == 1  # the audio context exists only after this click

    away(page, True)
    budget_card(purpose="Quarterly export for the finance team")
    wait_for(page, "window.__shown.length === 1")
    [shown] = page.evaluate("window.__shown")
    assert shown["title"] == "Decision needed: Request budget spent"
    assert "Quarterly export for the finance team" in shown["body"] and shown["tag"] == "pollerdash-inbox"
    # The marker is written by the same refresh, just after the notification: wait for it.
    expect(page).to_have_title(re.compile(r"^● \(2\) Inbox"))
    away(page, False)
    expect(page).to_have_title("(2) Inbox · pollerdash")

    # A reload announces nothing again: the cards already seen in this tab are remembered.
    page.reload()
    expect(desktop).to_have_text("Desktop notifications: on")
    assert page.evaluate("window.__asked") == 0 and page.evaluate("window.__shown.length") == 0
    shoot(page, artifacts, "inbox-alerts-desktop")

    phone = open_page(make_user("bob"), viewport=PHONE)
    shoot(phone, artifacts, "inbox-alerts-phone")
    phone.goto(page.url.rstrip("/") + f"/operations/{first.operation_id}/")
    expect(phone.locator(".notified-run")).to_contain_text("Escalation policy settings")
    expect(phone.locator(".notified-list li").first).to_contain_text("email to oncall@example.test")
    shoot(phone, artifacts, "card-notifications-phone")
    wide = open_page(make_user("carol"), viewport={"width": 1440, "height": 900})
    wide.goto(page.url.rstrip("/") + f"/operations/{first.operation_id}/")
    shoot(wide, artifacts, "card-notifications-1440")
    assert DESKTOP["width"] < 1440
