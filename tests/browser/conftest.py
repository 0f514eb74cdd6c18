"""Browser tests: Playwright (sync API) driving Debian's Chromium against pytest-django's live server.

One browser per module (starting Chromium is the slow part); a fresh context per test. The
test process talks to the database directly (Django's ORM) while Playwright's sync API runs an
event loop in the same thread, so Django's async-safety check is switched off for these tests
only. Screenshots go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser.pages import ARTIFACTS, DESKTOP
from tests.support import job_id

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    # Conditions are awaited, never slept on; generous deadlines keep a loaded 2-core CI box green.
    expect.set_options(timeout=15_000)

    # While Playwright's loop runs in this thread, every ORM call here (the test's own and the
    # database flush between tests) would be refused as "async": allow them for this module only.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def _fast_live_refresh(settings: object) -> None:
    # Live refresh every second, so "appears without reloading" is quick to observe.
    settings.DASHBOARD_REFRESH_S = 1
    # One inbox row per card: most pages under test show a few cards of one profile, which would
    # otherwise form a group; the tests of groups turn grouping on (CARD_GROUP_WINDOW_S).
    settings.CARD_GROUP_WINDOW_S = 0
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def watched_page(
    browser: object, *, viewport: dict[str, int], errors: list[str], **options: object
) -> tuple[object, object]:
    """A new context and page that append every JavaScript error and CSP violation to `errors`;
    `options` go to the browser context (a time zone, a colour scheme)."""
    context = browser.new_context(viewport=viewport, **options)
    page = context.new_page()
    page.set_default_timeout(20_000)
    _trace_requests(page)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.expose_binding("__pdCspViolation", lambda source, text: errors.append(f"CSP violation: {text}"))
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => window.__pdCspViolation("
        "`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));"
    )
    return context, page


def _trace_requests(page: object) -> None:
    """Keep the page's last requests, to print beside a failure: a live refresh that never came
    (skipped, stuck in flight, answered 204) looks the same in a screenshot."""
    trace: deque[str] = deque(maxlen=80)
    started = time.monotonic()

    def add(kind: str, request: object, status: object = "") -> None:
        url = urlsplit(request.url)
        path = url.path + (f"?{url.query[:60]}" if url.query else "")
        trace.append(f"{time.monotonic() - started:7.2f}s {kind:<8} {request.method} {path} {status}")

    page.on("request", lambda request: add("request", request))
    page.on("requestfinished", lambda request: add("finished", request, _status(request)))
    page.on("requestfailed", lambda request: add("failed", request, request.failure))
    page._pd_trace = trace


def _status(request: object) -> object:
    response = request.response()
    return response.status if response else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    opened = getattr(item, "funcargs", {}).get("open_page")
    if report.when != "call" or not report.failed or opened is None:
        return
    for number, page in enumerate(getattr(opened, "pages", []), start=1):
        lines = "\n".join(getattr(page, "_pd_trace", []))
        report.sections.append((f"page {number}: its last requests", lines or "(none)"))


@pytest.fixture
def blank_page(browser: object) -> Iterator[object]:
    """A page signed in as nobody (for sign-in tests); fails the test on a JavaScript error or a CSP
    violation on our pages (the test provider's own pages send no policy)."""
    errors: list[str] = []
    context, page = watched_page(browser, viewport=DESKTOP, errors=errors)
    yield page
    context.close()
    assert not errors, f"JavaScript errors or CSP violations in the page: {errors}"


@pytest.fixture
def open_page(browser: object, live_server: object) -> Iterator[Callable[..., object]]:
    """A logged-in page: open_page(user, viewport=DESKTOP, **context options) -> Page. Records page errors.

    Context options are Playwright's (color_scheme="dark", timezone_id="America/Los_Angeles", ...)."""
    contexts = []
    errors: list[str] = []

    def make(user: object, *, viewport: dict[str, int] = DESKTOP, **options: object) -> object:
        context, page = watched_page(browser, viewport=viewport, errors=errors, **options)
        contexts.append(context)
        make.pages.append(page)
        page.goto(f"{live_server.url}/")
        page.fill("#id_username", user.get_username())
        page.fill("#id_password", "pw-" + user.get_username())
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return page

    make.pages = []  # read by pytest_runtest_makereport on a failure
    yield make
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors or CSP violations in the page: {errors}"


@pytest.fixture
def make_user(transactional_db: None) -> Callable[..., object]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    def make(username: str, role: str = "responder") -> object:
        user = get_user_model().objects.create_user(username=username, password="pw-" + username)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        return user

    return make


@pytest.fixture
def budget_card(make_operation: Callable[..., object]) -> Callable[..., object]:
    """A real card: one status request to the fake provider, then the budget stops it (no request).

    `scenario` picks the fake provider's behaviour (cancel_unsupported: a cancel answered 405)."""
    from operations.models import Escalation, Operation
    from operations.polls.controller import poll_once

    def make(
        purpose: str = "Quarterly export for the finance team", *, scenario: str = "never_finishes", **kwargs: object
    ) -> Escalation:
        op = make_operation(job_id(scenario), max_status_requests=1, purpose=purpose, **kwargs)
        for _ in range(2):
            current = Operation.objects.get(pk=op.pk)
            poll_once(operation_id=current.pk, fence=current.fence)
        return Escalation.objects.select_related("operation").get(operation=op, state="open")

    return make
