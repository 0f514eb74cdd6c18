"""Decisions that cannot be undone need a recent sign-in, and every decision records the sign-in it was
taken under (docs/DESIGN.md section 7): the rule in the decision service, the card that asks to sign
in again, the way back to the same card, and the reports that show it."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import time_machine
from django.urls import reverse
from django.utils import timezone

from accounts import signins
from operations.cards.signin import OIDC, PASSWORD, SignIn
from operations.decisions.check import SIGN_IN_AGAIN, fresh_sign_in_refusal
from operations.decisions.services import escalation_decide
from operations.lifecycle.cards import new_card_version
from operations.models import AuditEntry, Decision, Operation
from operations.vocabulary import Status

pytestmark = pytest.mark.django_db


def signed_in(minutes_ago: float, *, method: str = PASSWORD) -> SignIn:
    extra = {"issuer": "https://id.example.com", "subject": "248289761001"} if method == OIDC else {}
    return SignIn(method=method, at=timezone.now() - timedelta(minutes=minutes_ago), **extra)


def decide(esc, user, option: str, sign_in: SignIn | None, comment: str = ""):
    esc.refresh_from_db()
    return escalation_decide(
        escalation_id=esc.pk,
        user=user,
        sign_in=sign_in,
        option_id=option,
        card_version=esc.version,
        comment=comment,
    )


def entry_data(decision: Decision) -> dict:
    return json.loads(bytes(AuditEntry.objects.get(pk=decision.audit_entry_id).body))["data"]


def age_session(client, *, minutes: float) -> None:
    session = client.session
    session[signins.SIGN_IN] = signed_in(minutes).as_record()
    session.save()


# --- the rule, in the decision service ---------------------------------------------------------------


@pytest.mark.parametrize("option", ["close", "cancel_at_provider"])
def test_an_irreversible_decision_with_an_old_sign_in_is_refused_recorded_and_changes_nothing(stopped, alice, option):
    esc = stopped()
    result = decide(esc, alice, option, signed_in(16))

    assert result.refused and result.needs_fresh_sign_in and result.message == SIGN_IN_AGAIN
    assert Operation.objects.get(pk=esc.operation_id).status == Status.NEEDS_ATTENTION
    assert Operation.objects.get(pk=esc.operation_id).cancel_state == ""  # no cancel was sent
    data = entry_data(result.decision)
    assert data["reason"] == SIGN_IN_AGAIN and data["option"] == option
    assert data["authentication"]["method"] == PASSWORD  # the refusal says which sign-in was too old


def test_without_any_recorded_sign_in_an_irreversible_decision_is_refused(stopped, alice):
    esc = stopped()
    assert decide(esc, alice, "close", None).needs_fresh_sign_in
    assert Operation.objects.get(pk=esc.operation_id).status == Status.NEEDS_ATTENTION


def test_accepting_output_needs_a_fresh_sign_in_from_both_responders(stopped, alice, bob):
    esc = stopped("succeeded_no_result")
    assert decide(esc, alice, "accept_output", signed_in(20), comment="checked by hand").needs_fresh_sign_in
    assert decide(esc, alice, "accept_output", signed_in(1), comment="checked by hand").outcome == "awaiting_second"
    assert decide(esc, bob, "accept_output", signed_in(30), comment="agreed").needs_fresh_sign_in
    assert decide(esc, bob, "accept_output", signed_in(14), comment="agreed").outcome == "applied"
    assert Operation.objects.get(pk=esc.operation_id).status == Status.SUCCEEDED


def test_reversible_decisions_do_not_need_a_fresh_sign_in_but_record_it(stopped, alice):
    esc = stopped()
    sign_in = signed_in(180, method=OIDC)
    result = decide(esc, alice, "extend:15m:4", sign_in)

    assert result.outcome == "applied"
    assert result.decision.authentication == sign_in.as_record()
    assert entry_data(result.decision)["authentication"] == {
        "method": "oidc",
        "at": sign_in.as_record()["at"],
        "issuer": "https://id.example.com",
        "subject": "248289761001",
    }


def test_a_close_within_the_window_applies_and_records_how_the_decider_signed_in(stopped, alice, settings):
    settings.FRESH_SIGN_IN_MINUTES = 5
    esc = stopped()
    sign_in = signed_in(4.9, method=OIDC)
    result = decide(esc, alice, "close", sign_in)

    assert result.outcome == "applied"
    assert Decision.objects.get(pk=result.decision.pk).authentication == sign_in.as_record()
    assert entry_data(result.decision)["authentication"]["issuer"] == "https://id.example.com"


def test_a_sign_in_dated_in_the_future_is_not_fresh(clock):
    now = timezone.now()
    assert fresh_sign_in_refusal(sign_in=SignIn(method=PASSWORD, at=now + timedelta(seconds=59)), now=now) is None
    assert fresh_sign_in_refusal(sign_in=SignIn(method=PASSWORD, at=now + timedelta(minutes=5)), now=now) is not None


def test_the_bulk_check_is_the_same_rule(settings):
    # Bulk decisions call fresh_sign_in_refusal once for the whole batch before touching any card.
    settings.FRESH_SIGN_IN_MINUTES = 15
    now = timezone.now()
    assert fresh_sign_in_refusal(sign_in=SignIn(method=PASSWORD, at=now - timedelta(minutes=15)), now=now) is None
    stale = SignIn(method=PASSWORD, at=now - timedelta(minutes=15, seconds=1))
    assert fresh_sign_in_refusal(sign_in=stale, now=now) == SIGN_IN_AGAIN
    assert fresh_sign_in_refusal(sign_in=None, now=now) == SIGN_IN_AGAIN


# --- the card, the way back, the reports ----------------------------------------------------------------


def test_the_card_asks_to_sign_in_again_and_links_back_to_the_same_card(client, stopped, alice):
    esc = stopped()
    client.force_login(alice)
    age_session(client, minutes=20)
    answer = client.post(
        reverse("escalation_decide", args=[esc.pk]),
        {"option": "close", "version": esc.version, "where": "operation"},
        headers={"HX-Request": "true"},
    )

    assert answer.status_code == 403  # htmx swaps it in place of the card (templates/base.html)
    page = answer.content.decode()
    assert f'id="card-{esc.pk}"' in page and "needs a sign-in within the last 15 minutes" in page
    link = urlsplit(answer.context["reauth_url"])
    assert link.path == reverse("reauthenticate")
    back = parse_qs(link.query)["next"][0]
    assert back == f"/operations/{esc.operation_id}/?card={esc.pk}&v={esc.version}#card-{esc.pk}"
    assert Operation.objects.get(pk=esc.operation_id).status == Status.NEEDS_ATTENTION


def test_without_javascript_the_refusal_goes_to_the_sign_in_with_the_way_back(client, stopped, alice):
    esc = stopped()
    client.force_login(alice)
    age_session(client, minutes=20)
    answer = client.post(reverse("escalation_decide", args=[esc.pk]), {"option": "close", "version": esc.version})
    assert answer.status_code == 303
    assert answer["Location"].startswith(reverse("reauthenticate") + "?next=%2Foperations%2F")
    followed = client.get(answer["Location"])
    assert followed.status_code == 302 and followed["Location"].startswith("/accounts/login/?next=")
    assert "fresh=1" in followed["Location"]


def test_an_old_sign_in_shows_sign_in_again_in_place_of_the_confirm_button(client, stopped, alice):
    esc = stopped()
    client.force_login(alice)
    url = reverse("operation_detail", args=[esc.operation_id])
    assert "Yes, close — stop watching" in client.get(url).content.decode()

    age_session(client, minutes=16)
    page = client.get(url).content.decode()
    assert "Yes, close — stop watching" not in page
    assert 'data-testid="reauth-needed"' in page
    assert "Extend 15 min / 4 checks" in page  # reversible options stay


def test_coming_back_to_the_same_card_version_or_a_changed_one(client, stopped, alice):
    esc = stopped()
    client.force_login(alice)
    url = reverse("operation_detail", args=[esc.operation_id])
    same = client.get(url, {"card": esc.pk, "v": esc.version})
    assert same.context["flash"] == {"kind": "ok", "text": "You signed in again; the card is as you left it"}

    shown = esc.version
    new_card_version(escalation=esc)
    changed = client.get(url, {"card": esc.pk, "v": shown})
    assert changed.context["flash"]["kind"] == "warn"
    assert "state changed — review again" in changed.content.decode()


def test_the_password_confirmation_page_and_a_fresh_sign_in_after_it(client, stopped, alice):
    esc = stopped()
    client.force_login(alice)
    age_session(client, minutes=30)
    back = f"/operations/{esc.operation_id}/?card={esc.pk}&v={esc.version}"
    confirm = client.get(reverse("reauthenticate"), {"next": back}, follow=True)
    page = confirm.content.decode()
    assert "Confirm it's you" in page and 'value="alice" readonly' in page

    answer = client.post(reverse("login"), {"username": "alice", "password": "pw-alice", "next": back, "fresh": "1"})
    assert answer.status_code == 302 and answer["Location"] == back
    assert fresh_sign_in_refusal(sign_in=signins.current(client.session), now=timezone.now()) is None
    assert decide(esc, alice, "close", signins.current(client.session)).outcome == "applied"


def test_sign_in_again_never_sends_the_person_to_another_site(client, alice):
    client.force_login(alice)
    answer = client.get(reverse("reauthenticate"), {"next": "https://evil.example/phish"})
    assert answer.status_code == 302 and "evil.example" not in answer["Location"]


def test_reports_and_csv_say_how_the_decider_signed_in(client, stopped, alice):
    esc = stopped()
    sign_in = signed_in(2, method=OIDC)
    decide(esc, alice, "close", sign_in)
    client.force_login(alice)
    when = sign_in.at.strftime("%Y-%m-%d %H:%M:%S UTC")
    expected = f"single sign-on https://id.example.com as 248289761001, {when}"

    assert expected in client.get(reverse("operation_report", args=[esc.operation_id])).content.decode()
    assert expected in client.get(reverse("decision_history_report")).content.decode()
    csv = b"".join(client.get(reverse("decision_history_csv")).streaming_content).decode()
    header, row = csv.splitlines()[:2]
    assert header.endswith(",authentication,channel,channel_identity")
    assert '""issuer"": ""https://id.example.com""' in row


# --- over single sign-on, against the real test provider ------------------------------------------------


def _sso(client, op, username: str, *, browser: requests.Session, fresh: bool = False) -> object:
    """Sign in through the provider with `browser`'s session there; returns our callback's answer."""
    start = client.get("/oidc/authenticate/", {"next": "/", **({"fresh": "1"} if fresh else {})})
    back = urlsplit(op.authorize(start["Location"], username=username, browser=browser))
    return client.get(f"{back.path}?{back.query}")


def _close(client, esc) -> object:
    esc.refresh_from_db()
    return client.post(reverse("escalation_decide", args=[esc.pk]), {"option": "close", "version": esc.version})


@pytest.mark.integration
def test_a_silent_single_sign_on_without_auth_time_never_closes_a_card(client, oidc, stopped, clock):
    """A provider that leaves auth_time out (as some do unless asked with max_age) and signs its
    person in again without asking anything: that sign-in is not a fresh one, whenever it happened."""
    oidc.put_user("olga", groups=["oncall"], tamper="no_auth_time")
    esc = stopped()
    # The provider's ID tokens carry the real time: the clock runs from it again.
    clock.move_to(time_machine.escape_hatch.time.time(), tick=True)
    with requests.Session() as at_provider:
        assert _sso(client, oidc, "olga", browser=at_provider).status_code == 302
        assert signins.current(client.session).at is None  # the provider did not say when
        assert _close(client, esc).status_code == 303  # to "sign in again"

        # Hours later the session is stale; a plain sign-in at the provider asks for nothing.
        age_session(client, minutes=120)
        start = client.get("/oidc/authenticate/", {"next": "/"})
        silent = at_provider.get(start["Location"], allow_redirects=False)
        back = urlsplit(silent.headers["Location"])
        assert back.path == "/oidc/callback/"  # straight back: no password was asked
        assert client.get(f"{back.path}?{back.query}").status_code == 302

        refused = _close(client, esc)
        assert refused.status_code == 303 and refused["Location"].startswith(reverse("reauthenticate"))
        assert Operation.objects.get(pk=esc.operation_id).status == Status.NEEDS_ATTENTION
        attempt = Decision.objects.filter(escalation=esc).latest("pk")
        assert attempt.outcome == "refused" and attempt.authentication["at"] is None

        # A real fresh sign-in (prompt=login and max_age: the password again, and auth_time) may close.
        assert _sso(client, oidc, "olga", browser=at_provider, fresh=True).status_code == 302
        assert _close(client, esc).status_code == 303
    assert Operation.objects.get(pk=esc.operation_id).status == Status.CLOSED
