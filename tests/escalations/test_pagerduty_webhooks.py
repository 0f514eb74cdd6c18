"""POST /pagerduty/webhooks: only PagerDuty's signed v3 events act, once each; a refused request is
401, counted, and changes nothing. An acknowledgement in PagerDuty acknowledges the card as the
person PAGERDUTY_USER_EMAILS names, a resolve never decides it, an unacknowledgement gives back
only what PagerDuty took. The channel and the PagerDuty identity show in the history, the exports
and the audit story."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from demo.fakepagerduty import webhook_event, webhook_signature, webhook_user
from escalations.oncall import slack_refusals
from escalations.oncall.channels.pagerduty import card_of_dedup_key, dedup_key
from escalations.oncall.pagerduty_webhooks import Refusal, verify
from operations.audit.story import operation_story
from operations.decisions import ownership
from operations.models import AuditEntry, CardActivity, Escalation, PagerDutyEventSeen, SlackRefusal
from tests.support import CANARY_PD_WEBHOOK

SECRET = CANARY_PD_WEBHOOK
OLD_SECRET = "pd-old-secret-being-rotated-out"
PREFIX = "pd-test"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _counts_start_empty():
    slack_refusals.forget()
    yield
    slack_refusals.forget()


@pytest.fixture
def subscription(settings):
    settings.PAGERDUTY_WEBHOOK_SECRETS = [SECRET]
    settings.PAGERDUTY_DEDUP_PREFIX = PREFIX
    settings.PAGERDUTY_USER_EMAILS = {"PALICE": "alice@example.test", "PVERA": "vera@example.test"}
    return settings


@pytest.fixture
def people(alice, viewer):
    alice.email, viewer.email = "alice@example.test", "Vera@Example.test"
    alice.save(update_fields=["email"])
    viewer.save(update_fields=["email"])
    return alice, viewer


def event(esc: Escalation, event_type: str = "incident.acknowledged", user: str = "PALICE", **kwargs) -> bytes:
    agent = webhook_user(user, {"PALICE": "Alice A.", "PVERA": "Vera V."}.get(user, "Someone")) if user else None
    kwargs.setdefault("occurred_at", timezone.now())
    key = dedup_key(instance=PREFIX, escalation_id=esc.pk)
    return webhook_event(event_type=event_type, dedup_key=key, agent=agent, **kwargs)


def post(client, body: bytes, signature: str | None):
    meta = {} if signature is None else {"HTTP_X_PAGERDUTY_SIGNATURE": signature}
    return client.post("/pagerduty/webhooks", body, content_type="application/json", **meta)


def signed(client, body: bytes, secrets=(SECRET,)):
    return post(client, body, webhook_signature(body=body, secrets=secrets))


def test_without_a_secret_the_endpoint_does_not_exist(client, settings) -> None:
    settings.PAGERDUTY_WEBHOOK_SECRETS = []
    assert post(client, b"{}", webhook_signature(body=b"{}", secrets=[SECRET])).status_code == 404


# --- the signature matrix ------------------------------------------------------------------------------

BODY = b'{"event":{"id":"e1"}}'
GOOD = webhook_signature(body=BODY, secrets=[SECRET])
MATRIX = [
    ("valid", GOOD, BODY, [SECRET], None),
    (
        "rotation: the new signature among two",
        webhook_signature(body=BODY, secrets=[OLD_SECRET, SECRET]),
        BODY,
        [SECRET],
        None,
    ),
    (
        "rotation: pollerdash holds both secrets",
        webhook_signature(body=BODY, secrets=[OLD_SECRET]),
        BODY,
        [SECRET, OLD_SECRET],
        None,
    ),
    (
        "spaces after the commas",
        webhook_signature(body=BODY, secrets=["x", SECRET]).replace(",", ", "),
        BODY,
        [SECRET],
        None,
    ),
    ("missing", None, BODY, [SECRET], Refusal.MISSING_SIGNATURE),
    ("empty", "  ", BODY, [SECRET], Refusal.MISSING_SIGNATURE),
    ("wrong secret", webhook_signature(body=BODY, secrets=["another"]), BODY, [SECRET], Refusal.BAD_SIGNATURE),
    (
        "the old secret once rotated out",
        webhook_signature(body=BODY, secrets=[OLD_SECRET]),
        BODY,
        [SECRET],
        Refusal.BAD_SIGNATURE,
    ),
    ("body tampered", GOOD, BODY.replace(b"e1", b"e2"), [SECRET], Refusal.BAD_SIGNATURE),
    ("signature truncated", GOOD[:-1], BODY, [SECRET], Refusal.BAD_SIGNATURE),
    ("v0 scheme", "v0=" + GOOD[3:], BODY, [SECRET], Refusal.BAD_SIGNATURE),
    ("bare hex", GOOD[3:], BODY, [SECRET], Refusal.BAD_SIGNATURE),
    ("upper-case hex", "v1=" + GOOD[3:].upper(), BODY, [SECRET], Refusal.BAD_SIGNATURE),
    ("too large", webhook_signature(body=b"x" * 65537, secrets=[SECRET]), b"x" * 65537, [SECRET], Refusal.TOO_LARGE),
]


@pytest.mark.parametrize(("case", "header", "body", "secrets", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_signature_matrix(case, header, body, secrets, expected) -> None:
    assert verify(secrets=secrets, body=body, header=header) == expected, case


# An oversized body never reaches the view: the ASGI layer answers 413 first (pollerdash/body_limits.py;
# tests/integration/test_pagerduty_processes.py sends one to a real web process).
REFUSED = [m for m in MATRIX if m[4] is not None and m[0] != "too large"]


@pytest.mark.parametrize(("case", "header", "body", "secrets", "expected"), REFUSED, ids=[m[0] for m in REFUSED])
def test_a_refused_request_is_401_counted_and_changes_nothing(
    case, header, body, secrets, expected, client, subscription, people, stopped
) -> None:
    esc = stopped()
    real = event(esc)
    # The refused variants carry a real acknowledgement whenever the case is about the body.
    sent = real if body == BODY else body
    if header == GOOD:
        header = webhook_signature(body=real, secrets=[SECRET]) if body == BODY else header
    if case == "body tampered":
        header, sent = webhook_signature(body=real, secrets=[SECRET]), real.replace(b"PALICE", b"PVERA")
    entries = AuditEntry.objects.count()
    answer = post(client, sent, header)
    assert answer.status_code == 401 and answer.content == b""
    esc.refresh_from_db()
    assert esc.acknowledged_by is None and AuditEntry.objects.count() == entries
    assert not PagerDutyEventSeen.objects.exists()
    [refusal] = SlackRefusal.objects.all()
    assert (refusal.reason, refusal.count) == (f"pagerduty:{expected}", 1)


def test_refusals_show_on_the_system_panel_as_pagerduty_s(client, subscription, alice) -> None:
    post(client, BODY, None)
    client.force_login(alice)
    page = client.get("/system/").content.decode()
    assert "Slack interaction and PagerDuty webhook requests refused" in page
    assert "<td>PagerDuty</td><td>missing_signature</td><td>1</td>" in page


# --- acknowledged ---------------------------------------------------------------------------------------


def test_an_acknowledgement_in_pagerduty_acknowledges_the_card_as_the_matched_person_once(
    client, subscription, people, stopped
) -> None:
    alice, _ = people
    esc = stopped()
    body = event(esc)
    assert signed(client, body).status_code == 200
    esc.refresh_from_db()
    assert esc.acknowledged_by == alice and esc.first_response_channel == "pagerduty"
    [activity] = CardActivity.objects.filter(escalation=esc)
    assert (activity.kind, activity.user, activity.channel, activity.channel_identity) == (
        "acknowledged",
        alice,
        "pagerduty",
        "pagerduty:PALICE",
    )
    entry = json.loads(bytes(AuditEntry.objects.get(pk=activity.audit_entry_id).body))
    assert entry["actor"] == {"kind": "user", "id": "alice"}
    assert (entry["data"]["channel"], entry["data"]["channel_identity"]) == ("pagerduty", "pagerduty:PALICE")
    # Replayed (PagerDuty's retry, or a captured request) after alice gave the card back: nothing.
    ownership.card_unacknowledge(escalation_id=esc.pk, user=alice)
    entries = AuditEntry.objects.count()
    assert signed(client, body).status_code == 200
    esc.refresh_from_db()
    assert esc.acknowledged_by is None and AuditEntry.objects.count() == entries


def test_the_channel_shows_in_the_history_the_export_and_the_story(client, subscription, people, stopped) -> None:
    alice, _ = people
    esc = stopped()
    signed(client, event(esc))
    signed(client, event(esc, "incident.resolved"))
    client.force_login(alice)
    history = client.get("/history/").content.decode()
    assert "via PagerDuty (pagerduty:PALICE)" in history
    assert "resolved in PagerDuty by Alice A.; this card still needs a decision" in history
    rows = list(
        csv.DictReader(io.StringIO(b"".join(client.get("/history/card-activity.csv").streaming_content).decode()))
    )
    assert [(r["kind"], r["user"], r["channel"], r["channel_identity"]) for r in rows] == [
        ("acknowledged", "alice", "pagerduty", "pagerduty:PALICE"),
        ("notice", "", "pagerduty", "pagerduty:PALICE"),
    ]
    story = [line.text for line in operation_story(operation_id=esc.operation_id)]
    assert "user:alice acknowledged the card: on it (no more reminders) (via PagerDuty (pagerduty:PALICE))" in story
    assert any(t.startswith("pagerduty:PALICE: 'resolved in PagerDuty by Alice A.;") for t in story)
    card = client.get(f"/operations/{esc.operation_id}/").content.decode()
    assert "resolved in PagerDuty by Alice A.; this card still needs a decision" in card


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("PVERA", "vera (PagerDuty user Vera V. (PVERA)) can read cards but not acknowledge them"),
        ("PNOBODY", "PagerDuty user Someone (PNOBODY) is not in PAGERDUTY_USER_EMAILS"),
    ],
    ids=["a viewer's email", "a user nobody mapped"],
)
def test_a_viewer_or_an_unknown_user_changes_nothing_and_the_card_says_why(
    client, subscription, people, stopped, user, why
) -> None:
    esc = stopped()
    assert signed(client, event(esc, user=user)).status_code == 200
    esc.refresh_from_db()
    assert esc.acknowledged_by is None and esc.first_response_at is None
    [notice] = CardActivity.objects.filter(escalation=esc)
    assert notice.kind == "notice" and notice.user is None and why in notice.text


def test_two_accounts_with_the_email_change_nothing(client, subscription, people, make_user, stopped) -> None:
    make_user("alice2", email="ALICE@example.test")
    esc = stopped()
    signed(client, event(esc))
    esc.refresh_from_db()
    assert esc.acknowledged_by is None
    assert "several pollerdash accounts" in CardActivity.objects.get(escalation=esc).text


def test_a_card_someone_else_holds_is_not_taken_over_from_the_pager(client, subscription, people, bob, stopped) -> None:
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob)
    signed(client, event(esc))
    esc.refresh_from_db()
    assert esc.acknowledged_by == bob
    assert "bob holds this card and keeps it" in CardActivity.objects.get(kind="notice").text


def test_pollerdash_s_own_acknowledgement_coming_back_changes_nothing(client, subscription, people, stopped) -> None:
    alice, _ = people
    esc = stopped()
    ownership.card_acknowledge(escalation_id=esc.pk, user=alice)
    integration = {"id": "PINTEG", "type": "inbound_integration_reference", "summary": "Events API v2"}
    key = dedup_key(instance=PREFIX, escalation_id=esc.pk)
    body = webhook_event(
        event_type="incident.acknowledged", dedup_key=key, agent=integration, occurred_at=timezone.now()
    )
    signed(client, body)
    assert CardActivity.objects.filter(escalation=esc).count() == 1


def test_an_event_for_another_installation_s_card_or_too_old_changes_nothing(
    client, subscription, people, stopped
) -> None:
    esc = stopped()
    other = webhook_event(
        event_type="incident.acknowledged",
        dedup_key=dedup_key(instance="someone-else", escalation_id=esc.pk),
        agent=webhook_user("PALICE", "Alice A."),
    )
    assert signed(client, other).status_code == 200
    stale = event(esc, occurred_at=timezone.now() - timedelta(days=3))
    assert signed(client, stale).status_code == 200
    esc.refresh_from_db()
    assert esc.acknowledged_by is None and not CardActivity.objects.exists()
    assert card_of_dedup_key(dedup_key(instance=PREFIX, escalation_id=7), instance=PREFIX) == 7
    assert card_of_dedup_key(f"pollerdash:{PREFIX}:card:7x", instance=PREFIX) is None


# --- resolved and unacknowledged ------------------------------------------------------------------------


def test_a_resolve_in_pagerduty_never_decides_the_card(client, subscription, people, stopped) -> None:
    esc = stopped()
    assert signed(client, event(esc, "incident.resolved")).status_code == 200
    esc.refresh_from_db()
    assert esc.state == Escalation.State.OPEN and esc.closed_at is None
    assert not esc.decisions.exists()
    [notice] = CardActivity.objects.filter(escalation=esc)
    assert notice.text == "resolved in PagerDuty by Alice A.; this card still needs a decision"


def test_an_unacknowledgement_gives_back_what_pagerduty_took_and_only_that(
    client, subscription, people, bob, stopped
) -> None:
    alice, _ = people
    esc = stopped()
    signed(client, event(esc))
    # PagerDuty's acknowledgement timeout: no agent.
    assert signed(client, event(esc, "incident.unacknowledged", user="")).status_code == 200
    esc.refresh_from_db()
    assert esc.acknowledged_by is None
    given_back = CardActivity.objects.get(kind="unacknowledged")
    assert (given_back.user, given_back.channel) == (alice, "pagerduty")
    # bob acknowledges on the dashboard: an unacknowledgement in PagerDuty leaves the card with him.
    ownership.card_acknowledge(escalation_id=esc.pk, user=bob)
    signed(client, event(esc, "incident.unacknowledged", user=""))
    esc.refresh_from_db()
    assert esc.acknowledged_by == bob
    assert "bob acknowledged the card in pollerdash and still holds it" in CardActivity.objects.get(kind="notice").text


# --- the demo's PagerDuty: a newcomer acknowledges from the pager ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_demo_pagerduty_page_sends_a_signed_acknowledgement_that_arrives(
    live_server, subscription, people, stopped, clock
) -> None:
    import httpx

    from demo.receivers import DemoPagerDuty

    subscription.PAGERDUTY_USER_EMAILS = {"PDEMORESP1": "alice@example.test"}
    esc = stopped()
    clock.move_to(time_machine_escape(), tick=True)
    demo = DemoPagerDuty(
        accepted_keys=["k"], webhook_url=f"{live_server.url}/pagerduty/webhooks", webhook_secret=SECRET
    ).start()
    try:
        key = dedup_key(instance=PREFIX, escalation_id=esc.pk)
        form = {"token": demo.click_token, "dedup_key": key, "user": "PDEMORESP1", "event": "incident.acknowledged"}
        assert httpx.post(f"{demo.base_url}/demo/webhook", data={**form, "token": "guess"}).status_code == 403
        assert Escalation.objects.get(pk=esc.pk).acknowledged_by is None
        answer = httpx.post(f"{demo.base_url}/demo/webhook", data=form)
        assert answer.status_code == 303
        card = Escalation.objects.get(pk=esc.pk)
        assert card.acknowledged_by.username == "alice"
        assert card.activities.get().channel_identity == "pagerduty:PDEMORESP1"
    finally:
        demo.stop()


def time_machine_escape() -> float:
    import time_machine

    return time_machine.escape_hatch.time.time()
