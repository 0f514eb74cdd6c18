"""Single sign-on in a real Chromium against a real OpenID Provider on loopback (tests/oidc_provider/:
django-oauth-toolkit, so discovery, JWKS, the code flow with PKCE and the ID-token signatures are
real): signing in, roles from the group claim, a sign-in again before a cancel, a forged ID token,
signing out at the provider. The `blank_page` fixture fails each test on a CSP violation.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from accounts import signins
from accounts.models import ExternalIdentity
from operations.cards.signin import SignIn
from operations.decisions.check import SIGN_IN_AGAIN
from operations.lifecycle.cards import new_card_version
from operations.models import AuditEntry, Decision, Escalation, Operation
from tests.browser.pages import age_sign_in, session_of, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CANCEL = "Cancel the job at the provider"


def op_login(page: object, username: str) -> None:
    """Fill the test provider's own sign-in form."""
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.fill("#id_username", username)
    page.fill("#id_password", f"pw-{username}")
    page.get_by_role("button", name="Sign in").click()


def sso_sign_in(page: object, base_url: str, username: str, *, start: str = "/") -> None:
    page.goto(f"{base_url}{start}")
    page.get_by_test_id("sso").click()
    op_login(page, username)
    # Back on pollerdash (a redirect is never committed, so this is the page the chain ends on:
    # the start page, or the callback's refusal), fully loaded: a test that reads the session or
    # reloads right away would otherwise race the redirect chain still in flight.
    page.wait_for_url(lambda url: url.startswith(base_url), wait_until="load")


def entries(entry_type: str) -> list[dict]:
    return [
        json.loads(bytes(body)) for body in AuditEntry.objects.filter(type=entry_type).values_list("body", flat=True)
    ]


def test_signing_in_creates_the_person_with_the_role_of_their_group(blank_page, oidc, live_server, artifacts):
    page = blank_page
    oidc.put_user("alice", groups=["oncall", "unrelated"])
    page.goto(f"{live_server.url}/")
    expect(page.get_by_test_id("sso")).to_have_text("Sign in with single sign-on")
    shoot(page, artifacts, "login-sso")
    page.get_by_test_id("sso").click()
    op_login(page, "alice")

    expect(page.locator(".topbar .user")).to_have_text("alice")
    expect(page).to_have_title("Inbox · pollerdash")
    user = get_user_model().objects.get(username="alice")
    assert set(user.groups.values_list("name", flat=True)) == {"responder", "viewer"}
    assert user.email == "alice@example.test" and not user.has_usable_password()
    assert ExternalIdentity.objects.get(user=user).subject == "testop-alice"
    [created] = entries("user.created")
    assert created["actor"] == {"kind": "oidc", "id": oidc.issuer}
    assert created["data"]["username"] == "alice" and created["data"]["groups"] == ["responder", "viewer"]
    sign_in = signins.current(session_of(page))
    assert (sign_in.method, sign_in.issuer, sign_in.subject) == ("oidc", oidc.issuer, "testop-alice")


def test_a_person_without_a_mapped_group_sees_nothing(blank_page, oidc, live_server, budget_card):
    page = blank_page
    budget_card(purpose="Quarterly export for the finance team")
    oidc.put_user("carol", groups=["marketing"])
    sso_sign_in(page, live_server.url, "carol")

    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Your account has no dashboard role yet")
    expect(page.get_by_text("Quarterly export")).to_have_count(0)
    page.goto(f"{live_server.url}/operations/")
    expect(page.get_by_text("Quarterly export")).to_have_count(0)
    assert not get_user_model().objects.get(username="carol").groups.exists()


def test_a_cancel_asks_for_a_fresh_sign_in_and_comes_back_to_the_same_card(
    blank_page, oidc, live_server, budget_card, artifacts
):
    page = blank_page
    esc = budget_card()
    oidc.put_user("dave", groups=["oncall"])
    sso_sign_in(page, live_server.url, "dave", start=f"/operations/{esc.operation_id}/")
    card = page.locator(f"#card-{esc.pk}")
    card.get_by_text(f"{CANCEL}…").click()
    confirm = card.get_by_role("button", name=f"Yes, {CANCEL.lower()}")
    expect(confirm).to_be_visible()  # signed in a moment ago: the cancel is offered

    age_sign_in(page, minutes=16)
    confirm.click()
    flash = card.locator(".flash-error")
    expect(flash).to_contain_text("needs a sign-in within the last 15 minutes")
    shoot(page, artifacts, "card-sign-in-again")
    refused = Decision.objects.get(escalation=esc)
    assert (refused.outcome, refused.refusal_reason) == ("refused", SIGN_IN_AGAIN)
    assert Operation.objects.get(pk=esc.operation_id).status == "needs_attention"  # nothing was sent

    card.get_by_test_id("reauth").click()
    # prompt=login: the provider asks again although its own session is still valid.
    op_login(page, "dave")
    page.wait_for_url(f"{live_server.url}/operations/{esc.operation_id}/?card={esc.pk}&v={esc.version}#card-{esc.pk}")
    expect(card.locator(".flash-ok")).to_contain_text("the card is as you left it")
    card.get_by_text(f"{CANCEL}…").click()
    card.get_by_role("button", name=f"Yes, {CANCEL.lower()}").click()
    expect(card.locator(".callout")).to_contain_text("Cancel at the provider")

    applied = Decision.objects.get(escalation=esc, outcome="applied")
    assert applied.option == "cancel_at_provider"
    recorded = SignIn.from_record(applied.authentication)
    assert (recorded.method, recorded.issuer, recorded.subject) == ("oidc", oidc.issuer, "testop-dave")
    assert timezone.now() - recorded.at < timedelta(minutes=1)
    [entry] = [e for e in entries("human.decision") if e["data"]["decision_id"] == applied.pk]
    assert entry["data"]["authentication"] == applied.authentication
    page.goto(f"{live_server.url}/operations/{esc.operation_id}/report/")
    expect(page.locator("body")).to_contain_text(f"Signed in: single sign-on {oidc.issuer} as testop-dave")


def test_a_card_that_changed_during_the_fresh_sign_in_is_reviewed_again(blank_page, oidc, live_server, budget_card):
    page = blank_page
    esc = budget_card()
    oidc.put_user("erin", groups=["oncall"])
    sso_sign_in(page, live_server.url, "erin", start=f"/operations/{esc.operation_id}/")
    age_sign_in(page, minutes=30)
    page.reload()
    card = page.locator(f"#card-{esc.pk}")
    card.get_by_text(f"{CANCEL}…").click()
    # Rendered with an old sign-in: the panel offers the sign-in in place of the button.
    expect(card.get_by_role("button", name=f"Yes, {CANCEL.lower()}")).to_have_count(0)
    card.get_by_test_id("reauth-needed").get_by_role("link", name="Sign in again").click()
    new_card_version(escalation=Escalation.objects.get(pk=esc.pk))  # someone else acted meanwhile

    op_login(page, "erin")
    expect(card.locator(".flash-warn")).to_contain_text("the card changed: state changed — review again")
    assert not Decision.objects.filter(escalation=esc).exists()


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [("aud", "Audience doesn't match"), ("signature", "Signature verification failed")],
)
def test_a_forged_or_misdirected_id_token_is_refused(blank_page, oidc, live_server, tamper, reason):
    page = blank_page
    oidc.put_user(f"mallory-{tamper}", groups=["oncall"], tamper=tamper)
    sso_sign_in(page, live_server.url, f"mallory-{tamper}")

    expect(page.get_by_test_id("reason")).to_contain_text(reason)
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/")
    assert not get_user_model().objects.filter(username=f"mallory-{tamper}").exists()


def test_signing_out_ends_the_session_at_the_provider_too(blank_page, oidc, live_server):
    page = blank_page
    oidc.put_user("grace", groups=["watchers"])
    sso_sign_in(page, live_server.url, "grace")
    expect(page.locator(".topbar .user")).to_have_text("grace")

    # Hold the answer to the sign-out (the session here is already over; it sends the browser on
    # to the provider) while the inbox's live refreshes would fire (every second here): one
    # answered now ("401, go to the login page") would cut the way to the provider short.
    held: list[tuple[object, object]] = []
    page.route(f"{live_server.url}/accounts/logout/", lambda route: held.append((route, route.fetch(max_redirects=0))))
    # A click that does not wait for the (held) navigation to commit.
    page.get_by_role("button", name="Log out").evaluate("button => button.click()")
    with pytest.raises(PlaywrightTimeoutError):
        page.wait_for_event("request", predicate=lambda r: r.headers.get("hx-request") == "true", timeout=3000)
    [(route, answer)] = held
    assert answer.status == 302 and answer.headers["location"].startswith(oidc.discovery["end_session_endpoint"])
    route.fulfill(response=answer)
    page.wait_for_url(f"{live_server.url}/accounts/login/")
    # The provider forgot her too: signing in again shows its form instead of coming straight back.
    page.get_by_test_id("sso").click()
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
