"""Helpers shared by the browser tests."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# A phone as Chromium emulates one: touch, the mobile viewport rules, three device pixels per CSS pixel.
PHONE_TOUCH: dict[str, object] = {"viewport": PHONE, "has_touch": True, "is_mobile": True, "device_scale_factor": 3}
# The smallest tap target, in CSS pixels (WCAG 2.5.5, Apple's and Android's guidelines).
TAP_MIN = 44

# Every visible control on the page whose hit area is smaller than TAP_MIN × TAP_MIN: its box, or failing
# that, the square of that size around its centre, every probed point of which must land on the control
# (or a label of it) — a finger aimed at its middle must not hit a neighbour or nothing.
_SMALL_TARGETS = """(min) => {
  const selector = 'a[href], button, summary, input:not([type=hidden]), select, textarea, [role=button]';
  const half = min / 2;
  const owns = (el, hit) => !!hit && (el === hit || el.contains(hit)
    || Array.from(el.labels || []).some((label) => label.contains(hit)));
  const small = [];
  for (const el of document.querySelectorAll(selector)) {
    let box = el.getBoundingClientRect();
    // Not shown: no box, hidden, or inside a closed <details> (laid out, never painted).
    if (!box.width || !box.height || !el.checkVisibility({ visibilityProperty: true })) continue;
    if (box.right + scrollX <= 0) continue;  // parked off-screen until focused (the skip link)
    if (box.width >= min && box.height >= min) continue;
    el.scrollIntoView({ block: 'center', inline: 'nearest' });
    box = el.getBoundingClientRect();
    const cx = box.left + box.width / 2, cy = box.top + box.height / 2;
    // The screen's edge is part of a target beside it: a finger cannot land beyond it.
    const clampX = (x) => Math.min(Math.max(x, 0), innerWidth - 1);
    const points = [[-1, -1], [0, -1], [1, -1], [-1, 0], [1, 0], [-1, 1], [0, 1], [1, 1], [0, 0]];
    const at = ([dx, dy]) => document.elementFromPoint(clampX(cx + dx * (half - 1)), cy + dy * (half - 1));
    const missed = points.filter((point) => !owns(el, at(point)));
    if (!missed.length) continue;
    const text = (el.innerText || el.value || el.getAttribute('aria-label') || '').trim().replace(/\\s+/g, ' ');
    const size = `${Math.round(box.width)}×${Math.round(box.height)}`;
    small.push(`${el.tagName.toLowerCase()}.${el.className || '-'} "${text.slice(0, 40)}" ${size}`);
  }
  return small;
}"""


def shoot(page: object, artifacts: Path, name: str) -> Path:
    """A full-page screenshot under test-artifacts/ (look at them: they are the visual check)."""
    path = artifacts / f"{name}.png"
    # caret="initial": hiding the caret writes a style attribute on every input, which htmx then
    # copies onto the swapped-in element and the CSP (no inline styles) rightly refuses.
    page.screenshot(path=str(path), full_page=True, caret="initial")
    return path


def fits_a_phone(page: object, artifacts: Path, name: str) -> None:
    """The page as it is now, on a phone: a screenshot, no sideways scrolling, and no control too small
    to tap (the screenshot is taken first, so a failure has one to look at)."""
    shoot(page, artifacts, name)
    scroll_width, width = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert scroll_width <= width, f"{name}: the page is {scroll_width} px wide on a {width} px screen"
    small = page.evaluate(_SMALL_TARGETS, TAP_MIN)
    assert not small, f"{name}: controls smaller than {TAP_MIN}×{TAP_MIN} px to tap: {small}"


def session_of(page: object) -> object:
    from django.contrib.sessions.backends.db import SessionStore

    cookie = next(c for c in page.context.cookies() if c["name"] == "sessionid")
    return SessionStore(session_key=cookie["value"])


def age_sign_in(page: object, *, minutes: int) -> None:
    """As if the person had signed in `minutes` ago (the session is otherwise untouched)."""
    from django.utils import timezone

    from accounts import signins
    from operations.cards.signin import SignIn

    session = session_of(page)
    now = signins.current(session)
    assert now is not None
    aged = SignIn(
        method=now.method, at=timezone.now() - timedelta(minutes=minutes), issuer=now.issuer, subject=now.subject
    )
    session[signins.SIGN_IN] = aged.as_record()
    session.save()
