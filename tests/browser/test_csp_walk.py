"""Every dashboard page in Chromium under the Content-Security-Policy: no violation anywhere.

The `open_page` fixture fails a test on any CSP violation Chromium reports (console message or
securitypolicyviolation event); this walk visits the pages the other browser tests do not.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_walking_every_page_as_an_admin_raises_no_csp_violation(open_page, make_user, budget_card, live_server):
    from operations.models import AuditEntry

    card = budget_card()
    admin = make_user("root", "responder")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    page = open_page(admin)
    op_id = card.operation.pk
    for path in [
        "/",
        "/operations/",
        f"/operations/{op_id}/",
        f"/operations/{op_id}/report/",
        "/history/",
        "/history/report/",
        "/system/",
        "/accounts/login/?fresh=1",  # "Confirm it's you" before a decision that cannot be undone
        "/admin/",
        "/admin/operations/operation/",
        f"/admin/operations/operation/{op_id}/change/",
        "/admin/operations/auditentry/",
        "/admin/auth/user/",
        f"/admin/operations/auditentry/{AuditEntry.objects.first().pk}/change/",
        f"/admin/auth/user/{admin.pk}/change/",
    ]:
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
    page.goto(f"{live_server.url}/")
    expect(page.locator("#inbox-rows .gauge.pct-100")).to_have_count(1)  # the budget is used up
    # Live refreshes (every second in tests) are still sent, without eval, and swap without a violation.
    for _ in range(2):
        with page.expect_response(lambda r: r.request.headers.get("hx-request") == "true"):
            pass
